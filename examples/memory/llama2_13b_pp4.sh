#!/bin/bash
# The seed walk-through: Llama-2-13B dimensions, 4k context, pipeline parallel over 4 GPUs.
# `guard estimate --gpu A100-80GB examples/memory/llama2_13b_pp4.sh`: stage 0 holds 4 microbatches of
# activations and does not fit; memory falls stage by stage. See llama2_13b_pp4_dp2.sh for the fix.
GPUS_PER_NODE=4

torchrun --nproc-per-node $GPUS_PER_NODE --nnodes 1 pretrain_gpt.py \
    --num-layers 40 --hidden-size 5120 --num-attention-heads 40 --ffn-hidden-size 13824 \
    --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --tokenizer-type Llama2Tokenizer --tokenizer-model /data/tokenizer.model --vocab-size 32000 \
    --seq-length 4096 --max-position-embeddings 4096 \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 \
    --micro-batch-size 1 --global-batch-size 64 \
    --bf16 --attention-dropout 0.0 --hidden-dropout 0.0 \
    --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --train-iters 1000 \
    --data-path /data/redpajama_text_document --split 99,1,0

#!/bin/bash
# Mixtral 8x7B with expert parallelism: EP 8 inside each node, PP 4 across nodes, 64 GPUs.
# guard estimate --gpu H100-SXM examples/memory/mixtral_8x7b_ep8.sh
export CUDA_DEVICE_MAX_CONNECTIONS=1  # TP/CP overlap needs in-order kernel launches
torchrun --nproc-per-node 8 --nnodes 8 --node-rank $NODE_RANK --master-addr $MASTER --master-port 6000 \
    pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 \
    --ffn-hidden-size 14336 --swiglu --normalization RMSNorm --position-embedding-type rope \
    --disable-bias-linear --untie-embeddings-and-output-weights \
    --tokenizer-type Llama2Tokenizer --tokenizer-model /data/mixtral/tokenizer.model --vocab-size 32000 \
    --num-experts 8 --moe-router-topk 2 --moe-token-dispatcher-type alltoall --moe-grouped-gemm \
    --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2 \
    --expert-model-parallel-size 8 --pipeline-model-parallel-size 4 --use-distributed-optimizer \
    --seq-length 4096 --max-position-embeddings 32768 --micro-batch-size 1 --global-batch-size 256 \
    --bf16 --attention-dropout 0.0 --hidden-dropout 0.0 \
    --lr 1e-4 --train-iters 10000 --data-path /data/mixtral_text_document

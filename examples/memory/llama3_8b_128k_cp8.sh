#!/bin/bash
# Long context: Llama-3-8B at 128k tokens. Context parallel 8 x tensor parallel 4 (sequence parallel) on 32 GPUs.
# guard estimate --gpu H100-SXM examples/memory/llama3_8b_128k_cp8.sh
export CUDA_DEVICE_MAX_CONNECTIONS=1  # TP/CP overlap needs in-order kernel launches
torchrun --nproc-per-node 8 --nnodes 4 --node-rank $NODE_RANK --master-addr $MASTER --master-port 6000 \
    pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 \
    --ffn-hidden-size 14336 --swiglu --normalization RMSNorm --position-embedding-type rope \
    --rotary-base 500000 --disable-bias-linear --untie-embeddings-and-output-weights \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B --vocab-size 128256 \
    --tensor-model-parallel-size 4 --sequence-parallel --context-parallel-size 8 \
    --use-distributed-optimizer --recompute-granularity selective \
    --seq-length 131072 --max-position-embeddings 131072 --micro-batch-size 1 --global-batch-size 8 \
    --bf16 --attention-dropout 0.0 --hidden-dropout 0.0 --cross-entropy-loss-fusion \
    --lr 1e-5 --train-iters 1000 --data-path /data/long_text_document

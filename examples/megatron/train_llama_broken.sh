#!/bin/bash
# A Llama-3-8B launch with the mistakes guard is built to catch (see docs/megatron.md).
GPUS_PER_NODE=8
NNODES=2

GPT_ARGS="
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32
    --num-query-groups 8
    --seq-length 8192 --max-position-embeddings 4096
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 3
    --micro-batch-size 1 --global-batch-size 100
    --recompute-granularity full
    --bf16 true
"

torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES pretrain_gpt.py $GPT_ARGS \
    --use-flash-attn-v2 --lr 3e-4

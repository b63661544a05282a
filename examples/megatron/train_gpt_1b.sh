#!/bin/bash
# GPT 1.3B on 2 nodes x 8 GPUs: TP 2, PP 2, DP 4.
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8

export CUDA_DEVICE_MAX_CONNECTIONS=1

TP=${TP:-2}
PP=${PP:-2}
MICRO_BATCH=2
GLOBAL_BATCH=$((MICRO_BATCH * 4 * 16))

MODEL_ARGS=(
    --num-layers 24
    --hidden-size 2048
    --num-attention-heads 16
    --seq-length 2048
    --max-position-embeddings 2048
    --position-embedding-type rope
    --normalization RMSNorm
    --swiglu
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP
    --pipeline-model-parallel-size $PP
    --sequence-parallel
    --use-distributed-optimizer
)
TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH
    --global-batch-size $GLOBAL_BATCH
    --train-iters 100000
    --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 2000
    --bf16
    --recompute-granularity selective
)

srun torchrun --nnodes $SLURM_NNODES --nproc-per-node 8 \
    --rdzv-backend c10d --rdzv-endpoint "$(hostname):29500" \
    pretrain_gpt.py \
    "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${TRAINING_ARGS[@]}" \
    --mock-data --tokenizer-type NullTokenizer --vocab-size 50257

#!/bin/bash
# Megatron-DeepSpeed GPT with ZeRO-3 written into a heredoc config, but the pipeline engine on.
GLOBAL_BATCH=256
MICRO_BATCH=4
ZERO_STAGE=3

cat <<EOT > ds_config.json
{
  "train_batch_size": $GLOBAL_BATCH,
  "train_micro_batch_size_per_gpu": $MICRO_BATCH,
  "zero_optimization": {"stage": $ZERO_STAGE},
  "fp16": {"enabled": true}
}
EOT

deepspeed --num_gpus 8 pretrain_gpt.py \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 \
    --num-layers 24 --hidden-size 1024 --num-attention-heads 16 \
    --seq-length 1024 --max-position-embeddings 1024 \
    --micro-batch-size $MICRO_BATCH --global-batch-size 512 \
    --bf16 \
    --deepspeed --deepspeed_config ds_config.json --zero-stage 1

#!/bin/bash
# GPT-3 175B as in Narayanan et al. 2021 / Korthikanti et al. 2022: TP 8 x PP 8 with 3 virtual stages per rank,
# sequence parallel + selective recompute, distributed optimizer, 1024 H100s (DP 16, 96 microbatches per step).
# guard estimate --gpu H100-SXM examples/memory/gpt3_175b_tp8_pp8_vpp.sh
#SBATCH --nodes=128
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
export CUDA_DEVICE_MAX_CONNECTIONS=1  # TP/CP overlap needs in-order kernel launches

GPT_ARGS=(
    --num-layers 96 --hidden-size 12288 --num-attention-heads 96
    --seq-length 2048 --max-position-embeddings 2048
    --tokenizer-type GPT2BPETokenizer --vocab-file /data/gpt2-vocab.json --merge-file /data/gpt2-merges.txt
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8
    --num-layers-per-virtual-pipeline-stage 4 --sequence-parallel
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
)
TRAIN_ARGS=(
    --micro-batch-size 1 --global-batch-size 1536 --bf16
    --recompute-granularity selective
    --lr 0.6e-4 --min-lr 0.6e-5 --lr-decay-style cosine --train-iters 500000
    --data-path /data/pile_text_document --split 949,50,1
)

srun python pretrain_gpt.py "${GPT_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${TRAIN_ARGS[@]}"

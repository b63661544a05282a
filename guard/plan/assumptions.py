"""What guard plan assumes, said once, for --explain (text and JSON)."""

from __future__ import annotations

ASSUMPTIONS = (
    "the global batch and the sequence length are the job's; the world size is the launcher's",
    "sequence parallel is on whenever TP > 1 and the distributed optimizer whenever DP > 1 (each moves the "
    "bytes its alternative moves and holds less)",
    "TP never leaves a node; nodes hold consecutive ranks in Megatron's tp-cp-ep-dp-pp order",
    "a GEMM runs at the GPU's measured maximum matmul rate (MAMF) times its fall with size (and FP8's with K) "
    "and its wave quantization, or at HBM speed when its operands take longer to move (roofline); "
    "memory-bound kernels move the bytes they read and write at the measured HBM fraction, plus a tiny-kernel "
    "floor (schemas/gpus/kernels.json names the source of each)",
    "the backward runs two GEMMs per forward GEMM and moves 1.5x the forward's bytes in memory-bound kernels",
    "flash attention runs at the published flash/cuDNN rate for its sequence and head dim (causal: half the "
    "square); Transformer Engine's auto/fused backend is cuDNN's on Hopper and later, FlashAttention-2 elsewhere; "
    "unfused attention materialises the scores",
    "TP/SP collectives are exposed unless --tp-comm-overlap (then hidden behind the layer's linear GEMMs); EP and "
    "Ulysses collectives are exposed; CP's ring exchange hides behind the attention core; DP reduce/gather hides "
    "behind the last backward/first forward only with --overlap-grad-reduce/--overlap-param-gather (DeepSpeed: "
    "overlap_comm, always for ZeRO-3)",
    "collectives at NCCL's measured bus bandwidth for their message size (NVLS for in-node all-reduce on "
    "NVLink 4 and 5); a group leaving the NVLink domain (the node, or 72 GPUs on NVL72) runs at each GPU's NIC",
    "the host issues every kernel (megatron-core's host time per kernel, measured, plus cuLaunchKernel); a "
    "microbatch takes the longer of its GPU time and its host time, both when MoE's token counts make the host "
    "wait (CUDA graphs: one graph launch each way)",
    "the pipeline is replayed op by op in megatron-core's 1F1B/interleaved order for the layouts shown; the "
    "search ranks with m x (slowest stage) + (the other stages) / v",
    "per step: the gradient norm (--clip-grad), --log-num-zeros-in-grad and --log-params-norm passes, the gradient "
    "buffer's reset and the optimizer step; MoE routing is balanced unless --moe-imbalance states the busiest "
    "expert-parallel rank's share",
    "not priced: Python logging, timers and data loading, stragglers and network contention")

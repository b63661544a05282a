"""What guard plan assumes, said once, for --explain (text and JSON)."""

from __future__ import annotations

ASSUMPTIONS = (
    "the global batch and the sequence length are the job's; the world size is the launcher's",
    "sequence parallel is on whenever TP > 1 and the distributed optimizer whenever DP > 1 (each moves the "
    "bytes its alternative moves and holds less)",
    "TP never leaves a node; nodes hold consecutive ranks in Megatron's tp-cp-ep-dp-pp order",
    "a GEMM runs at the catalog's efficiency for its size times its wave quantization, or at HBM speed when its "
    "operands take longer to move (roofline); memory-bound kernels move the bytes they read and write",
    "the backward runs two GEMMs per forward GEMM and moves 1.5x the forward's bytes in memory-bound kernels",
    "flash attention skips the masked half of the causal square; unfused attention materialises the scores",
    "TP/SP, EP and Ulysses collectives are not overlapped with compute; CP's ring exchange hides behind the "
    "attention core; DP reduce/gather hides behind the last backward/first forward only with "
    "--overlap-grad-reduce/--overlap-param-gather (DeepSpeed: overlap_comm, always for ZeRO-3)",
    "ring collectives at the catalog's link efficiency; a group spanning nodes runs at each GPU's NIC",
    "the pipeline is replayed op by op in megatron-core's 1F1B/interleaved order for the layouts shown; the "
    "search ranks with m x (slowest stage) + (the other stages) / v",
    "not priced: per-step fixed costs (kernel launches, Python, logging, data loading: 0.05-0.2 s a step on "
    "H100/A100 in Megatron-LM's CI runs, bench/plan_gpu_truth.py), TP communication overlap, CUDA graphs, "
    "FP8, stragglers and network contention",
)

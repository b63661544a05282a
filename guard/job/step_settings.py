"""What a job's flags say about the speed of its step but not its memory (read once, priced by guard/plan)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StepSettings:
    """FP8 GEMMs, TP communication overlap, CUDA graphs, the attention backend and the per-step passes."""

    fp8: str | None = None  # --fp8 e4m3 | hybrid: Transformer Engine's linears run FP8 GEMMs
    fp8_recipe: str = "delayed"  # delayed | tensorwise | mxfp8 | blockwise (each adds its own cast kernels)
    tp_comm_overlap: bool = False  # --tp-comm-overlap: TE's userbuffers overlap TP/SP collectives with GEMMs
    cuda_graphs: bool = False  # --cuda-graph-impl local | transformer_engine (or --enable-cuda-graph): no per-kernel
    #                            issue from the host for the captured layers
    attention_backend: str = "auto"  # --attention-backend: auto | flash | fused | unfused | local
    torch_softmax: bool = False  # megatron's unfused attention without its fused softmax kernel
    #                              (--no-masked-softmax-fusion): torch's masked_fill and softmax, eager passes
    log_params_norm: bool = False  # one pass over the parameters (calc_params_l2_norm) each logged step
    log_num_zeros_in_grad: bool = False  # one pass over the gradients each step
    clip_grad: float = 1.0  # > 0: the gradient norm (one pass over the gradients) and its scaling
    moe_imbalance: float = 1.0  # the busiest expert's tokens over the balanced share (1.0: balanced, stated)

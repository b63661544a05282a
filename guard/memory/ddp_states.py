"""Model states of a full fine-tuning job under the HF Trainer without DeepSpeed: torch DDP and torch's AdamW.

No engine casts the weights and no optimizer keeps a master copy. The weights stay in the dtype the trainer loaded
them in (guard/job/ddp_weights.py); autograd's gradients match them; torch's AdamW creates exp_avg and exp_avg_sq
with zeros_like(param) (torch/optim/adam.py _init_group), so in that dtype too (other optimizers: trainer_optim.py). DDP's reducer keeps its gradient
buckets beside the gradients (gradient_as_bucket_view False: accelerate's DistributedDataParallelKwargs default)
when more than one rank trains. The foreach AdamW (optim adamw_torch) allocates sqrt(exp_avg_sq) as new tensors
during the step (_multi_tensor_adam: torch._foreach_sqrt); the fused one (adamw_torch_fused, transformers' default
with torch >= 2.8) works in place.
"""

from __future__ import annotations

from guard.job.param_groups import hf_tensors
from guard.job.trainer_optim import TORCH_ADAMW, named, state_bytes
from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory.params import Inventory


BUCKETS = "DDP gradient buckets (a copy of the gradients)"


def ddp_terms(setup: TrainingJob, inv: Inventory) -> tuple[dict[str, int], dict[str, int], str]:
    """(device terms, what the step adds, the dtype they are in)."""
    psi = inv.total
    dtype = setup.weights_dtype or setup.params_dtype
    w = DTYPE_BYTES[dtype]
    opt = named(setup.trainer_optim or "adamw_torch_fused")
    if not opt.family:  # an optimizer guard does not price: named unmodelled by the reader, priced as AdamW
        opt = named("adamw_torch_fused")
    tensors = [n for _, n in hf_tensors(setup.arch) or []] if setup.arch is not None else []
    if sum(tensors) != psi:
        tensors = [psi]  # the module order is unknown: one tensor (exact for torch's optimizers)
    terms = {"parameters": psi * w, "gradients": psi * w, "optimizer moments": state_bytes(opt, tensors, w)}
    if setup.dp > 1:
        terms[BUCKETS] = psi * w
    step = {"torch AdamW sqrt(exp_avg_sq) temporaries (foreach)": psi * w} \
        if opt.name in TORCH_ADAMW and opt.impl == "torch" else {}
    return terms, step, dtype

"""Host RAM the HF Trainer's model save holds per rank (Trainer.save_model, transformers 5.24, DeepSpeed 0.19.8).

What each path copies to the host, read from the code that allocates it:
- DeepSpeed ZeRO-3 + peft: save_model calls engine._zero3_consolidated_16bit_state_dict(
  exclude_frozen_parameters=True) (trainer.py: save_model): every module's weights are gathered one module at a
  time, and global rank 0 alone keeps `param.detach().cpu()` of the trainable ones (runtime/engine.py). The
  frozen base is gathered on the GPU and dropped: only the adapter reaches the host, in its own dtype (fp32,
  built after zero.Init). stage3_gather_16bit_weights_on_model_save is not consulted on this path.
- DeepSpeed ZeRO-3, full fine-tuning: accelerate's Accelerator.get_state_dict calls the same function without
  the filter when stage3_gather_16bit_weights_on_model_save is true: the whole model on rank 0's host. When false
  it raises ValueError, and save_model writes an empty state dict and engine.save_checkpoint instead.
- DeepSpeed ZeRO 0-2 (peft or not): Accelerator.get_state_dict returns clone_tensors_for_torch_save(
  unwrap_model(model).state_dict()) (deepspeed/checkpoint/utils.py): a CPU copy of the whole state dict, frozen
  base included, on every rank at once (save_model calls it before any should_save test). Rank 0 then saves
  from the host; peft's save_pretrained keeps only the adapter keys, but the copy is already made.
- No DeepSpeed (torch DDP): only rank 0 saves (Trainer._save returns on the others). peft writes the adapter:
  safetensors' save_file moves each GPU tensor to the host and keeps them all until the file is written
  (safetensors/torch.py: _flatten_as_ptr, _to_ndarray). A full model is written shard by shard
  (modeling_utils.py: save_pretrained, max_shard_size "50GB" by default, which Trainer._save does not change):
  the largest shard is on the host at once.
Tensors already on the host (the ZeRO-3 gather, the clone) are written without another copy (_to_ndarray takes
a CPU tensor's pointer). save_only_model: false adds engine.save_checkpoint after save_model: torch.save moves one
storage at a time to the host (torch/serialization.py), a transient not priced here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from guard.job.adapter import trainable_count
from guard.job.param_groups import hf_tensors
from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory.adapter_states import frozen_bytes, trainable_dtype
from guard.memory.params import model_param_count

# transformers modeling_utils.py save_pretrained(max_shard_size="50GB"), parsed by huggingface_hub's
# parse_size_to_int as decimal gigabytes
MAX_SHARD_BYTES = 50 * 10**9
GATHER_KEY = "stage3_gather_16bit_weights_on_model_save"


@dataclass(frozen=True)
class SaveHost:
    """Bytes a model save holds on one rank's host: global rank 0, and each other rank."""

    rank0: int
    other_ranks: int
    what: str  # what is copied, for the text report
    source: str  # the code path, file:function


def full_state_dict_bytes(setup: TrainingJob) -> int:
    """The whole model's state dict as the training holds it: the frozen base as stored (quantized or in the
    model's dtype) and the adapter in its training dtype; without an adapter every weight in params_dtype."""
    if setup.adapter is None:
        return model_param_count(setup.arch) * DTYPE_BYTES[setup.params_dtype]
    base = sum(frozen_bytes(_unsharded(setup)).values())
    return base + adapter_bytes(setup)


def adapter_bytes(setup: TrainingJob) -> int:
    """The LoRA tensors (peft's trainable parameters) in the dtype they train in (adapter_states.trainable_dtype)."""
    return trainable_count(setup.adapter, setup.arch) * DTYPE_BYTES[trainable_dtype(setup)]


def largest_shard_bytes(setup: TrainingJob, limit: int = MAX_SHARD_BYTES) -> int:
    """huggingface_hub split_state_dict_into_shards_factory: tensors in state-dict order fill a shard until the
    next one would pass `limit`; a tensor larger than `limit` is a shard of its own."""
    p_b = DTYPE_BYTES[setup.params_dtype]
    tensors = hf_tensors(setup.arch)
    if not tensors:  # module order unknown: the model as one shard, capped by the limit
        return min(full_state_dict_bytes(setup), limit)
    largest = current = 0
    for _, numel in tensors:
        size = numel * p_b
        if size > limit:
            largest = max(largest, size)
            continue
        if current + size > limit:
            largest, current = max(largest, current), 0
        current += size
    return max(largest, current)


def save_host(setup: TrainingJob) -> SaveHost | None:
    """What one model save (Trainer.save_model, at every checkpoint) holds on the hosts; None for a job the HF
    Trainer does not save (Megatron's own checkpointing)."""
    adapter = setup.adapter is not None
    if setup.framework != "deepspeed" and not setup.hf_ddp:
        return None
    if not setup.hf_saves or setup.hf_fsdp:  # another trainer's save, or FSDP's state-dict gather: not priced
        return None
    if setup.hf_ddp:
        if adapter:
            return SaveHost(adapter_bytes(setup), 0, "the adapter's tensors (GPU to host for safetensors)",
                            "peft save_pretrained; safetensors torch.py: _to_ndarray")
        return SaveHost(largest_shard_bytes(setup), 0, "the largest 50 GB safetensors shard (GPU to host)",
                        "transformers modeling_utils.py: save_pretrained; safetensors torch.py: _to_ndarray")
    if setup.zero_stage == 3:
        if adapter:
            return SaveHost(adapter_bytes(setup), 0, "the adapter alone, gathered; the frozen base is not copied",
                            "transformers trainer.py: save_model; deepspeed runtime/engine.py: "
                            "_zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True)")
        if setup.zero_keys.get(GATHER_KEY) is True:
            return SaveHost(full_state_dict_bytes(setup), 0, "the whole model, gathered in 16-bit",
                            "accelerate accelerator.py: get_state_dict; deepspeed runtime/engine.py: "
                            "_zero3_consolidated_16bit_state_dict")
        return SaveHost(0, 0, f"nothing ({GATHER_KEY} is false: engine.save_checkpoint instead)",
                        "accelerate accelerator.py: get_state_dict (ValueError); transformers trainer.py: save_model")
    every = full_state_dict_bytes(setup)
    return SaveHost(every, every, "the whole state dict cloned to the host on every rank"
                    + (" (frozen base included)" if adapter else ""),
                    "accelerate accelerator.py: get_state_dict; deepspeed checkpoint/utils.py: "
                    "clone_tensors_for_torch_save")


def host_bytes_at_save_per_node(setup: TrainingJob) -> int | None:
    """The node of global rank 0 (the busiest): rank 0's copy and those of the other ranks on the node."""
    held = save_host(setup)
    if held is None:
        return None
    local = max(1, min(setup.layout.gpus_per_node, setup.layout.world or 1))
    return held.rank0 + (local - 1) * held.other_ranks


def _unsharded(setup: TrainingJob) -> TrainingJob:
    """The job as a whole-model state dict sees it: no ZeRO-3 partitioning of the frozen base."""
    return replace(setup, zero_stage=0) if setup.zero_stage == 3 else setup

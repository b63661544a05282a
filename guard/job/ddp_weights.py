"""The dtype an HF Trainer job without DeepSpeed keeps its weights in, as each trainer loads the model.

Without DeepSpeed no engine casts the weights and no optimizer keeps a master copy: torch's AdamW creates its moments
with zeros_like(param) (torch/optim/adam.py _init_group) and autograd's gradients match the parameter, so the weights'
dtype prices all three. Per trainer (commits as in guard/job/finetune_dialects.py):
- transformers 5.24 from_pretrained: dtype "auto" by default (modeling_utils.py): the config's dtype / torch_dtype;
  the Trainer never casts for training. A plain Trainer program's `--dtype` / `--torch_dtype` (run_clm.py) wins.
- TRL f2cd5771: ModelConfig.dtype (older torch_dtype), "float32" unless written (model_config.py; utils.py
  `kwargs.get("dtype", "float32")`).
- LLaMA-Factory ff6d4d12: loads "auto" (model/loader.py), then full tuning upcasts every trainable parameter to fp32
  (model/adapter.py _setup_full_tuning, cast_trainable_params_to_fp32) unless pure_bf16.
- axolotl 067b021c: the dtype its bf16 / fp16 flags resolve to (utils/config resolve_dtype), fp32 otherwise.
"""

from __future__ import annotations

from guard.job.architecture import Architecture
from guard.job.finetune_config import FineTuneConfig
from guard.job.hf_config import TORCH_DTYPES


def weights_dtype(ft: FineTuneConfig, arch: Architecture) -> tuple[str, str]:
    """(dtype, why) of a full fine-tuning job's weights under the HF Trainer without DeepSpeed."""
    name = ft.dialect.name
    if name == "llamafactory":
        if ft.flag("pure_bf16"):
            return _auto(arch, "pure_bf16: LLaMA-Factory keeps the weights as loaded (dtype \"auto\")")
        return "fp32", "LLaMA-Factory full tuning upcasts the trainable weights to fp32 (cast_trainable_params_to_fp32)"
    if name == "axolotl":
        precision = ft.precision()
        return precision, f"axolotl loads the model in its bf16/fp16 setting's dtype ({precision})"
    written = ft.get("load_dtype")
    key = ft.dialect.keys["load_dtype"] if "load_dtype" not in ft.written else ft.written["load_dtype"]
    label = f"{key} {written}" if "load_dtype" in ft.written else f"{key} {written} ({ft.dialect.title}'s default)"
    if str(written).lower() == "auto":
        return _auto(arch, label)
    dtype = TORCH_DTYPES.get(str(written).lower().replace("torch.", ""))
    if dtype is None:
        return _auto(arch, f"{key} {written!r} is not a dtype guard knows; read as \"auto\"")
    return dtype, f"{label}: the weights, their gradients and AdamW's moments in {dtype}"


def _auto(arch: Architecture, why: str) -> tuple[str, str]:
    """transformers 5's "auto": the checkpoint's dtype as its config states it (unstated: fp32, said so)."""
    if arch.checkpoint_dtype:
        return arch.checkpoint_dtype, f"{why}: the checkpoint's {arch.checkpoint_dtype} (its config.json)"
    return "fp32", f"{why}: the model's config.json states no dtype; fp32 is priced"

"""What a TRL preference or RL trainer holds besides the policy, read from its config: the method, its reference
model and where that model lives, the rows one forward sees, and a colocated vLLM engine's share of the GPU.

From TRL f2cd5771 (trl/trainer/*_trainer.py, *_config.py; trl/models/utils.py prepare_deepspeed):
- DPOTrainer and KTOTrainer build a reference model unless the policy is a peft model (the reference is the policy
  with its adapters disabled: no copy) or `precompute_ref_log_probs` (log-probs computed once before training, no
  model kept); GRPOTrainer and RLOOTrainer build one only when `beta` != 0 (GRPO's default 0.0, RLOO's 0.05) and
  not with peft. The reference is loaded from the policy's checkpoint and handed to `prepare_deepspeed`, which
  keeps ZeRO-3 (sharded like the policy) and otherwise forces stage 0: a whole copy on every rank, in the engine's
  dtype (DeepSpeed casts the module to bf16/fp16). Without DeepSpeed, accelerate prepares it for evaluation
  (DDP: a whole copy; FSDP is refused by guard upstream).
- DPOTrainer runs chosen and rejected through one forward (concatenated_forward): twice the rows of a micro-batch.
- GRPOTrainer with `use_vllm` and `vllm_mode: colocate` starts vLLM in every training process with
  `vllm_gpu_memory_utilization` of the GPU's total memory (default 0.3; vLLM refuses to start when less is
  free) and keeps it unless `vllm_enable_sleep_mode`; in server mode vLLM runs on other GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.job.finetune_config import as_int

# each method's reference and rows (the trainers above); ORPO, CPO and SimPO hold no reference
HOLDS_REFERENCE = {"dpo": True, "kto": True, "grpo": "beta", "rloo": "beta", "orpo": False, "cpo": False,
                   "simpo": False, "sft": False, "reward": False}
DEFAULT_BETA = {"grpo": 0.0, "rloo": 0.05, "dpo": 0.1, "kto": 0.1}
PAIRED = {"dpo", "orpo", "cpo", "simpo"}  # chosen and rejected in one forward
DEFAULT_VLLM_SHARE = 0.3  # GRPOConfig / RLOOConfig vllm_gpu_memory_utilization


@dataclass
class PostTraining:
    """The method and what it adds; `origins` say where each was read."""

    method: str  # dpo | kto | grpo | rloo | orpo | cpo
    reference: str  # none | replica | sharded | adapter | precomputed | host (offloaded)
    reference_why: str
    rows: int = 1  # rows through one forward per sample (DPO: chosen + rejected)
    vllm_share: float | None = None  # colocated vLLM: the fraction of the GPU's total it holds while training
    vllm_why: str = ""
    # GRPO/RLOO generating with transformers' generate on the training GPUs (no vLLM): the completions one rank
    # generates at once (per_device_train_batch_size x steps_per_generation), and whether ZeRO-3 gathers the whole
    # policy for it (ds3_gather_for_generation, default True); 0: generation is not on this GPU or not by generate
    generating: int = 0
    gathered: bool = False
    # how the trainer turns whole logits into log-probs outside TRL's fused head (memory/post_training.py):
    # "rowwise" (TRL before 1.15, selective_log_softmax one row at a time for 16-bit logits), "fp32"
    # (LLaMA-Factory's concatenated_forward: `.logits.to(torch.float32)`, then log_softmax over all of them) or
    # "fp32_ce" (OpenRLHF: an fp32 copy, then flash-attn's fused cross entropy)
    logits_path: str = "rowwise"

    @property
    def holds_reference(self) -> bool:
        return self.reference in ("replica", "sharded")

    def engine_bytes(self, gpu_total: int) -> int:
        """What a colocated vLLM holds of a GPU of `gpu_total` bytes while training (0: none on this GPU)."""
        return round(self.vllm_share * gpu_total) if self.vllm_share is not None else 0


def generation_batch(ft, micro_batch: int, world: int) -> tuple[int, str]:
    """(completions per generation over all ranks, how it is made) as GRPOConfig.__post_init__ makes it:
    generation_batch_size when written, else per_device_train_batch_size x processes x steps_per_generation, whose
    default is gradient_accumulation_steps."""
    written = as_int(ft.get("generation_batch"))
    if written is not None:
        return written, f"generation_batch_size {written}"
    steps = as_int(ft.get("steps_per_generation")) or as_int(ft.get("grad_accum")) or 1
    batch = micro_batch * world * steps
    return batch, (f"per_device_train_batch_size {micro_batch} x {world} processes x {steps} steps per generation "
                   f"= {batch}")


def read_post_training(method: str, ft, zero_stage: int, deepspeed: bool, peft: bool, micro_batch: int,
                       world: int, separate_reference: str = "") -> PostTraining | None:
    """The post-training facts of a TRL config `ft` for `method` (the `trl` subcommand or script, or the TRL trainer
    another framework runs), on `world` ranks of `micro_batch` rows; None for SFT. `separate_reference`: why a
    reference model is loaded even beside adapters (LLaMA-Factory's `ref_model`)."""
    if method not in HOLDS_REFERENCE or method in ("sft", "reward"):
        return None
    out = PostTraining(method, "none", "", rows=2 if method in PAIRED else 1)
    holds = HOLDS_REFERENCE[method]
    beta = ft.get("beta")
    beta = DEFAULT_BETA.get(method, 0.0) if beta is None else float(beta)
    if holds == "beta" and beta == 0.0:
        out.reference_why = f"{method.upper()} with beta 0: no reference model (its KL term is off)"
    elif not holds:
        out.reference_why = f"{method.upper()} holds no reference model"
    elif peft and not separate_reference:
        out.reference, out.reference_why = "adapter", "the reference is the policy with its adapters disabled"
    elif method in ("dpo", "kto") and ft.flag("precompute_ref"):
        out.reference, out.reference_why = "precomputed", ("precompute_ref_log_probs: reference log-probs are "
                                                           "computed once before training, no model is kept")
    elif deepspeed and zero_stage == 3:
        out.reference, out.reference_why = "sharded", ("the reference's engine keeps ZeRO-3 (TRL's "
                                                       "prepare_deepspeed, OpenRLHF's get_eval_ds_config): its "
                                                       "weights are partitioned like the policy's")
    else:
        out.reference, out.reference_why = "replica", (
            "the reference's engine runs ZeRO stage 0 below ZeRO-3 (TRL's prepare_deepspeed, OpenRLHF's "
            "get_eval_ds_config): a whole copy on every rank, in the engine's dtype"
            if deepspeed else "accelerate prepares it for evaluation: a whole copy on every rank")
    if separate_reference and out.holds_reference:
        out.reference_why = f"{separate_reference}; {out.reference_why}"
    if method in ("grpo", "rloo") and not ft.flag("use_vllm"):
        # trainer._generate_single_turn: model.generate over the local generation batch, under
        # unwrap_model_for_generation(gather_deepspeed3_params=ds3_gather_for_generation)
        out.generating = generation_batch(ft, micro_batch, world)[0] // max(1, world)
        out.gathered = deepspeed and zero_stage == 3 and ft.get("ds3_gather") is not False
    if method in ("grpo", "rloo") and ft.flag("use_vllm"):
        mode = str(ft.get("vllm_mode") or "colocate")
        if mode == "colocate":
            share = ft.get("vllm_share")
            share = DEFAULT_VLLM_SHARE if share is None else float(share)
            if ft.flag("vllm_sleep"):
                out.vllm_why = (f"colocated vLLM sleeps between generations (vllm_enable_sleep_mode): its "
                                f"{share:g} of the GPU is not held while training")
            else:
                out.vllm_share = share
                out.vllm_why = f"colocated vLLM holds vllm_gpu_memory_utilization {share:g} of the GPU's total"
        else:
            out.vllm_why = "vLLM in server mode runs on other GPUs (not priced here)"
    return out

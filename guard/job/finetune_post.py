"""The preference or RL method a fine-tuning config runs (TRL's `trl dpo|grpo|...`, LLaMA-Factory's `stage`,
axolotl's `rl`, OpenRLHF's module) and what its trainer holds besides the policy, read into the job: the reference
model, the paired rows, a colocated vLLM, TRL's fused LM head."""

from __future__ import annotations

from guard import installed
from guard.job.finetune_config import OFF, FineTuneConfig, as_int
from guard.job.finetune_dialects import TRL
from guard.job.post_training import read_post_training
from guard.job.training_job import TrainingJob
from guard.resources import version_tuple

# the TRL trainer LLaMA-Factory's `stage` and axolotl's `rl` run (LLaMA-Factory train/dpo/trainer.py
# CustomDPOTrainer and ktrainer.py subclass TRL's DPOTrainer/KTOTrainer and prepare the reference with its
# prepare_deepspeed; hparams/finetuning_args.py: use_ref_model = stage == "dpo" and pref_loss not in
# ["orpo", "simpo"]; axolotl core/trainers/dpo, kto, orpo: TRL's trainers, `simpo` as TRL's CPOTrainer);
# None: a stage that holds more than the policy and is named, not priced
LLAMAFACTORY_STAGES = {"dpo": "dpo", "kto": "kto", "ppo": None, "rm": None}
AXOLOTL_RL = {"dpo": "dpo", "ipo": "dpo", "kto": "kto", "orpo": "orpo", "simpo": "simpo"}
LF_REFERENCE_FREE = {"orpo": "orpo", "simpo": "simpo"}  # pref_loss values that drop the reference


# how a framework's DPO turns whole logits into log-probs (memory/post_training.py reference_forward_bytes)
LOGITS_PATH = {"llamafactory": "fp32", "openrlhf": "fp32_ce"}


def _reference_offload(job: TrainingJob, post) -> None:
    """OpenRLHF's --ref.offload: the reference engine's get_eval_ds_config offloads its parameters to the host,
    which DeepSpeed does under ZeRO-3 alone (stage 0 keeps them on the GPU)."""
    if post.reference == "sharded":
        post.reference, post.reference_why = "host", ("--ref.offload under ZeRO-3: the reference's parameters live "
                                                      "on the host (offload_param cpu), fetched layer by layer")
    else:
        job.notes.append("--ref.offload asks DeepSpeed to offload the reference's parameters, which it does under "
                         "ZeRO-3 only: at stage 0 they stay on the GPU (priced there)")


def _trainer_method(ft: FineTuneConfig) -> tuple[str | None, str]:
    """(the TRL method the config runs, "sft" for none; None: a stage guard names but does not price, the key)."""
    if ft.dialect.name == "llamafactory":
        stage = str(ft.get("stage") or "sft").lower()
        if stage not in LLAMAFACTORY_STAGES:
            return "sft", "stage"
        method = LLAMAFACTORY_STAGES[stage]
        if method == "dpo":
            method = LF_REFERENCE_FREE.get(str(ft.get("pref_loss") or "sigmoid").lower(), "dpo")
        return method, "stage"
    if ft.dialect.name == "axolotl":
        rl = ft.get("rl")
        if "rl" not in ft.written or rl in OFF:
            return "sft", "rl"
        return AXOLOTL_RL.get(str(rl).lower()), "rl"
    return str(ft.get("rl_method") or "sft").lower(), "rl_method"


def read_trainer_method(job: TrainingJob, ft: FineTuneConfig) -> None:
    """The preference or RL method a TRL, LLaMA-Factory or axolotl config runs: the reference model, the paired
    rows and a colocated vLLM (post_training.py); the stages guard does not price are named."""
    method, key = _trainer_method(ft)
    if method is None or (method == "ppo" and ft.dialect is TRL):
        job.add_unmodelled(f"{ft.dialect.title} {ft.dialect.keys.get(key, key)} {ft.get(key)}: priced as SFT (its "
                           "reference, reward or value models and generation are not)", ft.dialect.keys.get(key, key),
                           ft.origin(key))
        return
    if ft.dialect is TRL:
        _fused_head(job, ft, method)
    separate = ""
    if ft.dialect.name == "llamafactory" and ft.get("ref_model") not in OFF:
        separate = f"ref_model {ft.get('ref_model')} is loaded as the reference (priced as large as the policy)"
    if ft.dialect.name == "openrlhf":  # train_dpo.py loads the reference as an Actor of its own, adapters or not
        separate = "OpenRLHF loads the reference as an engine of its own (--ref.model_name_or_path, the policy's)"
    post = read_post_training(method, ft, job.zero_stage, not job.hf_ddp, job.adapter is not None, job.micro_batch,
                              job.layout.world or 1, separate)
    if post is None:
        return
    if ft.dialect.name in LOGITS_PATH:
        post.logits_path = LOGITS_PATH[ft.dialect.name]
    if ft.dialect.name == "openrlhf" and ft.flag("ref_offload") and post.holds_reference:
        _reference_offload(job, post)
    job.post_training = post
    job.origins["post_training"] = ft.origin(key)
    if method in ("grpo", "rloo"):  # their configs have no max_length: a prompt (the dataset's) and its completion
        job.notes.append(f"{method.upper()}: each sequence is a prompt (as long as the dataset's) and its "
                         f"completion: priced at {job.seq_length} tokens (give --seq-length for prompt + completion)")
    job.notes.append(f"{method.upper()}: {post.reference_why}" + (f"; {post.vllm_why}" if post.vllm_why else "")
                     + ("; chosen and rejected run in one forward: twice the micro-batch's rows"
                        if post.rows == 2 else ""))


FUSED_HEAD_SINCE = (1, 15)  # TRL 1.15.0 added add_fused_lm_head (guard/memory/chunked_head.py)
COMPLETION_DEFAULT = 512  # GRPOConfig / RLOOConfig max_completion_length


def _fused_head(job: TrainingJob, ft: FineTuneConfig, method: str) -> None:
    """TRL's trainers score through a chunked LM head since 1.15 (never the whole logits): the tokens each row
    scores, for the installed TRL (or, without it, the current one)."""
    text = installed.version("trl")
    if text and version_tuple(text) < FUSED_HEAD_SINCE:
        job.notes.append(f"TRL {text} (installed) computes whole logits: its fused LM head came in 1.15")
        return
    seq = job.seq_length or 0
    if method in ("grpo", "rloo"):  # logits_to_keep: the completion tokens alone are scored
        written = ft.get("completion_len")
        completion = COMPLETION_DEFAULT if written in OFF else as_int(written)
        if not completion or completion < 1:
            place, span = ft.where("completion_len"), ft.span("completion_len", value=True)
            job.missing["completion"] = (f"{place.path if place else ft.path}:{span.line}:{span.col}: "
                                         f"max_completion_length is {written!r}: a positive integer is needed")
            return
        job.scored_tokens = min(completion, seq) if seq else completion
        job.origins["scored_tokens"] = ft.origin("completion_len")
        scored = f"the {job.scored_tokens} completion tokens of each row (max_completion_length)"
    else:
        job.scored_tokens = seq
        scored = "every labelled token (prompt tokens masked by the trainer are priced too: an upper bound)"
    which = f"{text} (installed)" if text else ">= 1.15 (not installed: the current release)"
    job.notes.append(f"TRL {which} scores {scored} through its fused LM head in tiles: no whole logits "
                     "(trl/kernels/chunked_logprob.py)")

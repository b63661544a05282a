"""What a preference or RL trainer adds to a rank beside the policy's training (guard/job/post_training.py reads the
trainer): the reference model's weights, the generation phase, and the reference forward run while the policy's
activations are held."""

from __future__ import annotations

from guard.job.training_job import DTYPE_BYTES, TrainingJob
from guard.memory import chunked_head

# methods whose reference forward runs after the policy's forward, inside the same loss (TRL 1.16
# dpo_trainer.py DPOTrainer._compute_loss, kto_trainer.py: `model(...)` then `with torch.no_grad(): ref_model(...)`)
REFERENCE_AFTER_POLICY = ("dpo", "kto")


def phases(setup: TrainingJob, inv, states, stash: float, loss_stage: bool) -> dict[str, tuple[float, float]]:
    """The trainer's own phases on this stage, each (what is held beyond the static states, its working set):
    generation (nothing of the training step held) and the reference forward (the policy's forward keeps its
    `stash` of activations and loss edge)."""
    out = {}
    generation = generation_bytes(setup, inv, states)
    if generation:
        out["generation"] = (0.0, generation)
    reference = reference_forward_bytes(setup) if loss_stage else 0.0
    if reference:
        out["reference forward"] = (stash, reference)
    return out


def reference_bytes(setup: TrainingJob, inv, states) -> int:
    """The reference model's weights on this rank: a whole copy in the engine's dtype (or, without DeepSpeed, the
    dtype the policy was loaded in), or under ZeRO-3 the same partition the policy's weights have. The job's own
    ZeRO stage decides, so a planned change of stage moves the reference with it."""
    if not setup.hf_ddp and setup.zero_stage == 3:
        return round(states.params)
    dtype = setup.params_dtype if not setup.hf_ddp else (setup.weights_dtype or setup.params_dtype)
    return inv.total * DTYPE_BYTES[dtype]


def kv_bytes(arch, act: int, tokens: float) -> float:
    """K and V of every layer for `tokens` cached positions, `act` bytes an element (transformers' DynamicCache,
    vLLM's KV blocks)."""
    return 2 * arch.num_layers * arch.query_groups * arch.kv_channels * act * tokens


def generation_bytes(setup: TrainingJob, inv, states) -> float:
    """transformers' generate on the training GPU (GRPO/RLOO without vLLM): the KV cache of every completion the
    rank generates at once, K and V per layer in the model's dtype for the whole sequence, and under ZeRO-3 the rest
    of the policy's weights gathered for it (deepspeed GatheredParameters over all of them)."""
    post = setup.post_training
    if post is None or not post.generating:
        return 0.0
    arch = setup.arch
    act = DTYPE_BYTES["bf16" if setup.params_dtype in ("bf16", "fp16") else "fp32"]
    kv = kv_bytes(arch, act, setup.seq_length * post.generating)
    gathered = max(0.0, inv.total * DTYPE_BYTES[setup.params_dtype] - states.params) if post.gathered else 0.0
    return kv + gathered


def reference_forward_bytes(setup: TrainingJob) -> float:
    """The largest working set of the reference's no-grad forward over one microbatch's rows, on top of everything
    the policy's forward keeps (DPO/KTO run it after the policy's forward; 0 without one, or precomputed).

    transformers' decoder layer under no_grad frees each intermediate once its reader returns; its largest moment
    is the gated MLP's multiply (LlamaMLP.forward `down_proj(act_fn(gate_proj(x)) * up_proj(x))`): the activation's
    output, up_proj's and their product (3 x tokens x ffn), beside the layer's input and the residual (2 x tokens x
    hidden). An ungated MLP holds fc1's output and the activation's (2 x tokens x ffn). The head then scores the rows
    through the fused head's tile and its seven fp32 vectors per token (chunked_head.py); without it, whole logits:
    TRL before 1.15 keeps them in the compute dtype and takes one row's fp32 log-softmax at a time
    (trainer/utils.py selective_log_softmax), LLaMA-Factory casts them all to fp32 and takes log_softmax of the copy
    (train/dpo/trainer.py concatenated_forward, get_batch_logps: 8 bytes a logit once the 16-bit ones are freed),
    OpenRLHF casts them to fp32 and takes their log-probs with flash-attn's fused cross entropy (models/actor.py
    forward, models/utils.py log_probs_from_logits): the 16-bit logits and their fp32 copy at once.
    """
    post = setup.post_training
    # a peft policy is its own reference with the adapters disabled: the same forward, no second model
    if post is None or post.reference not in ("replica", "sharded", "adapter", "host") \
            or post.method not in REFERENCE_AFTER_POLICY:
        return 0.0
    arch = setup.arch
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    tokens = setup.rows * setup.seq_length / setup.layout.seq_shards
    ffn = arch.moe_ffn_hidden or arch.ffn_hidden
    layer = tokens * ((3 if arch.gated_mlp else 2) * ffn + 2 * arch.hidden) * act
    if setup.scored_tokens:
        head = chunked_head.forward_working(setup) + tokens * arch.hidden * act
    elif post.logits_path == "fp32":
        head = tokens * setup.vocab * (4 + 4)
    elif post.logits_path == "fp32_ce":  # OpenRLHF Actor.forward: `.to(torch.float32)` beside the 16-bit logits
        head = tokens * setup.vocab * (act + 4)
    else:
        head = tokens * setup.vocab * act + setup.seq_length * setup.vocab * 4
    return max(layer, head)

"""TRL's fused LM head: per-token log-probabilities computed in tiles, never the whole logits; what it keeps for
backward and its largest transient, per microbatch.

From TRL 1.16 (the version guard's tests pin): trl/trainer/utils.py add_fused_lm_head patches the model's forward
for SFTTrainer, DPOTrainer, KTOTrainer, GRPOTrainer and RLOOTrainer (`model(..., fused_lm_head=True)`); it scores
only the positions whose label is not -100 (`hidden_states[mask]`, the compact path on CUDA) through
trl/kernels/chunked_logprob.py ChunkedLogProbFunction:
- forward: seven fp32 vectors of one value per scored token (running_max, sum_exp, x_sum_exp, sq_sum_exp, z_sum,
  max_before_target, target_logit), one tile `mm_buf` of min(tokens, TOKEN_CHUNK_SIZE 4096) x chunk_size
  (_CHUNKED_LOGPROB_CHUNK_SIZE 32768 vocabulary columns) in the compute dtype, the weight's chunk cast to the compute
  dtype when it is not already; it saves the scored hidden states (the masked copy), the targets (int64) and log_z
  (fp32) for backward, and returns fp32 log-probs, scattered back to [rows, sequence - 1].
- backward: the same tile, an fp32 accumulator for the hidden states' gradient (tokens x hidden) and, when the head
  trains, one for the whole weight's (vocabulary x hidden); each is cast to its tensor's dtype on return.
Earlier TRL (before the fused head) computed whole logits and selective_log_softmax: priced by loss_bytes' eager
path.
"""

from __future__ import annotations

from guard.job.training_job import DTYPE_BYTES

TOKEN_CHUNK = 4096  # chunked_logprob.py TOKEN_CHUNK_SIZE
VOCAB_CHUNK = 32768  # trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE
FORWARD_VECTORS = 7  # the fp32 per-token running statistics ChunkedLogProbFunction.forward allocates


def _scored(setup) -> float:
    """Tokens one microbatch scores through the head on this rank."""
    return setup.rows / setup.layout.seq_shards * min(setup.scored_tokens, setup.seq_length)


def forward_working(setup) -> float:
    """The forward's working set beside what it saves: one tile in the compute dtype and seven fp32 vectors per
    scored token (plus, for a weight kept in fp32 under bf16 autocast, a cast chunk: chunked_head_bytes)."""
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    tokens = _scored(setup)
    return min(tokens, TOKEN_CHUNK) * VOCAB_CHUNK * act + FORWARD_VECTORS * 4 * tokens


def chunked_head_bytes(setup) -> tuple[float, float]:
    """(kept for backward, largest transient) of TRL's fused LM head for one microbatch of `setup.rows` rows, each
    scoring `setup.scored_tokens` tokens (the completion for GRPO/RLOO; every labelled token else: an upper bound
    where prompts are masked)."""
    act = DTYPE_BYTES["fp32" if setup.params_dtype == "fp32" else "bf16"]
    hidden, vocab = setup.arch.hidden, setup.vocab
    rows = setup.rows / setup.layout.seq_shards
    tokens = _scored(setup)
    tile = min(tokens, TOKEN_CHUNK) * VOCAB_CHUNK * act
    weight_dtype = setup.weights_dtype or setup.params_dtype
    # `weight[start:end].to(compute_dtype)`: a copy of one vocabulary chunk when the weight is kept in fp32 under
    # bf16 autocast (the HF Trainer without DeepSpeed)
    chunk_cast = min(vocab, VOCAB_CHUNK) * hidden * act if DTYPE_BYTES[weight_dtype] != act else 0
    # saved: the scored hidden states, their int64 targets, fp32 log_z; returned: fp32 log-probs per position
    kept = tokens * (act * hidden + 8 + 4) + 4 * rows * (setup.seq_length - 1)
    forward = forward_working(setup) + chunk_cast
    # fp32 accumulators, then their casts to the tensors' dtypes (a 4-byte one is returned as it is); a frozen head
    # (LoRA) gets no weight gradient
    grad_hidden = tokens * hidden * (4 + (act if act != 4 else 0))
    weight_bytes = DTYPE_BYTES[weight_dtype]
    grad_weight = vocab * hidden * (4 + (weight_bytes if weight_bytes != 4 else 0)) if setup.adapter is None else 0
    backward = tile + chunk_cast + grad_hidden + grad_weight
    return kept, max(forward, backward)

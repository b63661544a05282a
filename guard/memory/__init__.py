"""Per-rank GPU memory prediction for Megatron and DeepSpeed training jobs (no torch import)."""

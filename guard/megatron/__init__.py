"""Megatron-LM and Megatron-DeepSpeed command lines: flag tables, argv parsing and derived values."""

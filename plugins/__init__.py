"""Integrations that run inside DeepSpeed, Megatron and launchers (installed as guard.plugins)."""

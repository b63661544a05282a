"""What the user hands guard to describe one job: files, a command line, a model, and the values a config
leaves to the program that runs it (declared once as options in guard/options.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    paths: tuple[str, ...] = ()  # launch scripts, command-line files, DeepSpeed and training configs
    megatron_args: tuple[str, ...] = ()  # Megatron command lines given as strings
    deepspeed: str | None = None  # a DeepSpeed config (an HF Trainer / plain DeepSpeed program's)
    hf_config: str | None = None  # the model: a transformers config.json ...
    model: str | None = None  # ... or a preset
    vocab_size: int | None = None
    seq_length: int | None = None
    micro_batch: int | None = None
    precision: str | None = None
    gradient_checkpointing: bool = False
    launcher: tuple[str, ...] = ()  # guard launch: the launcher command line
    offline: bool = False  # never ask the Hugging Face Hub for a model's config.json

    def values(self) -> dict:
        """The fields a launch context carries to the ranks (the job is read there again from them)."""
        return {"hf_config": self.hf_config, "model": self.model, "vocab_size": self.vocab_size,
                "seq_length": self.seq_length, "micro_batch": self.micro_batch, "precision": self.precision,
                "gradient_checkpointing": self.gradient_checkpointing, "offline": self.offline}

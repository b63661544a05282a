"""A job and what it was read from: the one subject the rules judge, the memory model prices, the planner
changes, the writer edits and the launcher runs (guard/intake makes it)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from guard.job.training_job import TrainingJob
from guard.sources.document import Document


@dataclass
class DeepSpeedDoc:
    """A DeepSpeed config as written (a file, a heredoc, a rendered template, the file a training config names)
    and the part of it DeepSpeed reads."""

    doc: Document  # as written, with positions (for a training config's file: "auto" filled, positions kept)
    data: dict[str, Any]  # what DeepSpeed reads (a GPT-NeoX YAML's DeepSpeed keys, or the whole file)
    kind: str = "deepspeed"  # "deepspeed", "neox", "accelerate", or "none" (no DeepSpeed key: GRD003)
    origin: dict[str, str] = field(default_factory=dict)  # top-level key -> JSON pointer (NeoX renames keys)
    framework: str | None = None  # who calls deepspeed.initialize, when the reader knows: "hf", "megatron-deepspeed"
    batch_filled: bool = False  # the HF Trainer wrote train_batch_size from its own arguments for this launch
    explicit: bool = True  # named by the user (a file found by walking a folder is judged only if it is ours)
    relocate: Callable | None = None  # a diagnostic -> the same, placed where the text is written (heredocs)


@dataclass
class FineTunePair:
    """A fine-tuning config's DeepSpeed file as the Trainer hands it over."""

    mismatches: list = field(default_factory=list)  # guard.job.trainer_fill.Mismatch: values transformers refuses
    named_missing: bool = False  # a `deepspeed:` path that is not there


@dataclass
class Subject:
    """One job. `job` holds every value with where it came from; the rest is the text it was read from, for the
    rules that judge a document as written and for the writer."""

    job: TrainingJob
    kind: str  # "megatron" (a Megatron / Megatron-DeepSpeed command), "deepspeed" (a config file), "finetune"
    path: str  # the file (or label) it was read from
    command: Any = None  # guard.megatron.command.MegatronCommand: the command as written
    argv_text: str | None = None  # the command when it was given as a string, not in a file
    deepspeed: DeepSpeedDoc | None = None  # the DeepSpeed config it is judged with
    training: Any = None  # guard.job.finetune_config.FineTuneConfig: a fine-tuning config (LLaMA-Factory, ...)
    pair: FineTunePair | None = None
    launch: Any = None  # guard.launchers.chain.Launch: the launcher chain that starts it
    comments: dict[str, dict[int, str]] = field(default_factory=dict)  # path -> its `# guard:` comments by line
    error: tuple[str, Any] | None = None  # (path, SourceError): a file it needs that cannot be read (exit 2)

    def with_job(self, job: TrainingJob) -> "Subject":
        """The same sources with another job (a candidate of the planner, the launch rewrite)."""
        return replace(self, job=job)

"""What a fine-tuning rule sees: the training config as written, the DeepSpeed file it names (filled as the Trainer
fills it), and the job read from the pair (its model, ZeRO stage and world)."""

from __future__ import annotations

from guard.diagnostic import Diagnostic, Related
from guard.job.subject import Subject
from guard.rules.registry import Rule
from guard.sources.document import pointer_of


class FineTuneCheck:
    def __init__(self, subject: Subject, gpu: str | None = None, gpu_memory: str | None = None):
        self.subject, self.job, self.ft = subject, subject.job, subject.training
        self.gpu, self.gpu_memory = gpu, gpu_memory  # --gpu: the memory rules price the job (memory_finetune.py)
        self.ds_doc = subject.deepspeed.doc if subject.deepspeed is not None else None
        self.mismatches = subject.pair.mismatches if subject.pair else []
        self.ds_missing = bool(subject.pair and subject.pair.named_missing)
        self.arch = self.job.arch
        self.diagnostics: list[Diagnostic] = []

    @property
    def zero_stage(self) -> int | None:
        """The job's ZeRO stage; None when the Trainer runs without DeepSpeed (torch DDP)."""
        return None if self.job.hf_ddp else self.job.zero_stage

    def zero(self, key: str):
        """A `zero_optimization` key that picks DeepSpeed's code path, as the job read it."""
        return self.job.zero_keys.get(key)

    def report(self, rule: Rule, name: str, message: str, *, help: str | None = None, value: bool = True,
               related: list[Related] | None = None) -> None:
        place = self.ft.where(name)  # a key of the file, or the flag that wrote it on a command line
        path, pointer = (place.path, place.pointer) if place else (self.ft.path, None)
        self.diagnostics.append(rule.diagnostic(path, message, self.ft.span(name, value=value), pointer,
                                                help=help, related=related or []))

    @property
    def ds_config(self) -> dict | None:
        """The DeepSpeed config the Trainer hands over ("auto" filled): the named file's, or an inline one."""
        if self.subject.deepspeed is not None:
            return self.subject.deepspeed.data
        written = self.ft.get("deepspeed")
        return written if isinstance(written, dict) else None

    def report_in_deepspeed(self, rule: Rule, path: tuple[str, ...], message: str, *, help: str | None = None,
                            related: list[Related] | None = None) -> None:
        """The same finding where the DeepSpeed file writes it (an inline config has no file: nothing more)."""
        if self.ds_doc is None:
            return
        pointer = pointer_of(path)
        self.diagnostics.append(rule.diagnostic(self.ds_doc.path, message, self.ds_doc.span(pointer), pointer,
                                                help=help, related=related or []))

    def ds_related(self, *path: str, message: str) -> list[Related]:
        if self.ds_doc is None:
            return []
        return [Related(message, self.ds_doc.path, self.ds_doc.span(pointer_of(path)))]

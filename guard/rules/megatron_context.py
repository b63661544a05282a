"""What a Megatron rule sees: the command as written (flags, launcher, env) and the TrainingJob read from it."""

from __future__ import annotations

from typing import Any

from guard.diagnostic import Diagnostic, Related, Span
from guard.job.training_job import TrainingJob
from guard.megatron.job import MegatronJob
from guard.rules.registry import Rule


class MegatronCheck:
    """Flag-level questions go to the command; layout and batch come from the job (DP is computed once)."""

    def __init__(self, cmd: MegatronJob, job: TrainingJob, gpu: str | None = None, gpu_memory: str | None = None):
        self.cmd, self.job, self.gpu, self.gpu_memory = cmd, job, gpu, gpu_memory
        self.diagnostics: list[Diagnostic] = []

    def __getattr__(self, name: str) -> Any:  # v, given, known, int_, flag_span, option, table, path, env, ...
        return getattr(self.cmd, name)

    # -- the layout and batch, as the job has them ------------------------------------------------------
    @property
    def tp(self) -> int | None:
        return self.job.layout.tp

    @property
    def pp(self) -> int | None:
        return self.job.layout.pp

    @property
    def cp(self) -> int | None:
        return self.job.layout.cp

    @property
    def ds_sp(self) -> int | None:
        """Megatron-DeepSpeed's Ulysses sequence-parallel degree (it multiplies the model size)."""
        return self.job.layout.ulysses

    @property
    def model_parallel(self) -> int | None:
        return self.job.layout.model_parallel

    @property
    def dp(self) -> int | None:
        return self.job.layout.dp

    @property
    def vpp(self) -> int | None:
        """Virtual pipeline size (None when not interleaved)."""
        return self.job.layout.vpp if self.job.layout.vpp > 1 else None

    @property
    def micro_batch(self) -> int | None:
        return None if "batch" in self.job.missing and not self.cmd.given("micro_batch_size") else \
            self.cmd.int_("micro_batch_size")

    @property
    def global_batch(self) -> int | None:
        return self.job.global_batch

    @property
    def num_microbatches(self) -> int | None:
        return None if "batch" in self.job.missing else self.job.num_microbatches

    # -- reporting ---------------------------------------------------------------------------------------
    def report_at(self, rule: Rule, span: Span, pointer: str | None, message: str, *,
                  help: str | None = None, related: list[Related] | None = None,
                  data: dict[str, Any] | None = None, path: str | None = None) -> Diagnostic:
        diag = rule.diagnostic(path or self.cmd.path, message, span, pointer, help=help, related=related, data=data)
        self.diagnostics.append(diag)
        return diag

    def report(self, rule: Rule, dest: str, message: str, *, at_value: bool = False,
               help: str | None = None, related: list[Related] | None = None) -> Diagnostic:
        """Report at a flag (or its value); at the command when the flag is not given."""
        cmd = self.cmd
        span = cmd.value_span(dest) if at_value else cmd.flag_span(dest)
        return self.report_at(rule, span, cmd.option(dest), message, help=help, related=related,
                              path=cmd.path_of(dest, at_value))

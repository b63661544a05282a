"""What a Megatron rule sees: the job (every value the memory model prices, with where it came from) and the
command as written (which flags are given, where, and the values of flags the job does not hold)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guard.diagnostic import Diagnostic, Related, Span
from guard.job.subject import Subject
from guard.rules.registry import Rule

if TYPE_CHECKING:  # the judge loads this for every subject; a DeepSpeed lint must not load Megatron's reader
    from guard.megatron.command import MegatronCommand

# Flags whose values the job holds: the layout, the stage split, the world, the batch, the sequence, the model's
# shape, precision, sharding and recompute. A rule reads them from the job, so `guard check` judges exactly what
# `guard estimate` prices; the command still says whether and where one is written (given, known, spans).
JUDGED_BY_JOB = frozenset({
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "ds_sequence_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
    "moe_expert_parallel_size", "sequence_parallel", "num_layers_per_virtual_pipeline_stage",
    "num_virtual_stages_per_pipeline_rank", "pipeline_model_parallel_layout", "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers", "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split", "num_layers", "hidden_size", "num_attention_heads", "num_query_groups",
    "num_key_value_heads", "group_query_attention", "kv_channels", "num_experts", "seq_length", "micro_batch_size",
    "global_batch_size", "bf16", "fp16", "use_distributed_optimizer", "zero_stage", "recompute_granularity",
    "recompute_method", "recompute_num_layers", "recompute_activations", "deepspeed",
})


class HeldValue(AssertionError):
    """A rule read, from the command, a value the job holds (a bug in the rule: read the job)."""


class Flags:
    """The command as written, for the rules: nothing here decides a value the job holds."""

    def __init__(self, cmd: MegatronCommand):
        self._cmd = cmd
        self.path, self.table, self.env, self.launch, self.anchor = cmd.path, cmd.table, cmd.env, cmd.launch, cmd.anchor
        self.program, self.fork_flags, self.flavour = cmd.program, cmd.fork_flags, cmd.flavour
        self.deepspeed_config = cmd.deepspeed_config
        self.args = cmd.args

    def _readable(self, dest: str) -> None:
        if dest in JUDGED_BY_JOB:
            raise HeldValue(f"--{dest.replace('_', '-')}: the job holds this value; a rule reads it from the job")

    def v(self, dest: str, default: Any = "<table>") -> Any:
        self._readable(dest)
        return self._cmd.v(dest, default)

    def int_(self, dest: str, default: int | None = None) -> int | None:
        self._readable(dest)
        return self._cmd.int_(dest, default)

    def given(self, dest: str) -> bool:
        return self._cmd.given(dest)

    def known(self, *dests: str) -> bool:
        return self._cmd.known(*dests)

    def written(self, dest: str) -> str | None:
        """The last value written for `dest`, as text ("" for a switch given alone; None when not given)."""
        occ = self._cmd.args.last(dest)
        if occ is None:
            return None
        return occ.values[0].text if occ.values else ""

    def default(self, dest: str):
        """The parser's default for `dest` (its own definition, whatever the command writes)."""
        flags = self._cmd.table.by_dest.get(dest)
        return flags[0].default if flags else None

    def option(self, dest: str) -> str:
        return self._cmd.option(dest)

    def flag_span(self, dest: str) -> Span:
        return self._cmd.flag_span(dest)

    def value_span(self, dest: str) -> Span:
        return self._cmd.value_span(dest)

    def path_of(self, dest: str, at_value: bool = False) -> str:
        return self._cmd.path_of(dest, at_value)

    def env_value(self, name: str):
        return self._cmd.env_value(name)

    def related(self, dest: str, note: str) -> Related:
        return self._cmd.related(dest, note)


class MegatronCheck:
    """One Megatron command's subject as the rules judge it."""

    def __init__(self, subject: Subject, gpu: str | None = None, gpu_memory: str | None = None):
        self.subject, self.job, self.cmd = subject, subject.job, Flags(subject.command)
        self.gpu, self.gpu_memory = gpu, gpu_memory
        self.diagnostics: list[Diagnostic] = []

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

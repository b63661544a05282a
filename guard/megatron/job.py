"""A Megatron job as the rules see it: parsed flags, the launcher's world, exported env, and reporting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guard.diagnostic import Diagnostic, Related, Span
from guard.megatron import derived
from guard.megatron.argv import ArgToken, ParsedArgs
from guard.megatron.ds_config import DsConfigSource
from guard.megatron.flag_table import FlagTable
from guard.rules.registry import Rule


@dataclass
class EnvVar:
    value: str | None  # None: assigned from something guard cannot resolve
    span: Span
    path: str


@dataclass
class MegatronJob:
    path: str
    args: ParsedArgs
    table: FlagTable
    world_size: int | None = None
    world_size_why: str = ""
    world_token: ArgToken | None = None  # the launcher option that decides the world size
    gpus_per_node: int | None = None
    nodes: int | None = None
    launcher: str = ""
    env: dict[str, EnvVar] | None = None  # None: not a script (a bare argv), so the env is unknown
    deepspeed_config: DsConfigSource | None = None
    program: str = ""
    launch: Any = None  # guard.shell.launcher.Launch, when a launcher was found
    diagnostics: list[Diagnostic] = field(default_factory=list)
    gpu: str | None = None  # the GPU the job runs on (guard check --gpu): enables the memory rules
    anchor: Span = field(default_factory=lambda: Span(1, 1))  # where the command starts

    # -- values ----------------------------------------------------------------------------------
    @property
    def flavour(self) -> str:
        return self.table.flavour

    def v(self, dest: str, default: Any = "<table>") -> Any:
        return self.args.value(dest, default)

    def given(self, dest: str) -> bool:
        return self.args.given(dest)

    def known(self, *dests: str) -> bool:
        """True when every named value is known (given and resolved, or defaulted)."""
        return all(self.args.known(d) for d in dests)

    def int_(self, dest: str, default: int | None = None) -> int | None:
        value = self.v(dest)
        if isinstance(value, list):
            value = value[0] if len(value) == 1 else None
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return default if value is None and self.known(dest) else None
        return int(value)

    def flag_span(self, dest: str) -> Span:
        occ = self.args.last(dest)
        return occ.option.span if occ else self.anchor

    def value_span(self, dest: str) -> Span:
        occ = self.args.last(dest)
        if occ is None:
            return self.anchor
        return occ.values[0].span if occ.values else occ.option.span

    def option(self, dest: str) -> str:
        occ = self.args.last(dest)
        if occ is not None:
            return occ.option.text.split("=")[0]
        flags = self.table.by_dest.get(dest)
        return flags[0].name if flags else "--" + dest.replace("_", "-")

    @property
    def tp(self) -> int | None:
        return self.int_("tensor_model_parallel_size", 1)

    @property
    def pp(self) -> int | None:
        return self.int_("pipeline_model_parallel_size", 1)

    @property
    def cp(self) -> int | None:
        return self.int_("context_parallel_size", 1) if "context_parallel_size" in self.table.by_dest else 1

    @property
    def ds_sp(self) -> int | None:
        """Megatron-DeepSpeed's Ulysses sequence parallel degree (it multiplies the model size)."""
        return self.int_("ds_sequence_parallel_size", 1) if self.flavour == "megatron-deepspeed" else 1

    @property
    def model_parallel(self) -> int | None:
        parts = (self.tp, self.pp, self.cp, self.ds_sp)
        if any(p is None for p in parts):
            return None
        out = 1
        for p in parts:
            out *= p
        return out

    @property
    def dp(self) -> int | None:
        mp = self.model_parallel
        if self.world_size is None or not mp or self.world_size % mp:
            return None
        return self.world_size // mp

    @property
    def num_layers(self) -> int | None:
        return self.int_("num_layers")

    @property
    def heads(self) -> int | None:
        return self.int_("num_attention_heads")

    @property
    def hidden(self) -> int | None:
        return self.int_("hidden_size")

    @property
    def query_groups(self) -> int | None:
        """Query groups Megatron builds with: --num-query-groups only counts with --group-query-attention."""
        if self.flavour == "megatron-deepspeed":
            return self.int_("num_key_value_heads") or self.heads
        if self.v("group_query_attention") is True:
            return self.int_("num_query_groups")
        return self.heads

    @property
    def micro_batch(self) -> int | None:
        return self.int_("micro_batch_size")

    @property
    def global_batch(self) -> int | None:
        gbs = self.int_("global_batch_size")
        if gbs is None and self.known("global_batch_size") and self.micro_batch and self.dp:
            return self.micro_batch * self.dp  # validate_args' default
        return gbs

    @property
    def num_microbatches(self) -> int | None:
        if not (self.global_batch and self.micro_batch and self.dp):
            return None
        if self.global_batch % (self.micro_batch * self.dp):
            return None
        return derived.num_microbatches(self.global_batch, self.micro_batch, self.dp)

    @property
    def vpp(self) -> int | None:
        """Virtual pipeline size (None when not interleaved or unknown)."""
        per_rank = self.int_("num_virtual_stages_per_pipeline_rank") if \
            "num_virtual_stages_per_pipeline_rank" in self.table.by_dest else None
        if per_rank:
            return per_rank if per_rank > 1 else None
        per_stage = self.int_("num_layers_per_virtual_pipeline_stage")
        if per_stage and self.num_layers and self.pp:
            total = self.num_layers + int(self.v("account_for_embedding_in_pipeline_split") is True) + \
                int(self.v("account_for_loss_in_pipeline_split") is True)
            vpp = (total // self.pp) // per_stage
            return vpp if vpp > 1 else None
        return None

    def env_value(self, name: str) -> EnvVar | None:
        return (self.env or {}).get(name)

    # -- reporting -------------------------------------------------------------------------------
    def report_at(self, rule: Rule, span: Span, pointer: str | None, message: str, *,
                  help: str | None = None, related: list[Related] | None = None,
                  data: dict[str, Any] | None = None, path: str | None = None) -> Diagnostic:
        diag = rule.diagnostic(path or self.path, message, span, pointer, help=help, related=related, data=data)
        self.diagnostics.append(diag)
        return diag

    def report(self, rule: Rule, dest: str, message: str, *, at_value: bool = False,
               help: str | None = None, related: list[Related] | None = None) -> Diagnostic:
        """Report at a flag (or its value); at the command when the flag is not given."""
        span = self.value_span(dest) if at_value else self.flag_span(dest)
        return self.report_at(rule, span, self.option(dest), message, help=help, related=related,
                              path=self.path_of(dest, at_value))

    def path_of(self, dest: str, at_value: bool = False) -> str:
        """The file a flag (or its value) was written in: a sourced file or the script itself."""
        occ = self.args.last(dest)
        if occ is None:
            return self.path
        tok = occ.values[0] if at_value and occ.values else occ.option
        return tok.path or self.path

    def related(self, dest: str, note: str) -> Related:
        return Related(note, self.path_of(dest), self.flag_span(dest))

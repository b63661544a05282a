"""MLM121: the flags Megatron requires, less what the program loads itself (a checkpoint's or Retro's arguments)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.rules.registry import check, rule

if TYPE_CHECKING:  # annotations only: a DeepSpeed-only check never imports the Megatron context
    from guard.rules.megatron_context import MegatronCheck

REQUIRED = rule(
    "MLM121", "required-flag-missing", "error",
    "A flag Megatron requires is not given.",
    what="Checks that `--num-layers`, `--hidden-size`, `--num-attention-heads`, "
         "`--max-position-embeddings`, `--micro-batch-size` and `--seq-length` are present (Megatron-LM). "
         "Not what the program loads itself: the shape with `--use-checkpoint-args` (load_args_from_checkpoint), "
         "seq length and positions with `--retro-project-dir` (load_retro_args reads its config.json).",
    why="validate_args stops with `AssertionError: hidden_size argument is None` after all ranks "
        "started.",
    example="pretrain_gpt.py --num-layers 24 --num-attention-heads 16",
    use_instead="pretrain_gpt.py --num-layers 24 --hidden-size 1024 --num-attention-heads 16 "
                "--max-position-embeddings 2048 --micro-batch-size 4",
)


_LOADED_BY_PROGRAM = {  # what the program fills in before validate_args asks (load_args_from_checkpoint, ...)
    "use_checkpoint_args": ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings", "seq_length"),
    "retro_project_dir": ("max_position_embeddings", "seq_length")}  # load_retro_args


@check(REQUIRED, target="megatron")
def required(s: MegatronCheck) -> None:
    needed = ["num_layers", "hidden_size", "num_attention_heads", "micro_batch_size"]
    if s.cmd.flavour != "megatron-deepspeed":
        needed.insert(3, "max_position_embeddings")
    if s.cmd.flavour != "megatron-deepspeed" and s.cmd.given("encoder_num_layers"):
        needed.remove("num_layers")
    hybrid = s.cmd.given("hybrid_layer_pattern") or s.cmd.given("hybrid_override_pattern")
    if hybrid and "num_layers" in needed:
        needed.remove("num_layers")  # derived from the pattern
    if s.cmd.flavour != "megatron-deepspeed" and not s.cmd.given("encoder_seq_length"):
        needed.append("seq_length")  # validate_args: `assert args.encoder_seq_length is not None`
    for loads, flags in _LOADED_BY_PROGRAM.items():
        if s.cmd.given(loads) and s.cmd.v(loads) not in (None, False):
            needed = [d for d in needed if d not in flags]
    if any(p.kind == "unresolved" for p in s.cmd.args.problems):
        return  # a word such as $EXTRA_ARGS that is not known statically may hold the flags (MLM010 says so)
    missing = [d for d in needed if d in s.cmd.table.by_dest and not s.cmd.given(d) and s.cmd.default(d) is None
               and s.cmd.known(d)]
    if missing:
        names = ", ".join(s.cmd.option(d) for d in missing)
        s.report_at(REQUIRED, s.cmd.anchor, s.cmd.option(missing[0]),
                      f"{names} {'is' if len(missing) == 1 else 'are'} required and not given "
                      f"({missing[0]} argument is None)")

"""LCH0xx and SH0xx: launcher options and the launch script itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.diagnostic import Span
from guard.rules.registry import check, rule

if TYPE_CHECKING:  # annotations only: a DeepSpeed-only check never imports the Megatron context
    from guard.rules.megatron_context import MegatronCheck

LAUNCHER_CONFLICT = rule(
    "LCH001", "launcher-options-invalid", "error",
    "Launcher options the launcher itself refuses.",
    what="Checks deepspeed's `--include` with `--exclude`, and `--num_nodes/--num_gpus` with "
         "include/exclude; torchrun's `--nnodes` format (N or MIN:MAX with 0 < MIN <= MAX).",
    why="The launcher stops before any rank starts: `ValueError: Cannot specify num_nodes/gpus with "
        "include/exclude`, `nnodes=2:1 is not in \"MIN:MAX\" format`.",
    example="deepspeed --num_gpus 4 --include localhost:0,1 pretrain_gpt.py",
    use_instead="deepspeed --include localhost:0,1 pretrain_gpt.py",
    references=("deepspeed/launcher/runner.py", "torch/distributed/run.py"),
)

LOCAL_RANK = rule(
    "LCH002", "local-rank-flag-unknown", "error",
    "The launcher appends a --local_rank / --local-rank flag the Megatron version does not define.",
    what="The deepspeed launcher appends `--local_rank=N` (unless `--no_local_rank`) and "
         "`python -m torch.distributed.launch` appends `--local-rank=N` (unless `--use-env`); "
         "checks that the selected Megatron version's parser accepts that spelling.",
    why="Megatron-LM defines only `--local-rank`: launched by `deepspeed`, every rank stops with "
        "`error: unrecognized arguments: --local_rank=0`.",
    example="deepspeed --num_gpus 8 pretrain_gpt.py ...   # Megatron-LM",
    use_instead="deepspeed --num_gpus 8 --no_local_rank pretrain_gpt.py ...   # or torchrun",
)

WORLD_CONFLICT = rule(
    "LCH003", "world-size-disagrees-with-launcher", "warning",
    "--world-size or [tool.guard] world-size disagrees with the world the launcher starts.",
    what="The launcher (torchrun, deepspeed, srun, ...) decides how many ranks start; a world size given to "
         "guard that differs is overruled, and this says so at the launcher option.",
    why="Checking and estimating a 16-rank job that the script launches on 4 ranks judges the wrong job; "
        "either the setting is stale or the script is.",
    example="guard check --world-size 16 train.sh   # torchrun --nproc-per-node 4 --nnodes 1",
    use_instead="fix the stale one, or pass --force-world-size when the launcher's value is not what runs",
)

SYNTAX = rule(
    "SH001", "bash-syntax-error", "error",
    "The launch script has a bash syntax error (unbalanced quote, unclosed block).",
    what="Finds the first syntax error the way bash reads the script (quotes, substitutions, heredocs, "
         "compound commands and their closers, `case` items, redirections) and reports it at the line "
         "`bash -n` names, in bash's words. Only the commands before the broken one are read: bash stops there.",
    why="bash runs a script line by line and fails only when it reaches the broken line, often "
        "after the job was queued; a lost quote also glues flags into one argument.",
    example='GPT_ARGS="--num-layers 24\ntorchrun pretrain_gpt.py $GPT_ARGS',
    use_instead='GPT_ARGS="--num-layers 24"\ntorchrun pretrain_gpt.py $GPT_ARGS',
)

SOURCE = rule(
    "SH002", "unresolved-source", "info",
    "A sourced file that guard cannot read: its variables stay unknown.",
    what="Follows `source FILE` / `. FILE` next to the script; reports when the path is not "
         "known statically or the file is missing.",
    why="Values set there (parallel sizes, batch) cannot be checked; guard says so instead of "
        "guessing.",
    example="source $CLUSTER_ENV",
    use_instead="source ./cluster_env.sh",
)

NO_COMMAND = rule(
    "SH003", "no-training-command", "info",
    "The script launches no Python program guard recognises.",
    what="Reports a launch script in which no command starts Python (directly, or through "
         "torchrun, deepspeed, srun, accelerate or mpirun).",
    why="Nothing in it was checked; the command may be built in a way guard cannot follow "
        "(eval, a function from another file).",
    example="eval $CMD",
    use_instead="torchrun ... pretrain_gpt.py $ARGS",
)

PLACEHOLDER = rule(
    "SH004", "template-placeholder", "warning",
    "A template placeholder such as `<path>` is left in a command.",
    what="Finds `<name>` written in a command: bash reads it as redirections (`< name` and `> next-word`), "
         "so the command stops with `name: No such file or directory` before it starts. The command is then "
         "judged as if each placeholder were filled in with a value guard does not know, so the template's real "
         "flag errors are still found.",
    why="Launch scripts copied from a README keep placeholders such as `<path to data>` or `--save <ckpt>`; "
        "the job fails at once.",
    example="torchrun pretrain_gpt.py --load <checkpoint> --num-layers 24",
    use_instead="torchrun pretrain_gpt.py --load /ckpt/gpt --num-layers 24",
)


# what the script reader finds about the script itself, by kind (guard.megatron.from_script.ScriptFinding)
SCRIPT_FINDINGS = {"syntax": SYNTAX, "source": SOURCE, "no-command": NO_COMMAND, "placeholder": PLACEHOLDER}


@check(WORLD_CONFLICT, target="megatron")
def world_conflict(s: MegatronCheck) -> None:
    overruled = s.job.overruled.get("layout.world")
    if overruled is None:
        return
    ours, given = overruled
    world = s.job.origin("layout.world")
    s.report_at(WORLD_CONFLICT, Span(world.line, world.col), None,
                f"{given.label} says {ours} ranks but the launcher starts {s.job.layout.world} ({world.label}): "
                f"guard judges the launcher's {s.job.layout.world}",
                help="fix the stale value, or pass --force-world-size to judge the job on your world size",
                path=world.path)


@check(LAUNCHER_CONFLICT, LOCAL_RANK, target="megatron")
def launcher(s: MegatronCheck) -> None:
    launch = s.cmd.launch
    if launch is None:
        return
    ds = launch.layer("deepspeed")
    if ds is not None:
        include, exclude = ds.get("--include"), ds.get("--exclude")
        counts = ds.get("--num_gpus") or ds.get("--num_nodes")
        if include is not None and exclude is not None:
            s.report_at(LAUNCHER_CONFLICT, exclude.span(), "--exclude",
                          "deepspeed: include_str and exclude_str are mutually exclusive", path=exclude.path or None)
        elif counts is not None and (include is not None or exclude is not None):
            s.report_at(LAUNCHER_CONFLICT, counts.span(), "--num_gpus",
                          "deepspeed: Cannot specify num_nodes/gpus with include/exclude", path=counts.path or None)
        if ds.get("--no_local_rank") is None and s.cmd.table.get("--local_rank") is None:
            s.report_at(LOCAL_RANK, ds.name.span(), None,
                          f"the deepspeed launcher appends --local_rank=N, which Megatron {s.cmd.table.ref} "
                          "does not define: every rank stops with 'unrecognized arguments'",
                          help="add --no_local_rank to the deepspeed launcher, or launch with torchrun",
                          path=ds.name.path or None)
    legacy = launch.layer("torch.distributed.launch")
    if legacy is not None and legacy.get("--use-env", "--use_env") is None and \
            s.cmd.table.get("--local-rank") is None:
        s.report_at(LOCAL_RANK, legacy.name.span(), None,
                      f"torch.distributed.launch appends --local-rank=N, which Megatron {s.cmd.table.ref} "
                      "does not define", help="add --use-env, or use torchrun", path=legacy.name.path or None)
    for kind in ("torchrun", "torch.distributed.launch"):
        layer = launch.layer(kind)
        nnodes = layer.get("--nnodes") if layer else None
        if nnodes is not None and nnodes.resolved:
            low, colon, high = nnodes.text.partition(":")
            ok = low.isdigit() and (not colon or high.isdigit())
            if ok:
                ok = int(low) > 0 and (not colon or int(low) <= int(high))
            if not ok:
                s.report_at(LAUNCHER_CONFLICT, nnodes.span(), "--nnodes",
                              f'{kind}: nnodes={nnodes.text} is not in "MIN:MAX" format (0 < MIN <= MAX)',
                              path=nnodes.path or None)

"""MLM0xx: the Megatron command line itself: unknown flags, values argparse refuses, deprecated flags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.megatron import flag_table
from guard.rules.registry import check, rule

if TYPE_CHECKING:  # annotations only: a DeepSpeed-only check never imports the Megatron context
    from guard.rules.megatron_context import MegatronCheck

UNKNOWN = rule(
    "MLM001", "unknown-flag", "error",
    "A flag the selected Megatron version does not define.",
    what="Checks every flag of the Megatron command line against the flag table generated from "
         "that version's `arguments.py` (`--megatron-version`; Megatron-DeepSpeed's table when the "
         "command line uses `--deepspeed`/`--zero-stage`). Suggests the closest real flag and says "
         "when the flag exists in another vendored version.",
    why="Megatron's parser uses `allow_abbrev=False` and stops every rank with `error: "
        "unrecognized arguments: ...` after the job was scheduled. Flags are renamed between "
        "releases (dataclass-generated flags follow field names), and Megatron-DeepSpeed spells "
        "some differently (`--num-key-value-heads`, `--deepspeed_config`).",
    example="--tensor-model-paralel-size 4",
    use_instead="--tensor-model-parallel-size 4",
    references=("megatron/training/arguments.py: parse_args",),
)

UNKNOWN_CUSTOM = rule(
    "MLM011", "unknown-program", "info",
    "A program that is not an entry point of the Megatron guard judges with (a fork's or a downstream "
    "project's), with the flags that Megatron does not define.",
    what="Once per command whose program (`pretrain_yuan.py`, `pretrain_qwen.py`, a fork's `finetune.py`) "
         "is not one of the selected Megatron's entry scripts, and no --megatron-source gives its checkout: "
         "lists the flags upstream does not define (the program or its fork may define them) with the "
         "closest upstream flag. guard's other Megatron findings on that command are lowered to info, "
         "because the fork's own parser and validate_args may judge them otherwise. Also once per command "
         "that runs an upstream program name with flags only one vendored fork table defines (bigcode's "
         "`--attention-head-type`): the command is judged with that fork's table, and this says so.",
    why="Forks (Yuan, Megatron-LLaMA, epfLLM, Pai-Megatron-Patch) add flags, choices and checks of their own; "
        "judged against upstream, their scripts drew dozens of false errors. A typo of a Megatron flag "
        "still stops every rank with 'unrecognized arguments', so the list stays visible.",
    example="pretrain_qwen.py --tensor-model-paralel-size 2",
    use_instead="guard check --megatron-source /path/to/the/fork train.sh",
)

MISSING_VALUE = rule(
    "MLM002", "flag-missing-value", "error",
    "A flag that takes a value is followed by another flag or by nothing.",
    what="Reports a value-taking flag (`--lr`, `--num-layers`, ...) with no value after it, or with "
         "fewer values than its `nargs` asks for.",
    why="argparse stops with `error: argument --lr: expected one argument`. In launch scripts this "
        "is usually an empty shell variable (`--lr $LR` with LR unset) or a lost line continuation.",
    example="--lr --min-lr 1e-5",
    use_instead="--lr 3e-4 --min-lr 1e-5",
)

BAD_VALUE = rule(
    "MLM003", "invalid-flag-value", "error",
    "A value argparse cannot convert to the flag's type, or not among its choices.",
    what="Converts each value with the flag's type (int, float, enum member names, Megatron's own "
         "parsers such as `tuple_type`) and checks `choices`.",
    why="`--num-layers 24.0` or `--normalization rmsnorm` (Megatron-LM spells it `RMSNorm`) stop "
        "every rank with `error: argument ...: invalid int value` / `invalid choice`.",
    example="--normalization rmsnorm",
    use_instead="--normalization RMSNorm",
)

VALUE_TO_SWITCH = rule(
    "MLM004", "value-for-switch", "error",
    "A value given to a flag that takes none (store_true / store_false).",
    what="Reports `--bf16=true`, and `--bf16 true` where the stray word follows a switch.",
    why="argparse refuses `--bf16=true` (`ignored explicit argument 'true'`) and treats the word in "
        "`--bf16 true` as a positional argument: `unrecognized arguments: true`. Writing "
        "`--use-distributed-optimizer false` does not turn it off — it stops the job.",
    example="--bf16 true --use-distributed-optimizer false",
    use_instead="--bf16",
)

STRAY = rule(
    "MLM005", "stray-argument", "error",
    "A word that is neither a flag nor a flag's value.",
    what="Reports positional words on the Megatron command line (Megatron takes none), such as a "
         "value split in two by unquoted spaces or a doubled value.",
    why="argparse stops every rank with `error: unrecognized arguments: ...`.",
    example="--split 949, 50, 1",
    use_instead="--split 949,50,1",
)

DEPRECATED = rule(
    "MLM006", "deprecated-flag", "warning",
    "A deprecated flag: it still parses but is ignored or mapped to a replacement.",
    what="Reports flags whose help text or whose `validate_args` handling says they are deprecated "
         "or have no effect, with the replacement when Megatron names one.",
    why="Deprecated flags are removed without notice in later releases, and some already do "
        "nothing (`--use-dist-ckpt`, `--ckpt-fully-parallel-save`): the job runs differently from "
        "what the script says.",
    example="--use-rotary-position-embeddings",
    use_instead="--position-embedding-type rope",
    references=("megatron/training/arguments.py: validate_args",),
)

REMOVED = rule(
    "MLM007", "removed-flag", "error",
    "A flag that parses but that validate_args refuses (`... is no longer valid`).",
    what="Reports flags that Megatron still defines only to stop with a message: `--batch-size`, "
         "`--warmup`, `--model-parallel-size`, `--checkpoint-activations` (which prints and exits "
         "with status 0, so the job looks successful).",
    why="`AssertionError: --batch-size argument is no longer valid, use --micro-batch-size "
        "instead` on every rank, after the job was scheduled.",
    example="--checkpoint-activations",
    use_instead="--recompute-activations",
    references=("megatron/training/arguments.py: validate_args",),
)

REPEATED = rule(
    "MLM008", "repeated-flag", "warning",
    "A flag given twice with different values: the last one wins.",
    what="Reports a flag that appears more than once with different values (often one from a "
         "shared argument array and one appended later).",
    why="argparse keeps the last value silently; the earlier one in the script is dead and "
        "misleading.",
    example="--micro-batch-size 4 ... --micro-batch-size 2",
    use_instead="--micro-batch-size 2",
)

BOOL_TYPE = rule(
    "MLM009", "bool-type-flag", "warning",
    "A `type=bool` flag given 'False': any non-empty string is True.",
    what="Reports values such as `False`, `0` or `no` for flags declared with `type=bool` "
         "(`--onnx-safe`, `--lazy-mpu-init`).",
    why="argparse calls `bool('False')`, which is True.",
    example="--lazy-mpu-init False",
    use_instead="(leave the flag out)",
)

UNRESOLVED = rule(
    "MLM010", "unresolved-value", "info",
    "A flag value that depends on something guard cannot know statically.",
    what="Tells you which values come from variables the script does not set (cluster environment, "
         "positional parameters, command substitution). guard never guesses them: checks that "
         "need them are skipped.",
    why="Knowing what was not checked matters as much as what was. Set the variable with a "
        "default (`${TP:-4}`) to let guard check it.",
    example="--tensor-model-parallel-size $TP",
    use_instead="--tensor-model-parallel-size ${TP:-4}",
)


@check(UNKNOWN, UNKNOWN_CUSTOM, MISSING_VALUE, BAD_VALUE, VALUE_TO_SWITCH, STRAY, UNRESOLVED, target="megatron")
def parse_problems(s: MegatronCheck) -> None:
    others = [t for t in flag_table.available() if t != s.cmd.table.ref]
    switch_ids = {id(o.option) for o in s.cmd.args.occurrences if not o.flag.takes_value}
    tokens = s.cmd.args.tokens
    # a stray word right after a switch is a value meant for it (`--bf16 true`)
    after_switch = {id(tokens[i + 1]): tok.text for i, tok in enumerate(tokens[:-1]) if id(tok) in switch_ids}
    custom: list[str] = []  # flags upstream lacks, given to a program it does not know
    for problem in s.cmd.args.problems:
        tok = problem.token
        if problem.kind == "unknown":
            name = tok.text.split("=")[0]
            where = [t for t in others if flag_table.load(t).get(name) is not None]
            message = f"unrecognized argument {name!r} for Megatron {s.cmd.table.ref}"
            if where:
                message += f" (it exists in {', '.join(where)})"
            hint = f"did you mean {problem.suggestion!r}?" if problem.suggestion else None
            if where and hint is None:  # the script may run that fork under an upstream program name
                hint = f"if the script runs that fork: --megatron-version {where[0]} (or --megatron-source CHECKOUT)"
            if s.cmd.table.knows_program(s.cmd.program):
                s.report_at(UNKNOWN, tok.span, name, message, help=hint, path=tok.path or None)
            else:
                custom.append(name + (f" ({hint})" if hint else ""))
        elif problem.kind == "missing-value":
            s.report_at(MISSING_VALUE, tok.span, tok.text, problem.message, path=tok.path or None)
        elif problem.kind in ("bad-type", "bad-choice"):
            hint = None
            if problem.flag is not None and problem.flag.choices:
                folded = {str(c).lower(): c for c in problem.flag.choices}
                match = folded.get(tok.text.lower())
                hint = f"Megatron spells it {match!r}" if match is not None else None
            s.report_at(BAD_VALUE, tok.span, problem.flag.name if problem.flag else None,
                          problem.message, help=hint, path=tok.path or None)
        elif problem.kind == "extra-value":
            s.report_at(VALUE_TO_SWITCH, tok.span, tok.text.split("=")[0], problem.message,
                          help=f"write {tok.text.split('=')[0]} alone, or leave it out to keep the default",
                          path=tok.path or None)
        elif problem.kind == "stray":
            switch = after_switch.get(id(tok))
            if switch is not None:
                s.report_at(VALUE_TO_SWITCH, tok.span, switch,
                              f"{switch} takes no value: {tok.describe()!r} becomes an unrecognized "
                              "argument", help=f"write {switch} alone, or leave it out",
                              path=tok.path or None)
            else:
                s.report_at(STRAY, tok.span, None, problem.message, path=tok.path or None)
        elif problem.kind == "unresolved":
            s.report_at(UNRESOLVED, tok.span, None, f"{tok.describe()!r} is not known statically; "
                          "flags it may hold are not checked", path=tok.path or None)
    if not s.cmd.table.knows_program(s.cmd.program):
        _unknown_program(s, custom)
    elif s.cmd.fork_flags:
        _fork_by_flags(s)
    for occ in s.cmd.args.occurrences:
        if occ.flag.type not in ("int", "float", "bool") and not occ.flag.choices:
            continue  # paths and names: nothing guard checks depends on them
        for tok in occ.values:
            if not tok.resolved:
                s.report_at(UNRESOLVED, tok.span, occ.option.text,
                              f"{occ.option.text} {tok.describe()}: the value is not known statically; "
                              "checks that need it are skipped", path=tok.path or None)


def _unknown_program(s: MegatronCheck, flags: list[str]) -> None:
    """One info per command: the program is not upstream's, and the flags upstream does not define."""
    program = s.cmd.launch.program if s.cmd.launch is not None else None
    span = program.span() if program is not None else s.cmd.anchor
    listed = f"; flags Megatron {s.cmd.table.ref} does not define (it may): {', '.join(flags)}" if flags else ""
    forks = [ref for ref in flag_table.available() if ref != s.cmd.table.ref and
             flag_table.load(ref).knows_program(s.cmd.program) and s.cmd.program.endswith(tuple(
                 flag_table.load(ref).data.get("programs", [])))]
    vendored = f"; or --megatron-version {' / '.join(forks)}, a vendored table that runs it" if forks else ""
    s.report_at(UNKNOWN_CUSTOM, span, None,
                  f"{s.cmd.program} is not an entry point of Megatron {s.cmd.table.ref}: upstream's judgements "
                  f"of this command are shown as info{listed}",
                  help="give the checkout it runs: --megatron-source PATH (or [tool.guard] megatron-source) "
                       f"judges it by its own flags, choices and defaults{vendored}")


def _fork_by_flags(s: MegatronCheck) -> None:
    """One info per command: judged with a vendored fork's table because of flags only that fork defines."""
    program = s.cmd.launch.program if s.cmd.launch is not None else None
    s.report_at(UNKNOWN_CUSTOM, program.span() if program is not None else s.cmd.anchor, None,
                  f"judged with Megatron {s.cmd.table.ref} ({s.cmd.table.source['repo']}): "
                  f"{', '.join(s.cmd.fork_flags)} {'is' if len(s.cmd.fork_flags) == 1 else 'are'} defined by that fork "
                  "alone, so the command runs it under an upstream program name",
                  help="if it runs another checkout: --megatron-source PATH or --megatron-version REF")


@check(DEPRECATED, REMOVED, REPEATED, BOOL_TYPE, target="megatron")
def flag_usage(s: MegatronCheck) -> None:
    seen: dict[str, list] = {}
    for occ in s.cmd.args.occurrences:
        name = occ.option.text.split("=")[0]
        fact = occ.flag.deprecated
        if fact:
            message = fact["message"]
            if fact.get("removed"):
                s.report_at(REMOVED, occ.option.span, name, f"{name}: {message}",
                              help=f"use {fact['replacement']}" if fact.get("replacement") else None,
                              path=occ.option.path or None)
            else:
                s.report_at(DEPRECATED, occ.option.span, name, f"{name} is deprecated: {message}",
                              help=f"use {fact['replacement']}" if fact.get("replacement") else None,
                              path=occ.option.path or None)
        if occ.flag.type == "bool" and occ.values and occ.values[0].resolved and \
                occ.values[0].text.strip().lower() in ("false", "0", "no", "off", "none"):
            s.report_at(BOOL_TYPE, occ.values[0].span, name,
                          f"{name} {occ.values[0].text}: the flag has type=bool, so argparse stores "
                          f"bool({occ.values[0].text!r}) = True", help=f"leave {name} out to keep it off",
                          path=occ.values[0].path or None)
        if occ.flag.action in ("store", "store_true", "store_false") and occ.known:
            seen.setdefault(occ.flag.dest, []).append(occ)
    for dest, occs in seen.items():
        values = {repr(o.value) for o in occs}
        if len(occs) > 1 and len(values) > 1:
            first, last = occs[0], occs[-1]
            s.report_at(REPEATED, first.option.span, first.option.text.split("=")[0],
                          f"{first.option.text.split('=')[0]} is given {len(occs)} times with different "
                          f"values; argparse keeps the last ({_show(last)})",
                          help="remove the earlier occurrence", path=first.option.path or None)


def _show(occ) -> str:
    if occ.values:
        return " ".join(v.text for v in occ.values)
    return occ.option.text

"""Write a changed job back into a Megatron launch: edits of the user's files, or the changed flags as argv words."""

from __future__ import annotations

import os
import shlex

from guard.job.deepspeed_changes import config_changes
from guard.job.edits import Refusal, Rewrite, Texts, whole_changes
from guard.job.megatron_changes import REMOVE, FlagChange, flag_changes
from guard.job.write_launcher import world_edits
from guard.job.write_shell import ShellWriter, written, written_ltext
from guard.megatron import flag_table


def megatron_edits(cmd, old, new, texts: dict[str, str] | None = None) -> Rewrite:
    """Edits that make guard read `new` from the files `cmd` (a MegatronCommand) was read from, where it read `old`.

    `texts`: file texts by path when they are not on disk (an argv given as a string). Changes that cannot be
    written (a value in an unresolved or shared shell variable, a computed value) are in `.refused`.
    """
    writer = ShellWriter(Texts(dict(texts or {})))
    config = cmd.deepspeed_config.data if cmd.deepspeed_config is not None else None
    changes, refused = flag_changes(old, new, cmd.table, cmd.given, old.arch.num_layers if old.arch else None, config)
    for refusal in refused:
        writer.refuse(refusal.field, refusal.reason, cmd.path, cmd.anchor)
    inline = (cmd.launch.command.path, cmd.launch.command.span) if cmd.launch is not None else None
    for change in changes:
        added = _flag_edit(cmd, change, writer, inline)
        if added:  # one insertion per change, so that a refused change leaves out only its own flags
            _append(cmd, change.field, added, writer)
    world_edits(cmd, old.layout, new.layout, writer)
    if cmd.flavour == "megatron-deepspeed" and cmd.deepspeed_config is not None:
        _config_edits(cmd, old, new, writer)
    return writer.finish()


def megatron_flags(old, new, cmd=None) -> Rewrite:
    """The changed flags as argv words (Megatron's argparse keeps the last of a repeated flag, so a launcher can
    append them). `cmd`: the MegatronCommand `old` was read from, when there is one (it says which flags the user
    wrote, and in which spelling). A switch to turn off and the world size cannot be appended: see `.refused`."""
    mds = new.framework == "megatron-deepspeed"
    if cmd is not None:
        table, given, layers = cmd.table, cmd.given, (old.arch.num_layers if old.arch else None)
    else:
        table = flag_table.load(flag_table.DEFAULT_MEGATRON_DEEPSPEED if mds else flag_table.DEFAULT_MEGATRON_LM)
        given, layers = _switches_on(old, mds).__contains__, old.arch.num_layers if old.arch else None
    config = cmd.deepspeed_config.data if cmd is not None and cmd.deepspeed_config is not None else None
    changes, refused = flag_changes(old, new, table, given, layers, config)
    out, words = Rewrite(refused=refused), []
    for change in changes:
        option = table.by_dest[change.dest][0].name
        if change.value is REMOVE:
            out.refused.append(Refusal(change.field, f"{option} cannot be turned off by appending flags: remove it "
                                       "from the command"))
        else:
            words.append((change.field, [option] if change.value is True else [option, str(change.value)]))
    if (new.layout.world, new.layout.gpus_per_node) != (old.layout.world, old.layout.gpus_per_node):
        out.refused.append(Refusal("layout.world", f"the world size is the launcher's: start {new.layout.world} "
                                   "processes"))
    for change in config_changes(config, old, new, megatron=True).changes if config is not None else ():
        # batch keys only have to agree with the flags; the config's stage, precision and offload are what is read
        field = "deepspeed_config" if change.field in ("micro_batch", "num_microbatches", "global_batch") \
            else change.field
        out.refused.append(Refusal(field, f"the DeepSpeed config's {'.'.join(change.path)} must change too: "
                                   "write it with megatron_edits or deepspeed_edits"))
    kept, dropped = whole_changes(words, out.refused)
    out.refused.extend(dropped)
    out.extend(word for flag in kept for word in flag)
    return out


def _switches_on(job, mds: bool) -> set[str]:
    """The flags the old job must have had on (what appending cannot undo)."""
    on = {"bf16"} if job.params_dtype == "bf16" else {"fp16"} if job.params_dtype == "fp16" else set()
    if job.layout.sequence_parallel:
        on.add("sequence_parallel")
    if job.distributed_optimizer:
        on.add("use_distributed_optimizer")
    if job.recompute != "none":
        on |= {"checkpoint_activations"} if mds and job.recompute == "full" else {"recompute_granularity"}
    if job.recompute == "full" and not mds:
        on |= {"recompute_method", "recompute_num_layers"}
    return on


def _flag_edit(cmd, change: FlagChange, writer: ShellWriter, inline) -> str | None:
    """Edit the flag where the user wrote it; return it as a word to add when it is not written."""
    occurrences = cmd.args.all(change.dest)
    if change.value is REMOVE:
        for occ in occurrences:  # argparse keeps the last one, but each would turn it back on
            words = [written(occ.option, cmd.path)] + [written(v, cmd.path) for v in occ.values]
            writer.remove(change.field, words, occ.option.text)
        return None
    option = cmd.table.by_dest[change.dest][0].name
    if not occurrences:
        return option if change.value is True else f"{option} {shlex.quote(str(change.value))}"
    occ = occurrences[-1]
    if change.value is True:
        return None
    if len(occ.values) != 1:
        writer.refuse(change.field, f"{occ.option.text} is written with {len(occ.values)} values: edit it by hand",
                      occ.option.path or cmd.path, occ.option.span)
        return None
    writer.set_value(change.field, written(occ.values[0], cmd.path), str(change.value),
                     option=written(occ.option, cmd.path), inline=inline, what=occ.option.text.split("=")[0])
    return None


def _append(cmd, name: str, word: str, writer: ShellWriter) -> None:
    """A new flag goes after the command's last word, in the file that holds the command."""
    if cmd.launch is not None:
        command = cmd.launch.command
        writer.insert(name, command.path, command.span.stop, [word], command.span.line)
    elif cmd.args.tokens:
        last = cmd.args.tokens[-1]
        writer.insert(name, last.path or cmd.path, last.span.stop, [word], cmd.args.tokens[0].span.line)
    else:
        writer.refuse(name, "the command has no words to add flags after", cmd.path, cmd.anchor)


def _config_edits(cmd, old, new, writer: ShellWriter) -> None:
    """A Megatron-DeepSpeed job's DeepSpeed config follows: its file, or the heredoc the script writes it with."""
    from guard.job.write_deepspeed import key_edits

    source = cmd.deepspeed_config
    plan = config_changes(source.data, old, new, megatron=True, label=source.label, locate=source.locate)
    writer.out.refused.extend(plan.refused)
    writer.out.notes.extend(plan.notes)
    if not plan.changes:
        return
    if source.label.startswith("heredoc at line "):
        heredoc = _heredoc(cmd, writer, int(source.label.rsplit(" ", 1)[1]))
        doc = _heredoc_doc(heredoc)
        if doc is None:
            writer.refuse(plan.changes[0].field, "the DeepSpeed config heredoc could not be read again", cmd.path)
            return
        for edit, field in key_edits(doc, plan.changes, writer.out):
            _heredoc_edit(heredoc, edit, field, writer)
        return
    if not os.path.isfile(source.label):
        writer.refuse(plan.changes[0].field, f"the DeepSpeed config {source.label} is not a file guard can edit",
                      cmd.path)
        return
    from guard.sources.loader import load_document

    doc = load_document(source.label)
    for edit, field in key_edits(doc, plan.changes, writer.out):
        writer.add(field, edit)


def _heredoc(cmd, writer: ShellWriter, line: int):
    from guard.shell.interpreter import interpret

    text = writer.texts.get(cmd.path) or ""
    found = [h for h in interpret(cmd.path, text).heredocs if h.span.line == line]
    return found[-1] if found else None


def _heredoc_doc(heredoc):
    from guard.megatron.ds_config import heredoc_document

    return heredoc_document(heredoc) if heredoc is not None else None


def _heredoc_edit(heredoc, edit, field: str, writer: ShellWriter) -> None:
    """An edit of the heredoc's rendered JSON, moved to where the script wrote those characters."""
    from guard.job.edits import Edit, line_starts, offset

    body = heredoc.body
    starts = line_starts(body.text)
    a, b = offset(starts, body.text, edit.start), offset(starts, body.text, edit.end)
    if a == b:  # an insertion: after the character before it, when the script wrote that one literally
        at = body.pos[a - 1] if 0 < a <= len(body.pos) else None
        script = writer.texts.get(heredoc.path) or ""
        if at is None or written_ltext(body.slice(a - 1, a)).text != body.text[a - 1] or \
                _char(script, at) != body.text[a - 1]:
            writer.refuse(field, "the heredoc's JSON is not written literally where a key must be added",
                          heredoc.path, heredoc.span)
            return
        point = (at[0] + 1, 1) if body.text[a - 1] == "\n" else (at[0], at[1] + 1)
        writer.add(field, Edit(heredoc.path, point, point, edit.replacement))
        return
    writer.set_value(field, written_ltext(body.slice(a, b)), edit.replacement,
                     inline=(heredoc.path, heredoc.span), what=f"the DeepSpeed config's {field}")


def _char(text: str, at: tuple[int, int]) -> str:
    from guard.job.edits import text_at

    return text_at(text, at, (at[0], at[1] + 1)) or ""

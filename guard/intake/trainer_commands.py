"""Fine-tuning jobs started from a command line: `llamafactory-cli train`, `axolotl train`, `trl sft`, and an
HF Trainer program under accelerate / torchrun / deepspeed / python, read into one FineTuneConfig whose values
keep their place (a key of the config file, or the flag on the command line), with the launcher chain that
starts it (guard/launchers) and the world that launcher says it starts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from guard.diagnostic import Span
from guard.inputs import find_near
from guard.job import finetune_argv as argv
from guard.job import openrlhf
from guard.job.finetune_config import FineTuneConfig, Where, read
from guard.job.finetune_dialects import AXOLOTL, HF_PROGRAM, LLAMAFACTORY, OPENRLHF, TRL, TRL_FLAGS, Dialect
from guard.launchers import registry, trainers
from guard.launchers.chain import Launch, find_launches
from guard.launchers.options import read_options
from guard.launchers.record import Layer, Scope, WorldReading
from guard.megatron.from_script import hf_trainer_like
from guard.shell.located import LText
from guard.shell.model import Command, Script
from guard.sources.document import Document, SourceError
from guard.sources.loader import load_document

TRL_COMMANDS = {"sft", "dpo", "grpo", "kto", "reward", "rloo"}  # trl/cli/main.py: TrainingCommand(name)
TRL_LISTS = frozenset({"lora_target_modules", "lora_modules_to_save", "report_to"})  # list fields: nargs="+"
OPENRLHF_LISTS = frozenset({"ds.lora.target_modules", "target_modules"})  # argparse nargs="*"
# accelerate launch options `trl <command>` hands on (trl/cli/commands/training.py: the strings its parser leaves)
TRL_LAUNCH = {"--num_processes", "--num_machines", "--config_file", "--accelerate_config", "--multi_gpu",
              "--main_process_port", "--mixed_precision"}


@dataclass
class TrainerCommand:
    """One command of a script that starts a fine-tuning job, as written (guard/intake/finetune.py makes its
    subject, deciding the world from `reading` there)."""

    command: Command
    ft: FineTuneConfig | None = None
    reading: WorldReading = field(default_factory=WorldReading)  # what its launcher says it starts
    launch: Launch | None = None  # the launcher chain, for guard launch's hook
    error: tuple[str, SourceError] | None = None  # a file the command names that cannot be read or parsed
    unknown: list[tuple[Where, str]] = field(default_factory=list)  # values not known statically

    @property
    def anchor(self) -> Span:
        return Span(self.command.span.line, self.command.span.col)


def read_script(script: Script, text: str, load) -> list[TrainerCommand]:
    """Every command of `script` that starts a fine-tuning job; `load(path)` -> Document (or SourceError)."""
    launches = {id(launch.command): launch for launch in find_launches(script)}
    out = []
    for command in script.commands:
        found = _read_command(script, command, launches.get(id(command)), text, load)
        if found is not None:
            out.append(found)
    return out


def finetune_commands(result, text: str) -> tuple[list[TrainerCommand], list]:
    """(the fine-tuning commands of a script read by guard.megatron.from_script, its Megatron commands on the
    other commands): a command is read one way only."""
    found = read_script(result.script, text, load_document) if result.script is not None else []
    taken = {id(f.command) for f in found}
    return found, [c for c in result.commands if c.launch is None or id(c.launch.command) not in taken]


def _read_command(script: Script, command: Command, launch: Launch | None, text: str, load):
    words = command.words
    name = os.path.basename(words[0].text) if words else ""
    sub = words[1].text if len(words) > 1 else ""
    scope = Scope(command, _environment(script, command), script.sbatch)
    if registry.get("llamafactory-cli").names(name) and sub == "train":
        layer = Layer("llamafactory-cli", words[0])
        reading = trainers.llamafactory_world(layer, scope)
        return _llamafactory(script, command, words[2:], text, load,
                             Launch(command, [layer], None, words[2:], reading))
    if registry.get("axolotl").names(name) and sub == "train":
        return _axolotl(script, command, words[2:], text, load, scope)
    if registry.get("trl").names(name) and sub in TRL_COMMANDS:
        return _trl(script, command, words[2:], text, load, scope)
    if launch is None:
        return None
    program = launch.program.text if launch.program is not None else ""
    if program == "axolotl.cli.train":
        return _axolotl(script, command, launch.args, text, load, scope, launch=launch)
    if (module := openrlhf.module_of(program)) is not None:
        return _openrlhf(script, command, launch, text, module)
    args = launch.args
    first = args[0].text if args else ""
    if first.endswith((".yaml", ".yml", ".json")) and not first.startswith("-"):  # LLaMA-Factory's train.py
        found = _llamafactory(script, command, args, text, load, launch)
        return found if found.error or (found.ft and found.ft.dialect is LLAMAFACTORY) else None
    names = {w.text.split("=")[0][2:].replace("-", "_") for w in args if w.text.startswith("--")}
    if hf_trainer_like(args) or "config" in names:
        trl = "config" in names or names & TRL_FLAGS or program.startswith("trl.") or "/trl/" in program
        found = _hf(script, command, args, text, load, TRL if trl else HF_PROGRAM, launch)
        accelerate_file(found, launch.layer("accelerate"), load)
        stem = os.path.splitext(os.path.basename(program))[0]
        if found.ft is not None and trl and stem in TRL_COMMANDS and launch.program is not None:
            _method_word(found, launch.program, command.path, stem)  # trl/scripts/dpo.py
        return found if found.error or found.ft else None
    return None


def _environment(script: Script, command: Command) -> dict[str, LText]:
    env = {name: value for name, (value, _span, _where) in script.exports.items()}
    env.update(command.env)
    return env


def _llamafactory(script, command, words, text, load, launch: Launch) -> TrainerCommand:
    """hparams/parser.py read_args: a `.yaml`/`.yml`/`.json` first argument is the config and the rest is an
    OmegaConf dotlist merged over it; otherwise the words are HfArgumentParser's."""
    found = TrainerCommand(command, reading=launch.world, launch=launch)
    first = words[0].text if words else ""
    if first.endswith((".yaml", ".yml", ".json")):
        doc = _load(found, words[0], command.path, load)
        if doc is None:
            return found
        found.ft = read(doc, LLAMAFACTORY)
        settings, _rest = argv.dotlist(words[1:], command.path)
    else:
        found.ft = _bare(script, command, text, LLAMAFACTORY)
        settings, _rest = argv.hf_args(words, LLAMAFACTORY, command.path)
    _apply(found, settings)
    return found


def _axolotl(script, command, words, text, load, scope: Scope, launch: Launch | None = None) -> TrainerCommand:
    """`axolotl train CONFIG [--key-name value] [-- LAUNCHER ARGS]` (click; the launcher is accelerate unless
    --launcher says otherwise) or `... -m axolotl.cli.train CONFIG [--key_name value]` (fire, `launch`)."""
    cut = next((i for i, w in enumerate(words) if w.text == "--"), len(words))
    words, launcher_args = words[:cut], words[cut + 1:]
    found = TrainerCommand(command, launch=launch, reading=launch.world if launch else WorldReading())
    config = next((w for w in words if not w.text.startswith("-")), None)
    if config is None:
        return found
    doc = _load(found, config, command.path, load)
    if doc is None:
        return found
    found.ft = read(doc, AXOLOTL)
    existing = doc.data if isinstance(doc.data, dict) else {}
    click = launch is None
    settings, _rest = argv.axolotl_args([w for w in words if w is not config], command.path, existing, click)
    if click:
        chosen = next((s for s in settings if s.key == "launcher"), None)
        inner, found.reading = trainers.axolotl_world(scope, str(chosen.value) if chosen else None, launcher_args)
        layers = [Layer("axolotl", command.words[0])]
        layers.append(Layer(inner.kind, command.words[0], read_options(inner, launcher_args, 0)[0]) if inner
                      else Layer("python", command.words[0]))
        found.launch = Launch(command, layers, None, [], found.reading)
    _apply(found, [s for s in settings if s.key != "launcher" or not click])
    return found


def _trl(script, command, words, text, load, scope: Scope) -> TrainerCommand:
    """`trl sft [--config x.yaml] [--flag value]`: TrlParser takes the training arguments, and the strings its
    parser leaves (--num_processes, --config_file, --accelerate_config, ...) go to `accelerate launch`."""
    ours, launcher = [], []
    i = 0
    while i < len(words):
        name = words[i].text.split("=")[0]
        into = launcher if name in TRL_LAUNCH else ours
        takes = name in TRL_LAUNCH and "=" not in words[i].text and name != "--multi_gpu"
        into.extend(words[i:i + 1 + takes])
        i += 1 + takes
    reading = trainers.trl_world(scope, launcher)
    accelerate = registry.get("accelerate")
    layers = [Layer("trl", command.words[0]),
              Layer("accelerate", command.words[0], read_options(accelerate, launcher, 0)[0])]
    found = _hf(script, command, ours, text, load, TRL, Launch(command, layers, None, [], reading))
    accelerate_file(found, None, load, launcher)
    if found.ft is not None:
        _method_word(found, command.words[1], command.path, command.words[1].text)
    return found


def _openrlhf(script, command, launch: Launch, text: str, module: str) -> TrainerCommand | None:
    """`deepspeed --module openrlhf.cli.train_dpo --flag value ...`: argparse flags, dotted or flat (None: a trainer
    guard names but does not price, left to the script's own message)."""
    method = openrlhf.MODULES.get(module)
    if method is None:
        return None
    found = TrainerCommand(command, reading=launch.world, launch=launch)
    found.ft = _bare(script, command, text, OPENRLHF)
    settings, _rest = argv.hf_args(launch.args, OPENRLHF, command.path, OPENRLHF_LISTS)
    _apply(found, settings)
    _method_word(found, launch.program, command.path, method)
    return found


def _method_word(found: TrainerCommand, word: LText, path: str, method: str) -> None:
    """The trainer the command runs (`trl dpo`, trl/scripts/grpo.py): DPO, GRPO, ... hold more than SFT."""
    span = word.span()
    found.ft.given("rl_method", method, Where(path, span, span, word.text, "flag"))


def _hf(script, command, words, text, load, dialect: Dialect, launch: Launch) -> TrainerCommand:
    """HfArgumentParser over the words; TrlParser's `--config x.yaml` first sets the defaults the flags override."""
    found = TrainerCommand(command, reading=launch.world, launch=launch)
    at = next((i for i, w in enumerate(words) if w.text == "--config"), None)
    if at is not None and at + 1 < len(words):
        doc = _load(found, words[at + 1], command.path, load)
        if doc is None:
            return found
        found.ft = read(doc, dialect)
        words = words[:at] + words[at + 2:]
    else:
        found.ft = _bare(script, command, text, dialect)
    settings, _rest = argv.hf_args(words, dialect, command.path, TRL_LISTS)
    _apply(found, settings)
    return found


def accelerate_file(found: TrainerCommand, layer: Layer | None, load, words: list[LText] | None = None) -> None:
    """An accelerate config named with --config_file (or trl's --accelerate_config FILE): its num_processes is
    the world when no --num_processes is given, and its DeepSpeed plugin the DeepSpeed config when no
    --deepspeed is; accelerate's own options win over the file's."""
    from guard.job import from_accelerate
    from guard.sources.deepspeed import is_accelerate

    opts = dict(layer.options) if layer is not None else read_options(registry.get("accelerate"), words or [], 0)[0]
    if (flag := opts.get("--use_fsdp")) is not None and found.ft is not None and "fsdp" not in found.ft.written:
        line, col = flag.first or (found.command.span.line, found.command.span.col)
        span = Span(line, col)  # the switch alone: accelerate wraps the Trainer's model in torch FSDP
        found.ft.put("fsdp", "accelerate launch --use_fsdp", Where(flag.path or found.command.path, span, span,
                                                                   "--use_fsdp", "flag"))
    named = opts.get("--config_file") or opts.get("--accelerate_config")
    if named is None or not named.resolved or found.ft is None:
        return
    path = find_near(named.text, found.command.path)
    if path is None:
        return  # a name accelerate or trl resolves itself (trl's zero3, ...): guard does not guess it
    try:
        doc = load(path)
    except SourceError as err:
        found.error = (path, err)
        return
    if not is_accelerate(doc):
        return
    size = from_accelerate.world_size(doc.data)
    if size and "--num_processes" not in opts:
        span = doc.span("/num_processes")
        found.reading = WorldReading(size, why=f"num_processes {size} in {path}",
                                     where=LText.at(str(size), span.line, span.col, path))
    if doc.data.get("distributed_type") == "FSDP":  # accelerate wraps the model in torch FSDP (its fsdp_config)
        for key, value, pointer in (("fsdp", f"distributed_type FSDP in {path}", "/distributed_type"),
                                    ("fsdp_config", doc.data.get("fsdp_config"), "/fsdp_config")):
            if value is not None and key not in found.ft.written:
                found.ft.put(key, value, Where(path, doc.span(pointer), doc.span(pointer, key=False), pointer))
    plugin = doc.data.get("deepspeed_config")
    if isinstance(plugin, dict) and "deepspeed" not in found.ft.written:
        pointer = "/deepspeed_config/deepspeed_config_file" if plugin.get("deepspeed_config_file") \
            else "/deepspeed_config"
        where = Where(path, doc.span(pointer), doc.span(pointer, key=False), pointer)
        if plugin.get("deepspeed_config_file"):
            found.ft.put("deepspeed", str(plugin["deepspeed_config_file"]), where)
        else:
            config, _written = from_accelerate.deepspeed_config(doc.data, lambda f: load(f).data)
            found.ft.put("deepspeed", config, where)


def _bare(script: Script, command: Command, text: str, dialect: Dialect) -> FineTuneConfig:
    """A command line with no config file: the values all come from flags, reported in the script."""
    doc = Document(command.path, text if command.path == script.path else "", {}, "argv")
    return FineTuneConfig(dialect, doc, anchor=Span(command.span.line, command.span.col))


def _apply(found: TrainerCommand, settings: list[argv.Setting]) -> None:
    for setting in settings:
        if setting.known:
            found.ft.put(setting.key, setting.value, setting.where)
        elif setting.key in found.ft.dialect.keys.values():  # `$BS`: the value guard reads stays the default
            found.unknown.append((setting.where, f"{setting.where.pointer} {setting.value} is not known statically"))


def _load(found: TrainerCommand, word: LText, script_path: str, load) -> Document | None:
    if not word.resolved:
        found.error = (script_path, SourceError(f"the config file {word.raw or word.text} is not known statically",
                                                word.span(), "GRD001"))
        return None
    path = find_near(word.text, script_path)
    if path is None:
        found.error = (script_path, SourceError(f"config file {word.text!r} not found (looked from the working "
                                                "directory and from the script's folder up)", word.span(), "GRD001"))
        return None
    try:
        doc = load(path)
    except SourceError as err:
        found.error = (path, err)
        return None
    if not isinstance(doc.data, dict):
        found.error = (path, SourceError("a training config must be a mapping", Span(1, 1)))
        return None
    return doc


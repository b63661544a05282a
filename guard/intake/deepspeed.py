"""A DeepSpeed config read into its subject: a plain or HF config, a GPT-NeoX YAML's DeepSpeed keys, the config an
accelerate YAML describes, or a heredoc a Megatron-DeepSpeed script writes."""

from __future__ import annotations

import functools

from guard.intake.model import given_model
from guard.intake.request import Request
from guard.intake.world import decide
from guard.job.architecture import Architecture
from guard.job.from_deepspeed import read_deepspeed
from guard.job.origin import Origin
from guard.job.subject import DeepSpeedDoc, Subject
from guard.launchers.record import WorldReading
from guard.settings import Settings
from guard.sources.deepspeed import DeepSpeedView, find_deepspeed
from guard.sources.document import Document, SourceError, pointer_of


@functools.lru_cache(maxsize=8)
def top_level_keys(deepspeed_version: str | None) -> frozenset[str]:
    """The top-level keys of the DeepSpeed release a config is judged for (they tell a DeepSpeed file)."""
    from guard import deepspeed_schema, deepspeed_target

    schema = deepspeed_schema.load(deepspeed_target.resolve(deepspeed_version).schema_version)
    return frozenset(schema.known_keys(()))


def view_of(doc: Document, settings: Settings) -> DeepSpeedView | None:
    return find_deepspeed(doc, set(top_level_keys(settings.deepspeed_version)))


def config_subject(doc: Document, settings: Settings, request: Request = Request(), *,
                   arch: Architecture | None = None, explicit: bool = True, framework: str | None = None,
                   world: bool = True, relocate=None, reading: WorldReading | None = None) -> Subject:
    """`reading`: the world the launcher that starts the program says; `world` False: a heredoc's config, whose
    data-parallel size is its Megatron job's, not --world-size."""
    arch = arch or given_model(request)
    view = view_of(doc, settings)
    ds = DeepSpeedDoc(doc, view.data if view else {}, view.kind if view else "none", view.origin if view else {},
                      framework, explicit=explicit, relocate=relocate)
    config, locate, origin = ds.data, _locator(doc), None
    missing = ""
    if view is not None and view.kind == "accelerate":
        config, locate, reading, origin, missing = _accelerate(doc)
    chosen = decide(reading, settings if world else Settings(), doc.path, origin=origin)
    job = read_deepspeed(config, doc.path, arch, chosen, seq_length=request.seq_length,
                         micro_batch=request.micro_batch, precision=request.precision,
                         gradient_checkpointing=request.gradient_checkpointing, locate=locate)
    if missing:
        job.missing["deepspeed"] = missing
    return Subject(job, "deepspeed", doc.path, deepspeed=ds, comments={doc.path: doc.comments})


def _locator(doc: Document):
    return lambda *p: (doc.path, doc.span(pointer_of(p)))


def _accelerate(doc: Document):
    """accelerate's DeepSpeedPlugin fields as the DeepSpeed config they fill, located in the YAML; its
    num_processes is the world `accelerate launch` starts (as a launcher's: it wins over --world-size)."""
    from guard.job import from_accelerate
    from guard.sources.loader import load_document

    problem = ""

    def load(name: str) -> dict:
        nonlocal problem
        try:
            data = load_document(name).data
        except SourceError as err:
            problem = f"{name}:{err.span.line}:{err.span.col}: {err.message}"
            return {}
        return data if isinstance(data, dict) else {}

    config, written = from_accelerate.deepspeed_config(doc.data, load)
    size = from_accelerate.world_size(doc.data)
    span = doc.span("/num_processes")
    origin = Origin("key", "num_processes (accelerate)", doc.path, span.line, span.col, "/num_processes")
    base = _locator(doc)

    def locate(*p):
        return base(*written.get(".".join(p), p))

    reading = WorldReading(size, why=f"num_processes {size} in {doc.path}") if size else None
    return config, locate, reading, origin, problem

"""Read a Megatron-LM / Megatron-DeepSpeed command into a TrainingJob: layout, model, batch, training settings."""

from __future__ import annotations

from guard.job.architecture import Architecture
from guard.job.flag_values import FlagValues
from guard.job.layout import DEFAULT_GPUS_PER_NODE, ParallelLayout
from guard.job.megatron_model import architecture
from guard.job.megatron_training import read_training
from guard.job.origin import Origin
from guard.job.stages import LayoutError
from guard.job.training_job import IncompleteJob, TrainingJob
from guard.megatron import derived
from guard.megatron.job import MegatronJob


def read_megatron(cmd: MegatronJob, base: Architecture | None = None, vocab: int | None = None) -> TrainingJob:
    """Never raises: what cannot be read goes to job.missing with the reason (rules judge the rest)."""
    deepspeed = cmd.flavour == "megatron-deepspeed" and cmd.v("deepspeed") is True
    job = TrainingJob(arch=None, framework="megatron-deepspeed" if deepspeed else "megatron")
    fv = FlagValues(cmd, job)
    job.origins["command"] = Origin("flag", cmd.program or "the command", cmd.path, cmd.anchor.line, cmd.anchor.col)
    job.layout = read_layout(fv)
    for name, section in (("model", lambda: _model(fv, base, vocab)), ("batch", lambda: _batch(fv)),
                          ("sequence", lambda: _sequence(fv)),
                          ("training", lambda: read_training(fv)), ("stages", lambda: _stages(fv))):
        try:
            section()
        except IncompleteJob as err:
            job.missing[name] = str(err)
    return job


def _int_or_none(cmd: MegatronJob, dest: str, default: int | None = 1) -> int | None:
    """A degree as written (None: unresolved); flags this flavour lacks take their neutral value."""
    if dest not in cmd.table.by_dest:
        return default
    return cmd.int_(dest, default)


def read_layout(fv: FlagValues) -> ParallelLayout:
    cmd, job = fv.cmd, fv.job
    for field, dest in (("layout.tp", "tensor_model_parallel_size"), ("layout.pp", "pipeline_model_parallel_size"),
                        ("layout.cp", "context_parallel_size"), ("layout.ulysses", "ds_sequence_parallel_size"),
                        ("layout.ep", "expert_model_parallel_size"), ("layout.vpp", "num_layers_per_virtual_"
                                                                                    "pipeline_stage")):
        if dest in cmd.table.by_dest:
            job.origins[field] = fv.origin(dest)
    tp, pp = _int_or_none(cmd, "tensor_model_parallel_size"), _int_or_none(cmd, "pipeline_model_parallel_size")
    deepspeed = cmd.flavour == "megatron-deepspeed"
    ep = _int_or_none(cmd, "moe_expert_parallel_size" if deepspeed else "expert_model_parallel_size")
    if deepspeed:
        job.origins["layout.ep"] = fv.origin("moe_expert_parallel_size")
        etp = tp if cmd.v("enable_expert_tensor_parallelism") is True else 1  # DeepSpeed MoE: experts whole
    else:
        etp = _int_or_none(cmd, "expert_tensor_parallel_size", None)
    world = cmd.world_size
    if cmd.world_conflict:
        ours, label = cmd.world_conflict
        job.notes.append(f"{label} says {ours} ranks, the launcher starts {world} ({cmd.world_size_why}): "
                         "the launcher's world is used (--force-world-size to use yours)")
    if world is not None:
        job.origins["layout.world"] = _world_origin(cmd)
    else:
        job.missing["world_size"] = (f"{cmd.path}: the world size is unknown ({cmd.world_size_why or 'no launcher'})"
                                     ": give --world-size N")
    layout_string = cmd.v("pipeline_model_parallel_layout") if "pipeline_model_parallel_layout" in \
        cmd.table.by_dest and cmd.given("pipeline_model_parallel_layout") else None
    return ParallelLayout(
        world=world, gpus_per_node=cmd.gpus_per_node or DEFAULT_GPUS_PER_NODE, tp=tp, pp=pp,
        vpp=_vpp(cmd, pp) or 1, cp=_int_or_none(cmd, "context_parallel_size"), ep=max(1, ep or 1),
        etp=etp, ulysses=_int_or_none(cmd, "ds_sequence_parallel_size") if deepspeed else 1,
        sequence_parallel=cmd.v("sequence_parallel") is True and (tp or 1) > 1,
        first_stage_layers=_int_or_none(cmd, "decoder_first_pipeline_num_layers", None),
        last_stage_layers=_int_or_none(cmd, "decoder_last_pipeline_num_layers", None),
        account_embedding=cmd.v("account_for_embedding_in_pipeline_split") is True,
        account_loss=cmd.v("account_for_loss_in_pipeline_split") is True,
        layout_string=str(layout_string) if layout_string else None)


def _world_origin(cmd: MegatronJob) -> Origin:
    token = cmd.world_token
    kind = cmd.world_size_source or "launcher"
    if token is not None:
        return Origin(kind, cmd.world_size_why, token.path or cmd.path, token.span.line, token.span.col)
    return Origin(kind, cmd.world_size_why, cmd.path, cmd.anchor.line, cmd.anchor.col)


def _vpp(cmd: MegatronJob, pp: int | None) -> int | None:
    """Virtual pipeline size from --num-virtual-stages-per-pipeline-rank or layers per virtual stage."""
    per_rank = cmd.int_("num_virtual_stages_per_pipeline_rank") if \
        "num_virtual_stages_per_pipeline_rank" in cmd.table.by_dest else None
    if per_rank:
        return per_rank if per_rank > 1 else None
    per_stage = cmd.int_("num_layers_per_virtual_pipeline_stage")
    layers = cmd.int_("num_layers")
    if per_stage and layers and pp:
        total = layers + int(cmd.v("account_for_embedding_in_pipeline_split") is True) + \
            int(cmd.v("account_for_loss_in_pipeline_split") is True)
        vpp = (total // pp) // per_stage
        return vpp if vpp > 1 else None
    return None


def _model(fv: FlagValues, base: Architecture | None, vocab: int | None) -> None:
    job, cmd = fv.job, fv.cmd
    arch = architecture(fv, base, vocab)
    for value, what in ((arch.num_layers, "--num-layers"), (arch.hidden, "--hidden-size"),
                        (arch.heads, "--num-attention-heads"), (arch.ffn_hidden, "--ffn-hidden-size"),
                        (arch.kv_channels, "--kv-channels"), (arch.query_groups, "--num-query-groups"),
                        (arch.vocab, "--vocab-size")):
        if value is None or value < 1:
            raise IncompleteJob(f"{cmd.path}: {what} must be a positive integer, got {value} (see guard check)")
    if arch.heads % arch.query_groups:
        raise IncompleteJob(f"{cmd.path}: --num-attention-heads {arch.heads} is not a multiple of "
                            f"--num-query-groups {arch.query_groups} (see guard check)")
    job.arch = arch
    for feature in base.unmodelled if base else ():
        job.add_unmodelled(feature, base.source or "--model / --hf-config")
    divisible = fv.int("make_vocab_size_divisible_by") or 128
    # the tokenizer's size already counts the EOD a NullTokenizer adds, where that Megatron adds one
    job.vocab_divisible_by = divisible
    job.padded_vocab = derived.padded_vocab_size(arch.vocab, divisible, job.layout.tp or 1)


def _sequence(fv: FlagValues) -> None:
    seq = fv.int("seq_length", None, field="seq_length")
    if not seq or seq < 1:
        raise IncompleteJob(f"{fv.cmd.path}: --seq-length is not set: give it in the command or with --seq-length")
    fv.job.seq_length = seq


def _batch(fv: FlagValues) -> None:
    job, cmd = fv.job, fv.cmd
    job.micro_batch = fv.int("micro_batch_size", None, "give --micro-batch-size", field="micro_batch") or 1
    if job.micro_batch < 1:
        raise IncompleteJob(f"{cmd.path}: --micro-batch-size must be positive")
    job.microbatch_group = fv.int("microbatch_group_size_per_vp_stage")
    dp = job.layout.dp
    gbs = fv.int("global_batch_size", field="global_batch")
    if dp is None:
        job.global_batch = gbs
        raise IncompleteJob(f"{cmd.path}: the data-parallel size is unknown, so are the microbatches")
    job.global_batch = gbs or job.micro_batch * dp  # validate_args' default
    if job.global_batch % (job.micro_batch * dp):
        raise IncompleteJob(f"{cmd.path}: --global-batch-size {job.global_batch} is not divisible by micro batch "
                            f"x DP = {job.micro_batch} x {dp}")
    job.num_microbatches = job.global_batch // (job.micro_batch * dp)


def _stages(fv: FlagValues) -> None:
    job = fv.job
    if job.arch is None:
        return
    try:
        job.chunks = job.layout.split(job.arch.num_layers)
    except LayoutError as err:
        raise IncompleteJob(f"{fv.cmd.path}: {err}") from None
    if job.layout.layout_string:
        from dataclasses import replace

        job.layout = replace(job.layout, vpp=len(job.chunks[0]))

"""Read a Megatron-LM / Megatron-DeepSpeed command into a TrainingJob: layout, model, batch, training settings."""

from __future__ import annotations

from dataclasses import replace

from guard.job.architecture import Architecture
from guard.job.flag_values import FlagValues
from guard.job.layout import ParallelLayout
from guard.job.megatron_model import architecture
from guard.job.megatron_training import read_training
from guard.job.origin import Origin
from guard.job.stages import LayoutError
from guard.job.training_job import IncompleteJob, TrainingJob
from guard.megatron import derived
from guard.job.world import World
from guard.megatron.command import MegatronCommand


def read_megatron(cmd: MegatronCommand, world: World, base: Architecture | None = None,
                  vocab: int | None = None) -> TrainingJob:
    """The job `cmd` runs on `world` (decided by guard/intake/world.py). Never raises: what cannot be read goes to
    job.missing with the reason (rules judge the rest)."""
    deepspeed = cmd.flavour == "megatron-deepspeed" and cmd.v("deepspeed") is True
    job = TrainingJob(arch=None, framework="megatron-deepspeed" if deepspeed else "megatron")
    fv = FlagValues(cmd, job)
    job.origins["command"] = Origin("flag", cmd.program or "the command", cmd.path, cmd.anchor.line, cmd.anchor.col)
    job.layout = read_layout(fv, world)
    for name, section in (("model", lambda: _model(fv, base, vocab)), ("batch", lambda: _batch(fv)),
                          ("sequence", lambda: _sequence(fv)),
                          ("training", lambda: read_training(fv)), ("stages", lambda: _stages(fv))):
        try:
            section()
        except IncompleteJob as err:
            job.missing[name] = str(err)
    return job


def _int_or_none(cmd: MegatronCommand, dest: str, default: int | None = 1) -> int | None:
    """A degree as written (None: unresolved); flags this flavour lacks take their neutral value."""
    if dest not in cmd.table.by_dest:
        return default
    return cmd.int_(dest, default)


# the layout fields a Megatron flag sets, for their origins (a rule reports a layout problem at its field's flag)
LAYOUT_FLAGS = {
    "layout.tp": "tensor_model_parallel_size", "layout.pp": "pipeline_model_parallel_size",
    "layout.cp": "context_parallel_size", "layout.ulysses": "ds_sequence_parallel_size",
    "layout.ep": "expert_model_parallel_size", "layout.etp": "expert_tensor_parallel_size",
    "layout.vpp": "num_virtual_stages_per_pipeline_rank",
    "layout.virtual_layers": "num_layers_per_virtual_pipeline_stage",
    "layout.layout_string": "pipeline_model_parallel_layout",
    "layout.first_stage_layers": "decoder_first_pipeline_num_layers",
    "layout.last_stage_layers": "decoder_last_pipeline_num_layers",
    "layout.account_embedding": "account_for_embedding_in_pipeline_split",
    "layout.account_loss": "account_for_loss_in_pipeline_split", "layout.sequence_parallel": "sequence_parallel",
}
VIRTUAL_OPTIONS = ("layout.virtual_layers", "layout.vpp", "layout.layout_string")  # validate_args: one at most


def read_layout(fv: FlagValues, world: World) -> ParallelLayout:
    cmd, job = fv.cmd, fv.job
    for field, dest in LAYOUT_FLAGS.items():
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
    world.put(job, cmd.path)
    if deepspeed and world.size and tp and pp:
        # Megatron-DeepSpeed's initialize_model_parallel clamps TP and PP to the world instead of failing
        tp = min(tp, world.size)
        pp = min(pp, max(world.size // tp, 1))
    if ep is None:
        job.missing["layout"] = f"{cmd.path}: the expert-parallel size is not known statically: give it literally"
    layout_string = cmd.v("pipeline_model_parallel_layout") if "pipeline_model_parallel_layout" in \
        cmd.table.by_dest and cmd.given("pipeline_model_parallel_layout") else None
    virtual_layers = cmd.int_("num_layers_per_virtual_pipeline_stage") if \
        "num_layers_per_virtual_pipeline_stage" in cmd.table.by_dest else None
    vpp = cmd.int_("num_virtual_stages_per_pipeline_rank") if \
        "num_virtual_stages_per_pipeline_rank" in cmd.table.by_dest else None
    return ParallelLayout(
        ds_pipe=_ds_pipe(fv, pp), stage_blocks=_stage_blocks(fv),
        world=world.size, gpus_per_node=world.gpus_per_node, tp=tp, pp=pp,
        vpp=vpp or 1, virtual_layers=virtual_layers, overlap_p2p=cmd.v("overlap_p2p_comm", True) is not False,
        cp=_int_or_none(cmd, "context_parallel_size"), ep=max(1, ep or 1),
        etp=etp, ulysses=_int_or_none(cmd, "ds_sequence_parallel_size") if deepspeed else 1,
        sequence_parallel=cmd.v("sequence_parallel") is True and (tp or 1) > 1,
        first_stage_layers=_int_or_none(cmd, "decoder_first_pipeline_num_layers", None),
        last_stage_layers=_int_or_none(cmd, "decoder_last_pipeline_num_layers", None),
        account_embedding=cmd.v("account_for_embedding_in_pipeline_split") is True,
        account_loss=cmd.v("account_for_loss_in_pipeline_split") is True,
        layout_string=str(layout_string) if layout_string else None)


def _stage_blocks(fv: FlagValues) -> tuple[int, ...] | None:
    """Yuan 2.0's `--pipeline-model-parallel-method block --pipeline-model-parallel-blocks 2,3,...`."""
    cmd = fv.cmd
    if "pipeline_model_parallel_method" not in cmd.table.by_dest or cmd.v("pipeline_model_parallel_method") != "block":
        return None
    written = str(cmd.v("pipeline_model_parallel_blocks") or "")
    try:
        return tuple(int(part) for part in written.split(",") if part.strip())
    except ValueError:
        return ()  # not numbers: the split refuses it


def _ds_pipe(fv: FlagValues, pp: int | None) -> tuple[str, bool, bool] | None:
    """Megatron-DeepSpeed with --deepspeed and pipeline stages builds GPTModelPipe (pretrain_gpt.py model_provider,
    unless --no-pipeline-parallel): DeepSpeed partitions it (guard/job/deepspeed_pipe.py)."""
    cmd = fv.cmd
    if cmd.flavour != "megatron-deepspeed" or cmd.v("deepspeed") is not True or fv.on("no_pipeline_parallel") \
            or (pp or 1) < 2:
        return None
    bigscience = "bigscience" in str(cmd.table.source.get("repo", "")).lower()
    written = cmd.v("pp_partition_method") if "pp_partition_method" in cmd.table.by_dest else None
    method = str(written) if written else "type:transformer"
    if not (method.lower() == "uniform" or method.lower().startswith("type:")):
        fv.job.add_unmodelled(f"DeepSpeed partition_method {method!r} (its layers priced as 'type:transformer' "
                              "splits them)", "--pp-partition-method", fv.origin("pp_partition_method"))
        method = "type:transformer"
    # BigScience's GPTModelPipe always ties the head to the embedding; Microsoft's unties it on request
    tied = bigscience or cmd.v("untie_embeddings_and_output_weights") is not True
    return method, bigscience, tied


def _model(fv: FlagValues, base: Architecture | None, vocab: int | None) -> None:
    job, cmd = fv.job, fv.cmd
    arch, unknown_vocab = architecture(fv, base, vocab)
    job.arch = arch  # kept even when it cannot be priced: the rules judge its shape
    for value, what in ((arch.num_layers, "--num-layers"), (arch.hidden, "--hidden-size"),
                        (arch.heads, "--num-attention-heads"), (arch.ffn_hidden, "--ffn-hidden-size"),
                        (arch.kv_channels, "--kv-channels"), (arch.query_groups, "--num-query-groups")):
        if value is None or value < 1:
            raise IncompleteJob(f"{cmd.path}: {what} must be a positive integer, got {value} (see guard check)")
    if arch.heads % arch.query_groups:
        raise IncompleteJob(f"{cmd.path}: --num-attention-heads {arch.heads} is not a multiple of "
                            f"--num-query-groups {arch.query_groups} (see guard check)")
    divisible = fv.int("make_vocab_size_divisible_by") or 128
    job.vocab_divisible_by = divisible
    if (fixed := _fixed_vocab(fv, arch.vocab if not unknown_vocab else None, divisible)) is not None:
        if unknown_vocab:  # the fork refuses a tokenizer larger than the fixed size, so the rows are known
            job.arch = arch = replace(arch, vocab=fixed)
            why = unknown_vocab.split(": ", 1)[-1].split("; give guard")[0]  # the reason, without path or remedy
            job.notes.append(f"vocabulary: the tokenizer's size is unknown ({why}); the embedding and output layer "
                             f"have --pad-vocab-size-to {fixed} rows")
        job.padded_vocab = fixed
    elif unknown_vocab:
        raise IncompleteJob(unknown_vocab)
    else:
        # the tokenizer's size already counts the EOD a NullTokenizer adds, where that Megatron adds one
        job.padded_vocab = derived.padded_vocab_size(arch.vocab, divisible, job.layout.tp or 1)
    for feature in base.unmodelled if base else ():
        job.add_unmodelled(feature, base.source or "--model / --hf-config")


def _fixed_vocab(fv: FlagValues, tokenizer: int | None, divisible: int) -> int | None:
    """BigScience's --pad-vocab-size-to: the padded size itself (megatron/tokenizer/tokenizer.py
    _vocab_size_with_padding), which the fork refuses below the tokenizer's size or off
    --make-vocab-size-divisible-by."""
    fixed = fv.int("pad_vocab_size_to", None, field="padded_vocab")
    if fixed is None:
        return None
    option = fv.cmd.option("pad_vocab_size_to")
    if tokenizer is not None and fixed < tokenizer:
        raise IncompleteJob(f"{fv.cmd.path}: {option} {fixed} is below the tokenizer's {tokenizer} tokens "
                            "(the fork raises ValueError at start)")
    if fixed % divisible:
        raise IncompleteJob(f"{fv.cmd.path}: {option} {fixed} is not a multiple of --make-vocab-size-divisible-by "
                            f"{divisible} (the fork raises ValueError at start)")
    return fixed


def _sequence(fv: FlagValues) -> None:
    cmd = fv.cmd
    multimodal = cmd.given("decoder_seq_length") and ("multimodal" in (cmd.program or "") or
                                                      cmd.given("vision_model_type"))
    # examples/multimodal/train.py: the language model runs --decoder-seq-length; --seq-length is the vision
    # encoder's (its image tokens), which guard does not price
    seq = fv.int("decoder_seq_length" if multimodal else "seq_length", None, field="seq_length")
    if not seq or seq < 1:
        raise IncompleteJob(f"{cmd.path}: --seq-length is not set: give it in the command or with --seq-length")
    fv.job.seq_length = seq
    if multimodal:  # the vision encoder itself is named unmodelled where the program is read (accounting.py)
        fv.job.notes.append(f"the language model is priced at --decoder-seq-length {seq}; --seq-length "
                            f"{cmd.v('seq_length')} is the vision encoder's")
    elif cmd.given("decoder_seq_length"):
        fv.job.add_unmodelled("decoder sequence length of encoder-decoder models (activations)",
                              "--decoder-seq-length", fv.origin("decoder_seq_length"))


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
        lay = job.layout
        unknown = [f"{cmd.option(dest)} (line {cmd.flag_span(dest).line})"
                   for field, dest in (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"),
                                       ("cp", "context_parallel_size"), ("ulysses", "ds_sequence_parallel_size"))
                   if getattr(lay, field) is None and dest in cmd.table.by_dest and cmd.given(dest)]
        why = f"{', '.join(unknown)} {'are' if len(unknown) > 1 else 'is'} not known statically" if unknown else \
            f"TP x PP x CP = {lay.model_parallel} does not divide the world of {lay.world}"
        raise IncompleteJob(f"{cmd.path}: the data-parallel size is unknown ({why}), so are the microbatches: give "
                            "them literally")
    job.global_batch = gbs or job.micro_batch * dp  # validate_args' default
    if job.global_batch % (job.micro_batch * dp):
        raise IncompleteJob(f"{cmd.path}: --global-batch-size {job.global_batch} is not divisible by micro batch "
                            f"x DP = {job.micro_batch} x {dp}")
    job.num_microbatches = job.global_batch // (job.micro_batch * dp)


def _stages(fv: FlagValues) -> None:
    """The one split (guard/job/stages.py); its refusal is kept for the rules (MLM106-108) and the estimate."""
    from dataclasses import replace

    job, cmd = fv.job, fv.cmd
    if job.arch is None:
        return
    given = [f for f in VIRTUAL_OPTIONS if LAYOUT_FLAGS[f] in cmd.table.by_dest and cmd.given(LAYOUT_FLAGS[f])]
    try:
        if len(given) > 1:
            raise LayoutError("no more than one of " + ", ".join(cmd.option(LAYOUT_FLAGS[f]) for f in given) +
                              " can be set", "virtual", given[1], at_value=False)
        job.chunks = job.layout.split(job.arch.num_layers)
    except LayoutError as err:
        job.stage_problem = err
        raise IncompleteJob(f"{cmd.path}: {err}") from None
    job.layout = replace(job.layout, vpp=len(job.chunks[0]))  # derived from a layout string or layers per stage

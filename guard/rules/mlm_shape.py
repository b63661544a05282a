"""MLM102-MLM108, MLM112, MLM114: the model's shape against the parallel degrees: heads, query groups, layers per
stage, MoE layers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.job.architecture import MOE_PATTERN
from guard.rules.registry import check, rule

if TYPE_CHECKING:  # annotations only: a DeepSpeed-only check never imports the Megatron context
    from guard.rules.megatron_context import MegatronCheck

HEADS_TP = rule(
    "MLM102", "heads-not-divisible-by-tp", "error",
    "The number of attention heads is not a multiple of the tensor-parallel size.",
    what="Checks `--num-attention-heads % --tensor-model-parallel-size == 0`.",
    why="megatron-core's TransformerConfig raises `ValueError: num_attention_heads (12) must be a "
        "multiple of tensor_model_parallel_size (8).` Each TP rank owns whole heads.",
    example="--num-attention-heads 12 --tensor-model-parallel-size 8",
    use_instead="--num-attention-heads 16 --tensor-model-parallel-size 8",
    references=("megatron/core/transformer/transformer_config.py: TransformerConfig.__post_init__",),
)

GROUPS_TP = rule(
    "MLM103", "query-groups-vs-tp", "error",
    "The number of query groups is neither a multiple nor a divisor of the tensor-parallel size.",
    what="With grouped-query attention, checks that `--num-query-groups` is a multiple or a "
         "divisor of TP (megatron-core 0.16 replicates KV heads when groups < TP).",
    why="TransformerConfig raises `ValueError: num_query_groups (3) must be a multiple or divisor "
        "of tensor_model_parallel_size (4).` (older cores required a multiple).",
    example="--group-query-attention --num-query-groups 3 --tensor-model-parallel-size 4",
    use_instead="--group-query-attention --num-query-groups 4 --tensor-model-parallel-size 4",
    references=("megatron/core/transformer/transformer_config.py",),
)

HEADS_GROUPS = rule(
    "MLM104", "heads-not-divisible-by-groups", "error",
    "The number of attention heads is not a multiple of the number of query groups.",
    what="Checks `--num-attention-heads % --num-query-groups == 0` (or `--num-key-value-heads` on "
         "Megatron-DeepSpeed).",
    why="Grouped-query attention shares each KV head between heads/groups query heads; an uneven "
        "split builds wrong shapes and fails in the attention reshape (megatron-core checks it "
        "from Megatron-LM PR #5756 on).",
    example="--num-attention-heads 32 --group-query-attention --num-query-groups 6",
    use_instead="--num-attention-heads 32 --group-query-attention --num-query-groups 8",
)

HIDDEN_HEADS = rule(
    "MLM105", "hidden-not-divisible-by-heads", "error",
    "Without --kv-channels, the hidden size must be a multiple of the number of heads.",
    what="When `--kv-channels` is not given, checks `--hidden-size % --num-attention-heads == 0`.",
    why="validate_args asserts it (a bare `AssertionError` with no message) to derive "
        "`kv_channels = hidden_size // num_attention_heads`.",
    example="--hidden-size 1000 --num-attention-heads 16",
    use_instead="--hidden-size 1024 --num-attention-heads 16",
    references=("megatron/training/arguments.py: validate_args",),
)

LAYERS_PP = rule(
    "MLM106", "layers-not-divisible-by-pp", "error",
    "The number of layers does not split evenly over the pipeline stages.",
    what="Without uneven-stage flags, a layout string or virtual stages, checks `num_layers "
         "(+1 with --account-for-embedding-in-pipeline-split, +1 with "
         "--account-for-loss-in-pipeline-split) % PP == 0`.",
    why="validate_args stops with `Number of layers should be divisible by the "
        "pipeline-model-parallel size` (ms-swift#5737: GLM-4.5-Air 46 layers on PP4). Older "
        "versions silently dropped the remainder layers instead.",
    example="--num-layers 46 --pipeline-model-parallel-size 4",
    use_instead="--num-layers 46 --pipeline-model-parallel-size 2   # or --decoder-first-pipeline-num-layers 10",
    references=("https://github.com/modelscope/ms-swift/issues/5737",),
)

VIRTUAL = rule(
    "MLM107", "virtual-pipeline-invalid", "error",
    "The interleaved (virtual pipeline) settings cannot be built.",
    what="Checks the virtual-pipeline options: at most one of `--num-layers-per-virtual-pipeline-"
         "stage`, `--num-virtual-stages-per-pipeline-rank`, `--pipeline-model-parallel-layout`; "
         "PP > 1 (PP > 2 with `--no-overlap-p2p-communication`); layers per stage divisible by "
         "layers per virtual stage; no uneven-stage flags with `--num-layers-per-virtual-pipeline-stage`.",
    why="validate_args and initialize_model_parallel refuse them: 'pipeline-model-parallel size "
        "should be greater than 1 with interleaved schedule', 'number of layers per pipeline stage "
        "must be divisible number of layers per virtual pipeline stage'.",
    example="--num-layers 24 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 4",
    use_instead="--num-layers 24 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 3",
)

UNEVEN = rule(
    "MLM108", "uneven-pipeline-invalid", "error",
    "--decoder-first/last-pipeline-num-layers do not add up to a buildable split.",
    what="Checks the uneven first/last stage flags: PP > 1, counts > 0, the remaining layers "
         "divisible by the middle stages (and none left without stages), not combined with the "
         "account-for-embedding/loss flags.",
    why="TransformerConfig raises `Mismatch: 4 middle layers remaining but 0 middle PP stages "
        "available` and similar; with PP = 1, `--decoder-last-pipeline-num-layers k` silently "
        "builds a k-layer model (Megatron-LM#1778).",
    example="--num-layers 30 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6",
    use_instead="--num-layers 30 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 "
                "--decoder-last-pipeline-num-layers 6",
    references=("https://github.com/NVIDIA/Megatron-LM/issues/1778",),
)

GROUPS_IGNORED = rule(
    "MLM112", "query-groups-ignored", "warning",
    "--num-query-groups without --group-query-attention is ignored: the model uses full multi-head attention.",
    what="Reports `--num-query-groups N` given without `--group-query-attention` (Megatron-LM).",
    why="core_transformer_config_from_args passes num_query_groups only with "
        "--group-query-attention; otherwise every head gets its own KV head: a different model, "
        "more parameters and KV memory (Megatron-LM#818: Llama-3-8B OOM at seq 8192).",
    example="--num-attention-heads 32 --num-query-groups 8",
    use_instead="--num-attention-heads 32 --group-query-attention --num-query-groups 8",
    references=("https://github.com/NVIDIA/Megatron-LM/issues/818",),
)


@check(HEADS_TP, GROUPS_TP, HEADS_GROUPS, HIDDEN_HEADS, GROUPS_IGNORED, target="megatron")
def attention_shape(s: MegatronCheck) -> None:
    cmd, arch, tp = s.cmd, s.job.arch, s.job.layout.tp
    if arch is None:
        return
    heads, hidden, groups = arch.heads, arch.hidden, arch.query_groups
    if heads and tp and heads % tp:
        s.report(HEADS_TP, "num_attention_heads", f"num_attention_heads ({heads}) must be a multiple of "
                 f"tensor_model_parallel_size ({tp})", at_value=True,
                 related=[cmd.related("tensor_model_parallel_size", f"tp={tp}")])
    mds = cmd.flavour == "megatron-deepspeed"
    gqa_dest = "num_key_value_heads" if mds else "num_query_groups"
    if groups != heads and groups and tp and not mds and groups % tp and tp % groups:
        s.report(GROUPS_TP, gqa_dest, f"num_query_groups ({groups}) must be a multiple or divisor of "
                 f"tensor_model_parallel_size ({tp})", at_value=True)
    if groups and heads and heads % groups:
        s.report(HEADS_GROUPS, gqa_dest, f"num_attention_heads ({heads}) is not a multiple of the "
                 f"number of query groups ({groups})", at_value=True)
    if hidden and heads and not cmd.given("kv_channels") and cmd.known("kv_channels") and hidden % heads:
        s.report(HIDDEN_HEADS, "hidden_size", f"hidden_size ({hidden}) is not a multiple of "
                 f"num_attention_heads ({heads}), and --kv-channels is not given",
                 at_value=True, help="give --kv-channels, or a hidden size divisible by the heads")
    written = cmd.written("num_query_groups")
    if not mds and written and groups == heads and not cmd.given("group_query_attention") and \
            cmd.known("group_query_attention"):
        s.report(GROUPS_IGNORED, "num_query_groups", f"--num-query-groups {written} is ignored without "
                 "--group-query-attention: every head gets its own KV head", help="add --group-query-attention")


# where a split problem is reported: the flag of the layout field that decides it
SPLIT_FLAGS = {"arch.num_layers": "num_layers", "layout.pp": "pipeline_model_parallel_size",
               "layout.vpp": "num_virtual_stages_per_pipeline_rank",
               "layout.virtual_layers": "num_layers_per_virtual_pipeline_stage",
               "layout.layout_string": "pipeline_model_parallel_layout",
               "layout.first_stage_layers": "decoder_first_pipeline_num_layers",
               "layout.last_stage_layers": "decoder_last_pipeline_num_layers",
               "layout.stage_blocks": "pipeline_model_parallel_blocks"}
SPLIT_RULES = {"even": LAYERS_PP, "virtual": VIRTUAL, "uneven": UNEVEN}


@check(LAYERS_PP, VIRTUAL, UNEVEN, target="megatron")
def pipeline_layout(s: MegatronCheck) -> None:
    """The job's one split (guard/job/stages.py) refused: what megatron-core says, at the flag that decides it."""
    problem, cmd = s.job.stage_problem, s.cmd
    if problem is None or cmd.given("hybrid_layer_pattern") or cmd.given("hybrid_override_pattern"):
        return  # hybrid patterns assign layers themselves
    dest = SPLIT_FLAGS.get(problem.field, "num_layers")
    related = [cmd.related("pipeline_model_parallel_size", f"pp={s.job.layout.pp}")] if problem.kind == "even" \
        and cmd.given("pipeline_model_parallel_size") and dest == "num_layers" else None
    help = "use a pipeline size that divides the layers, or --decoder-first/last-pipeline-num-layers" \
        if problem.kind == "even" else None
    s.report(SPLIT_RULES[problem.kind], dest, str(problem), at_value=problem.at_value and cmd.given(dest),
             related=related, help=help)


MOE_LAYERS = rule(
    "MLM114", "moe-layer-freq-length", "error",
    "A --moe-layer-freq list does not give one entry per layer.",
    what="Checks that a list `--moe-layer-freq` (such as `[0]*3+[1]*29`) has `--num-layers` entries.",
    why="megatron-core's get_gpt_decoder_block_layer_specs asserts `Invalid length of moe_layer_pattern: 4, "
        "expected 2` while it builds the model; nothing says which layers were meant to be MoE.",
    example="--num-layers 2 --num-experts 4 --moe-layer-freq [1]*4",
    use_instead="--num-layers 4 --num-experts 4 --moe-layer-freq [1]*4",
    references=("megatron/core/models/gpt/gpt_layer_specs.py: get_gpt_decoder_block_layer_specs",),
)


@check(MOE_LAYERS, target="megatron")
def moe_layers(s: MegatronCheck) -> None:
    """The job could not lay its MoE layers out (guard/job/megatron_model.py): megatron-core's assertion."""
    problem = s.job.missing.get(MOE_PATTERN)
    if problem:
        s.report(MOE_LAYERS, "moe_layer_freq", problem.split(": ", 1)[-1], at_value=True)

"""Every vendored Megatron flag and DeepSpeed schema key has a memory class (issue 11, item 4), and no stale ones."""

from __future__ import annotations

import json

import pytest

from guard import resources
from guard.deepspeed_schema import SchemaIndex
from guard.job import coverage

MEGATRON_TABLES = ("core_v0.16.1", "main-d98e8a6", "megatron-deepspeed-f4157be", "bigscience-megatron-deepspeed-8387ae1",
                   "bigcode-megatron-lm-7c325cd")
DEEPSPEED_VERSION = "0.19.8"
CLASSES = {"read", "no-memory-effect", "unmodelled"}

# Issue 11's list of the Megatron dests guard's job reader reads. Megatron-DeepSpeed's expert-parallel degree
# is --moe-expert-parallel-size (there is no --ep-size); --freeze-LM / --freeze-ViT are dests freeze_LM / freeze_ViT.
ISSUE_MEGATRON_READ = set("""
num_layers hidden_size num_attention_heads num_query_groups group_query_attention num_key_value_heads kv_channels
ffn_hidden_size swiglu normalization untie_embeddings_and_output_weights position_embedding_type
use_rotary_position_embeddings seq_length max_position_embeddings add_bias_linear add_qkv_bias qk_layernorm
num_experts moe_ffn_hidden_size moe_router_topk moe_shared_expert_intermediate_size moe_layer_freq hidden_dropout
attention_dropout vocab_size tokenizer_type vocab_file merge_file tokenizer_model make_vocab_size_divisible_by
tensor_model_parallel_size pipeline_model_parallel_size context_parallel_size expert_model_parallel_size
expert_tensor_parallel_size sequence_parallel ds_sequence_parallel_size num_layers_per_virtual_pipeline_stage
num_virtual_stages_per_pipeline_rank microbatch_group_size_per_vp_stage decoder_first_pipeline_num_layers
decoder_last_pipeline_num_layers account_for_embedding_in_pipeline_split account_for_loss_in_pipeline_split
pipeline_model_parallel_layout micro_batch_size global_batch_size bf16 fp16 accumulate_allreduce_grads_in_fp32
use_distributed_optimizer optimizer sgd_momentum use_precision_aware_optimizer main_params_dtype main_grads_dtype
exp_avg_dtype exp_avg_sq_dtype overlap_param_gather recompute_granularity recompute_method recompute_num_layers
recompute_modules distribute_saved_activations checkpoint_activations checkpoint_num_layers
deepspeed_activation_checkpointing transformer_impl attention_backend use_flash_attn use_flash_attn_v2
use_flash_attn_triton cross_entropy_loss_fusion deepspeed deepspeed_config zero_stage no_pipeline_parallel mlp_type
moe_expert_parallel_size freeze_LM freeze_ViT
""".split())
# Dests the reader reads beyond that list (a reader that reads a flag prices it, so "unmodelled" would be wrong):
# guard/job/megatron_model.py (DeepSpeed MoE: --topk, --expert-interval), guard/job/from_megatron.py
# (--enable-expert-tensor-parallelism), guard/job/megatron_program.py (the other multimodal freezing flags),
# guard/job/megatron_training.py (the other flash-attention spellings, --grad-reduce-in-bf16,
# --recompute-activations).
EXTRA_MEGATRON_READ = {"topk", "expert_interval", "enable_expert_tensor_parallelism", "freeze_sound_model",
                       "freeze_sound_projection", "freeze_vision_projection", "use_flash_attn_v1",
                       "use_flash_attn_builder", "grad_reduce_in_bf16", "recompute_activations",
                       # issue 16: Megatron FSDP, optimizer instances, grouped-GEMM workspaces, offloading
                       "use_megatron_fsdp", "data_parallel_sharding_strategy", "num_distributed_optimizer_instances",
                       "moe_grouped_gemm", "fine_grained_activation_offloading", "offload_modules",
                       "mtp_num_layers", "apply_query_key_layer_scaling", "attention_softmax_in_fp32",
                       "masked_softmax_fusion",
                       # issue 26: DeepSpeed partitions Megatron-DeepSpeed's pipeline model (BigScience's method)
                       "pp_partition_method", "attention_head_type",
                       # the multimodal language model's sequence (an encoder-decoder's is named unmodelled)
                       "decoder_seq_length",
                       # BigScience's fixed padded vocabulary and its Hub tokenizer
                       "pad_vocab_size_to", "tokenizer_name_or_path",
                       # issue 30: the loss's fusion impl, the deferred embedding weight gradients
                       "cross_entropy_fusion_impl", "defer_embedding_wgrad_compute", "wgrad_deferral_limit",
                       "export_kd_teacher_load", "export_kd_teacher_model_config",
                       # issue 30: capacity-factor routing
                       "moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity",
                       # issue 30: torch FSDP2
                       "use_torch_fsdp2",
                       # issue 30: CUDA graphs (guard/job/cuda_graphs.py)
                       "cuda_graph_impl", "cuda_graph_modules", "cuda_graph_scope", "cuda_graph_scope_deprecated",
                       "enable_cuda_graph", "external_cuda_graph", "cuda_graph_warmup_steps",
                       # issue 30: Megatron FSDP's prefetch window
                       "fsdp_double_buffer", "suggested_communication_unit_size"}

# Issue 11's DeepSpeed read list, limited to what the schema (or a free-form section such as optimizer.params) has,
# and zero_optimization.elastic_checkpoint, which guard/job/from_deepspeed.py reads into the job's ZeRO path keys.
DEEPSPEED_READ = set("""
train_batch_size train_micro_batch_size_per_gpu gradient_accumulation_steps fp16.enabled bf16.enabled
bfloat16.enabled zero_optimization.stage zero_optimization.offload_optimizer.device
zero_optimization.offload_param.device zero_optimization.cpu_offload zero_optimization.reduce_bucket_size
zero_optimization.allgather_bucket_size zero_optimization.stage3_prefetch_bucket_size
zero_optimization.stage3_max_live_parameters zero_optimization.stage3_param_persistence_threshold
zero_optimization.sub_group_size zero_optimization.contiguous_gradients zero_optimization.overlap_comm
zero_optimization.reduce_scatter zero_optimization.allgather_partitions zero_optimization.round_robin_gradients
zero_optimization.use_multi_rank_bucket_allreduce optimizer.type optimizer.params.torch_adam
optimizer.params.momentum activation_checkpointing.partition_activations activation_checkpointing.cpu_checkpointing
data_types.grad_accum_dtype tensor_parallel.autotp_size zero_optimization.elastic_checkpoint sequence_parallel_size
""".split())


def _raw(name: str) -> dict:
    with open(resources.schemas_dir() / "coverage" / name, encoding="utf-8") as handle:
        return json.load(handle)


def _megatron_dests() -> dict[str, str]:
    """Every dest of every vendored table and entry point, with the first table that has it."""
    dests: dict[str, str] = {}
    for table in MEGATRON_TABLES:
        data = resources.load_json("megatron", table, "args.json")
        flags = list(data["flags"])
        for entrypoint in data["entrypoints"].values():
            flags += entrypoint["flags"]
        for flag in flags:
            dests.setdefault(flag["dest"], f"{table} {flag['option_strings']}")
    return dests


def _schema() -> SchemaIndex:
    return SchemaIndex(resources.load_json("deepspeed", DEEPSPEED_VERSION, "config.schema.json"))


def _leaves(index: SchemaIndex, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every property path of the schema that has no properties of its own."""
    properties = (index.node(path) or {}).get("properties", {})
    if path and not properties:
        return [path]
    return [leaf for key in properties for leaf in _leaves(index, path + (key,))]


def _removed(index: SchemaIndex) -> set[tuple[str, ...]]:
    return {tuple(pointer.strip("/").split("/")) for pointer in index.removed_keys()}


def _free_form_above(index: SchemaIndex, path: tuple[str, ...]) -> bool:
    """True when the nearest schema node above `path` takes any key (DeepSpeed passes it on, e.g. optimizer.params)."""
    for end in range(len(path) - 1, 0, -1):
        node = index.node(path[:end])
        if node is not None:
            return index.unknown_policy(path[:end]) is None
    return False


def test_every_megatron_flag_has_a_class():
    missing = sorted(f"{dest} ({where})" for dest, where in _megatron_dests().items()
                     if coverage.megatron_class(dest) is None)
    assert not missing, f"{len(missing)} flags have no memory class in schemas/coverage/megatron.json:\n" + \
        "\n".join(missing)


def test_no_stale_megatron_entry():
    known = _megatron_dests()
    stale = sorted(row["dest"] for row in _raw("megatron.json")["flags"] if row["dest"] not in known)
    assert not stale, f"entries naming dests that are in no vendored table: {stale}"


def test_megatron_entries_are_unique_sorted_and_well_formed():
    rows = _raw("megatron.json")["flags"]
    names = [row["dest"] for row in rows]
    assert names == sorted(set(names)), "megatron.json: dests must be unique and sorted"
    assert {row["class"] for row in rows} <= CLASSES
    assert not [row["dest"] for row in rows if row["class"] == "unmodelled" and not row.get("feature", "").strip()]
    assert not [row["dest"] for row in rows if row["class"] != "unmodelled" and "feature" in row]


def test_megatron_read_class_is_the_issue_list_and_what_the_reader_reads():
    read = {dest for dest, entry in coverage.megatron_entries().items() if entry.effect == coverage.READ}
    assert read == ISSUE_MEGATRON_READ | EXTRA_MEGATRON_READ
    assert ISSUE_MEGATRON_READ <= set(_megatron_dests())  # every listed dest is in a vendored table


def test_every_deepspeed_key_has_a_class():
    index = _schema()
    leaves = _leaves(index)
    assert len(leaves) > 250  # the walk really reached the leaves of 0.19.8's schema
    missing = sorted(".".join(leaf) for leaf in leaves if coverage.deepspeed_class(leaf) is None)
    assert not missing, f"{len(missing)} schema keys have no memory class in schemas/coverage/deepspeed.json:\n" + \
        "\n".join(missing)


def test_no_stale_deepspeed_entry():
    index = _schema()
    removed = _removed(index)
    stale = []
    for row in _raw("deepspeed.json")["keys"]:
        path = tuple(row["key"].split("."))
        node = index.node(path)
        if path in removed or _free_form_above(index, path):
            continue
        if node is None:
            stale.append(f"{row['key']}: not in the schema")
        elif node.get("properties") and not row.get("children"):
            stale.append(f"{row['key']}: a section; without \"children\": true the entry covers nothing")
    assert not stale, "\n".join(stale)


def test_deepspeed_entries_are_unique_sorted_and_well_formed():
    rows = _raw("deepspeed.json")["keys"]
    keys = [row["key"] for row in rows]
    assert keys == sorted(set(keys)), "deepspeed.json: keys must be unique and sorted"
    assert {row["class"] for row in rows} <= CLASSES
    assert not [row["key"] for row in rows if row["class"] == "unmodelled" and not row.get("feature", "").strip()]
    read = {key for key, entry in coverage.deepspeed_entries().items() if entry.effect == coverage.READ}
    assert {".".join(key) for key in read} == DEEPSPEED_READ


def test_the_most_specific_deepspeed_entry_wins():
    lr = coverage.deepspeed_class(("optimizer", "params", "lr"))  # under the free-form optimizer.params section
    assert (lr.name, lr.effect, lr.children) == ("optimizer.params", "no-memory-effect", True)
    assert coverage.deepspeed_class(("optimizer", "params", "momentum")).effect == "read"
    assert coverage.deepspeed_class(("compile", "debug_log")).effect == "no-memory-effect"
    assert coverage.deepspeed_class(("compile", "deepcompile")).name == "compile"
    assert coverage.deepspeed_class(("compile", "deepcompile")).effect == "unmodelled"


@pytest.mark.parametrize("lookup", [lambda: coverage.megatron_class("my_fork_only_flag"),
                                    lambda: coverage.deepspeed_class(("zero_optimization", "my_fork_only_key")),
                                    lambda: coverage.deepspeed_class(("my_fork_section", "enabled"))])
def test_a_flag_or_key_guard_does_not_know_has_no_class(lookup):
    assert lookup() is None  # the caller reports "unknown effect on memory", never drops it


def test_examples_from_the_issue():
    fp8 = coverage.megatron_class("fp8")
    assert (fp8.effect, fp8.feature) == ("unmodelled", "FP8 training (weight transpose caches, amax histories)")
    assert coverage.megatron_class("log_interval").effect == "no-memory-effect"
    assert coverage.megatron_class("moe_expert_parallel_size").effect == "read"  # Megatron-DeepSpeed's EP degree
    assert coverage.deepspeed_class(("flops_profiler", "enabled")).effect == "no-memory-effect"
    assert coverage.deepspeed_class(("zero_optimization", "offload_optimizer", "device")).effect == "read"

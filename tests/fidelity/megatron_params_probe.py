"""Count each rank's parameters of real megatron-core GPT models on the meta device, by bucket, many cases per launch.

Run as: python tests/fidelity/megatron_params_probe.py CASES.json OUT.json. CASES.json maps a name to a case
dict (keys below, in `_config`); cases of one world size share one launch of that many gloo processes, forked
from a parent that has already imported megatron-core (the import is most of the time). OUT.json maps each name
to one record per global rank: its coordinates (tp, pp, dp, ep, expert-tp ranks; the vpp size) and its
parameter counts per bucket, summed over its model chunks (one GPTModel per virtual stage).

Buckets come from megatron-core's own module names and parameter attributes, not from guard:

  embedding      embedding.word_embeddings, embedding.position_embeddings (first stage)
  head           output_layer (own or the tied copy on the last stage) and decoder.final_layernorm: what the
                 loss stage adds besides its layers. The final norm is here, not in tp_replicated, so that
                 a stage-edge mistake shows apart from a per-layer one.
  expert         routed experts (mlp.experts.*); megatron marks them allreduce=False when EP > 1
  tp_sharded     every other parameter with tensor_model_parallel=True (column/row-parallel weights,
                 column-parallel biases, shared experts)
  tp_replicated  the rest: layer norms, q/k norms, row-parallel biases, the MoE router

The vocabulary is padded as Megatron-LM's training loop pads it before building the model
(megatron/training/tokenizer/tokenizer.py `_vocab_size_with_padding`: round up to a multiple of
make_vocab_size_divisible_by x TP); megatron.training is not in the megatron-core wheel, so that rule lives here.

CPU patches, none of which changes a parameter's shape: `torch.cuda.current_device` answers "cpu" (asked
while building); `Tensor.cuda` is the identity and `dist.all_reduce` a no-op while building (the last stage's
tied copy of the word embeddings is moved to CUDA and all-reduced with the first stage; only shapes matter).
The local layer spec's torch norms refuse sequence parallelism, so it is off (it changes no parameter count).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the checkout's root
from tests.fidelity.launch import run_by_world  # noqa: E402

BUCKETS = ("embedding", "head", "expert", "tp_sharded", "tp_replicated")


def padded_vocab(vocab: int, tp: int, divisible: int = 128) -> int:
    multiple = divisible * tp
    return -(-vocab // multiple) * multiple


def bucket_of(name: str, param) -> str:
    if name.startswith("embedding."):
        return "embedding"
    if name.startswith("output_layer.") or name.startswith("decoder.final_layernorm."):
        return "head"
    if ".mlp.experts." in name:
        return "expert"
    if getattr(param, "tensor_model_parallel", False):
        return "tp_sharded"
    return "tp_replicated"


def _config(case: dict):
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer import TransformerConfig

    gated = case.get("swiglu", False)
    return TransformerConfig(
        num_layers=case["layers"], hidden_size=case["hidden"], num_attention_heads=case["heads"],
        num_query_groups=case.get("groups"), ffn_hidden_size=case["ffn"], kv_channels=case.get("kv_channels"),
        tensor_model_parallel_size=case["tp"], pipeline_model_parallel_size=case["pp"],
        virtual_pipeline_model_parallel_size=case.get("vpp"),
        pipeline_dtype=torch.bfloat16 if case["pp"] > 1 else None, use_cpu_initialization=True,
        normalization=case.get("norm", "LayerNorm"), gated_linear_unit=gated,
        activation_func=F.silu if gated else F.gelu, add_bias_linear=case.get("bias", True),
        add_qkv_bias=case.get("qkv_bias", False), qk_layernorm=case.get("qk_norm", False),
        num_moe_experts=case.get("experts"), moe_router_topk=case.get("topk", 2),
        moe_ffn_hidden_size=case.get("moe_ffn"), moe_layer_freq=case.get("moe_freq", 1),
        moe_shared_expert_intermediate_size=case.get("shared_ffn"),
        expert_model_parallel_size=case.get("ep", 1), expert_tensor_parallel_size=case.get("etp"),
        num_layers_in_first_pipeline_stage=case.get("first"), num_layers_in_last_pipeline_stage=case.get("last"),
        mtp_num_layers=case.get("mtp"),
    )


def _spec(case: dict, config, vp_stage):
    """The layer spec Megatron-LM's gpt_builders picks for the local implementation."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_layer_local_spec

    if case.get("experts"):  # MoE: a block spec, which places dense and MoE layers by --moe-layer-freq
        return get_gpt_decoder_block_spec(config, use_transformer_engine=False,
                                          normalization=case.get("norm", "LayerNorm"), vp_stage=vp_stage)
    return get_gpt_layer_local_spec(qk_layernorm=case.get("qk_norm", False),
                                    normalization=case.get("norm", "LayerNorm"))


def _measure(case: dict) -> dict:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec

    config = _config(case)
    vpp = case.get("vpp")
    counts = dict.fromkeys(BUCKETS, 0)
    chunks = []
    all_reduce, to_cuda = dist.all_reduce, torch.Tensor.cuda
    dist.all_reduce, torch.Tensor.cuda = (lambda *a, **k: None), (lambda self, *a, **k: self)
    try:
        for stage in range(vpp or 1):
            vp_stage = stage if vpp else None
            pre = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage)
            post = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
            spec = _spec(case, config, vp_stage)
            # megatron-core's default places the MTP block on the last stage (pretrain_gpt's mtp_block_spec)
            mtp = get_gpt_mtp_block_spec(config, spec, use_transformer_engine=False, vp_stage=vp_stage) \
                if case.get("mtp") and post else None
            with torch.device("meta"):
                model = GPTModel(config, spec, mtp_block_spec=mtp,
                                 vocab_size=padded_vocab(case["vocab"], case["tp"]),
                                 max_sequence_length=case["max_pos"], pre_process=pre, post_process=post,
                                 share_embeddings_and_output_weights=not case.get("untied", False),
                                 position_embedding_type=case.get("position", "learned_absolute"), vp_stage=vp_stage)
            layers = 0
            for name, param in model.named_parameters():
                bucket = bucket_of(name, param)
                if bucket == "expert" and case.get("ep", 1) > 1:
                    assert param.allreduce is False, name  # megatron's own mark agrees with the name
                counts[bucket] += param.numel()
                layers += name.endswith("input_layernorm.weight") and not name.startswith("mtp.")
            chunks.append({"pre_process": pre, "post_process": post, "layers": layers})
    finally:
        dist.all_reduce, torch.Tensor.cuda = all_reduce, to_cuda
    return {"rank": dist.get_rank(), "tp_rank": ps.get_tensor_model_parallel_rank(),
            "pp_rank": ps.get_pipeline_model_parallel_rank(), "dp_rank": ps.get_data_parallel_rank(),
            "ep_rank": ps.get_expert_model_parallel_rank(), "etp_rank": ps.get_expert_tensor_parallel_rank(),
            "vpp": vpp or 1, "chunks": chunks, "counts": counts, "total": sum(counts.values())}


def _worker(rank: int, world: int, init_method: str, cases: dict, out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    torch.set_num_threads(1)
    torch.cuda.current_device = lambda: "cpu"
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
    results = {}
    for name, case in cases.items():
        ps.initialize_model_parallel(case["tp"], case["pp"], virtual_pipeline_model_parallel_size=case.get("vpp"),
                                     expert_model_parallel_size=case.get("ep", 1),
                                     expert_tensor_parallel_size=case.get("etp"), create_gloo_process_groups=False)
        results[name] = _measure(case)
        ps.destroy_model_parallel()
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as handle:
        json.dump(results, handle)
    dist.destroy_process_group()


def run(cases: dict) -> dict[str, list[dict]]:
    """Every case, one launch per world size; name -> per-rank records in rank order."""
    return run_by_world(_worker, cases, lambda case: case["world"])


if __name__ == "__main__":
    with open(sys.argv[1]) as source:
        measured = run(json.load(source))
    with open(sys.argv[2], "w") as sink:
        json.dump(measured, sink, indent=1)

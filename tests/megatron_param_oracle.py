"""Count per-rank parameters of real megatron-core GPT models built on the meta device (gloo, one process per rank).

Run as: python tests/megatron_param_oracle.py CASES.json OUT.json  (spawns world-size processes per case).
"""

from __future__ import annotations

import json
import os
import socket
import sys


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, world: int, port: int, case: dict, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.current_device = lambda: "cpu"  # megatron-core asks for the device while building
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # the tied-embedding sync moves the weight to CUDA
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    ps.initialize_model_parallel(case["tp"], case["pp"], expert_model_parallel_size=case.get("ep", 1))
    import torch.nn.functional as F

    gated = case.get("swiglu", False)
    config = TransformerConfig(
        num_layers=case["layers"], hidden_size=case["hidden"], num_attention_heads=case["heads"],
        num_query_groups=case.get("groups"), ffn_hidden_size=case["ffn"], kv_channels=case.get("kv_channels"),
        tensor_model_parallel_size=case["tp"], pipeline_model_parallel_size=case["pp"],
        pipeline_dtype=torch.bfloat16 if case["pp"] > 1 else None, use_cpu_initialization=True,
        normalization=case.get("norm", "LayerNorm"), gated_linear_unit=gated,
        activation_func=F.silu if gated else F.gelu, add_bias_linear=case.get("bias", True),
        add_qkv_bias=case.get("qkv_bias", False), qk_layernorm=case.get("qk_norm", False),
        num_moe_experts=case.get("experts"), moe_router_topk=case.get("topk", 2),
        moe_ffn_hidden_size=case.get("moe_ffn"), expert_model_parallel_size=case.get("ep", 1),
        num_layers_in_first_pipeline_stage=case.get("first"), num_layers_in_last_pipeline_stage=case.get("last"),
    )
    spec = get_gpt_layer_local_spec(num_experts=case.get("experts"), moe_grouped_gemm=False,
                                    qk_layernorm=case.get("qk_norm", False),
                                    normalization=case.get("norm", "LayerNorm"))
    all_reduce = dist.all_reduce
    dist.all_reduce = lambda *args, **kwargs: None  # the tied-embedding sync: values are not needed, only shapes
    with torch.device("meta"):
        model = GPTModel(config, spec, vocab_size=case["vocab"], max_sequence_length=case["max_pos"],
                         pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
                         share_embeddings_and_output_weights=not case.get("untied", False),
                         position_embedding_type=case.get("position", "learned_absolute"))
    dist.all_reduce = all_reduce
    count = sum(p.numel() for p in model.parameters())
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as handle:
        json.dump({"rank": rank, "pp_rank": ps.get_pipeline_model_parallel_rank(), "params": count}, handle)
    dist.destroy_process_group()


def run_case(case: dict, out_dir: str) -> list[dict]:
    import torch.multiprocessing as mp

    world = case["world"]
    mp.spawn(_worker, args=(world, _free_port(), case, out_dir), nprocs=world, join=True)
    return [json.load(open(os.path.join(out_dir, f"{r}.json"))) for r in range(world)]


if __name__ == "__main__":
    import tempfile

    cases = json.load(open(sys.argv[1]))
    results = {}
    for name, case in cases.items():
        with tempfile.TemporaryDirectory() as tmp:
            results[name] = run_case(case, tmp)
    json.dump(results, open(sys.argv[2], "w"), indent=1)

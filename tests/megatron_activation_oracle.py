"""Measure saved-for-backward bytes per transformer layer of a real megatron-core GPT forward on CPU.

python tests/megatron_activation_oracle.py CASES.json OUT.json. One process, TP = 1, gloo; the local
(non-TE) layer spec. Tensors autograd saves are seen with saved_tensors_hooks, attributed to the layer
whose forward is running, counted once per storage, parameters excluded.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys


def measure(case: dict) -> dict:
    import torch
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_layer import TransformerLayer

    gated = case.get("swiglu", False)
    config = TransformerConfig(
        num_layers=case["layers"], hidden_size=case["hidden"], num_attention_heads=case["heads"],
        num_query_groups=case.get("groups"), ffn_hidden_size=case["ffn"], use_cpu_initialization=True,
        normalization=case.get("norm", "LayerNorm"), gated_linear_unit=gated,
        activation_func=F.silu if gated else F.gelu, add_bias_linear=case.get("bias", True),
        hidden_dropout=case.get("dropout", 0.0), attention_dropout=case.get("dropout", 0.0),
        bf16=True, params_dtype=torch.bfloat16, bias_activation_fusion=case.get("fused_act", True),
        bias_dropout_fusion=False,
        masked_softmax_fusion=False, persist_layer_norm=False,
        num_moe_experts=case.get("experts"), moe_router_topk=case.get("topk", 2),
        moe_ffn_hidden_size=case.get("moe_ffn"), moe_token_dispatcher_type="alltoall",
        recompute_granularity=case.get("recompute"),
        recompute_modules=case.get("recompute_modules"),
    )
    spec = get_gpt_layer_local_spec(num_experts=case.get("experts"), moe_grouped_gemm=False,
                                    normalization=case.get("norm", "LayerNorm"))
    model = GPTModel(config, spec, vocab_size=case["vocab"], max_sequence_length=case["seq"],
                     position_embedding_type=case.get("position", "learned_absolute"),
                     share_embeddings_and_output_weights=True).to(torch.bfloat16)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    current: list[int | None] = [None]
    seen: dict[int, tuple[int, int]] = {}  # storage -> (layer, bytes)

    for index, module in enumerate(m for m in model.modules() if isinstance(m, TransformerLayer)):
        module.register_forward_pre_hook(lambda mod, args, i=index: current.__setitem__(0, i))
        module.register_forward_hook(lambda mod, args, out: current.__setitem__(0, None))

    def pack(tensor):
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if current[0] is not None and key not in params and key not in seen:
            seen[key] = (current[0], storage.nbytes())
        return tensor

    s, b = case["seq"], case["batch"]
    tokens = torch.randint(0, case["vocab"], (b, s))
    position = torch.arange(s).unsqueeze(0).expand(b, s)
    mask = torch.triu(torch.ones(1, 1, s, s, dtype=torch.bool), diagonal=1)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(tokens, position, mask)
    per_layer = [0] * case["layers"]
    for layer, nbytes in seen.values():
        per_layer[layer] += nbytes
    return {"per_layer": per_layer}


def main() -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.current_device = lambda: "cpu"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29700")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    ps.initialize_model_parallel(1, 1)
    # dropout runs under the CUDA RNG tracker's fork(): a null context on CPU
    tracker = tensor_parallel.get_cuda_rng_tracker()
    tracker.fork = lambda *a, **k: contextlib.nullcontext()
    torch.manual_seed(0)
    cases = json.load(open(sys.argv[1]))
    json.dump({name: measure(case) for name, case in cases.items()}, open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()

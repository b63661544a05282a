"""Measure what real megatron-core GPT layers save for backward on CPU, layer by layer, many cases per launch.

Run as: python tests/fidelity/megatron_activation_probe.py CASES.json OUT.json [--list]. One process, TP = 1,
gloo, the local (non-TE) layer spec; CASES.json maps a name to a case dict (keys in `_config`). OUT.json maps
each name to a record:

  per_layer   bytes each TransformerLayer keeps for backward after the forward: every tensor autograd saves
              while the layer runs (saved_tensors_hooks), counted once per storage, parameters excluded
              (linear layers save their weights too), sized when the forward has ended (selective
              "layernorm" recompute frees its outputs' storage during the forward), and only while autograd
              still holds it (megatron runs bias-dropout-add under enable_grad inside a no_grad full-recompute
              checkpoint; that graph is dropped when the checkpoint returns)
  shared      storages several layers save (the causal mask, RoPE frequencies): model inputs, not layer terms
  checkpoint  per layer: what full recompute keeps between layers (the inputs CheckpointFunction saves after
              its group ran under no_grad), attributed to the last layer of the group
  recompute   per layer: bytes saved while backward re-runs the layer (full recompute; its working set)
  outside     the embedding, final norm, output layer and loss
  tensors     with --list: (place, shape, dtype, bytes) of every counted storage, for reading, not for tests

CPU patches, none of which changes what a layer saves: `torch.cuda.current_device` answers "cpu"; an
explicit boolean causal mask is passed (the default mask is built on CUDA); the CUDA RNG tracker's fork()
is a null context and the CUDA RNG state getters/setters that recompute calls are no-ops (dropout draws
from the CPU generator); one do-nothing stream stands in for the alltoall dispatcher's CUDA side stream.
Two 0.16.1 bugs without Transformer Engine are worked around: CheckpointWithoutOutput sets
fp8 = (fp8 is not None), always True, and then needs TE (selective "layernorm" recompute); the router's
gating linear reads `te_general_gemm`, undefined without TE.
"""

from __future__ import annotations

import contextlib
import json
import sys
import weakref


def _config(case: dict):
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer import TransformerConfig

    gated = case.get("swiglu", False)
    fp32 = case.get("dtype", "bf16") == "fp32"
    granularity = case.get("recompute")
    return TransformerConfig(
        num_layers=case["layers"], hidden_size=case["hidden"], num_attention_heads=case["heads"],
        num_query_groups=case.get("groups"), ffn_hidden_size=case["ffn"], use_cpu_initialization=True,
        normalization=case.get("norm", "LayerNorm"), gated_linear_unit=gated,
        activation_func=F.silu if gated else F.gelu, add_bias_linear=case.get("bias", True),
        hidden_dropout=case.get("dropout", 0.0), attention_dropout=case.get("dropout", 0.0),
        bf16=not fp32, params_dtype=torch.float32 if fp32 else torch.bfloat16,
        bias_activation_fusion=case.get("fused_act", True), bias_dropout_fusion=False,
        masked_softmax_fusion=False, persist_layer_norm=False,
        num_moe_experts=case.get("experts"), moe_router_topk=case.get("topk", 2),
        moe_ffn_hidden_size=case.get("moe_ffn"),
        moe_token_dispatcher_type=case.get("dispatcher", "alltoall"),
        moe_aux_loss_coeff=case.get("aux_loss", 0.0),
        recompute_granularity=granularity, recompute_modules=case.get("recompute_modules"),
        recompute_method=case.get("recompute_method", "uniform") if granularity == "full" else None,
        recompute_num_layers=case.get("recompute_num_layers", 1) if granularity == "full" else None,
        mtp_num_layers=case.get("mtp"),
    )


class Saved:
    """What the pack hook hands autograd: the tensor in a box, so a weak reference tells when autograd let go."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class Census:
    """Storages autograd saves, attributed to the place in the model where they were saved.

    Places: ("layer", i) while layer i runs; ("between", i) after layer i returned, still inside the decoder
    (full recompute saves its group's inputs there); "before" (embedding), "final_norm", "after" (head, loss).
    A tensor saved inside a region that autograd drops again before the forward ends (megatron runs
    bias-dropout-add under enable_grad inside a no_grad checkpoint) is not counted: only live boxes count.
    """

    def __init__(self, params: set[int]):
        self.params = params
        self.where: list = ["before"]
        self.backward = False
        self.forward: dict[int, tuple[object, list, list]] = {}  # storage -> (first place, boxes, places)
        self.recompute: dict[int, dict[int, int]] = {}  # layer -> storage -> bytes saved while re-running it

    def pack(self, tensor):
        box = Saved(tensor)
        key = tensor.untyped_storage()._cdata
        if key in self.params:
            return box
        place = self.where[0]
        if self.backward:
            if isinstance(place, tuple) and place[0] == "layer":
                self.recompute.setdefault(place[1], {}).setdefault(key, tensor.untyped_storage().nbytes())
            return box
        entry = self.forward.get(key)
        if entry is None or not any(box() is not None for box in entry[1]):  # a new storage at a reused address
            entry = self.forward[key] = (place, [], [])
        entry[1].append(weakref.ref(box))
        entry[2].append(place)
        return box

    def live(self):
        """(first place, places, storage bytes now, a live tensor) of every storage autograd still holds."""
        for place, boxes, places in self.forward.values():
            alive = [box() for box in boxes if box() is not None]
            if alive:
                yield place, places, alive[0].tensor.untyped_storage().nbytes(), alive[0].tensor


def build(case: dict):
    """The case's GPTModel in training mode, in its dtype."""
    import torch
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec, get_gpt_mtp_block_spec

    torch.manual_seed(0)
    norm = case.get("norm", "LayerNorm")
    spec = get_gpt_layer_local_spec(num_experts=case.get("experts"), moe_grouped_gemm=False, normalization=norm)
    config = _config(case)
    mtp = get_gpt_mtp_block_spec(config, spec, use_transformer_engine=False) if case.get("mtp") else None
    model = GPTModel(config, spec, vocab_size=case["vocab"], max_sequence_length=case["seq"],
                     position_embedding_type=case.get("position", "learned_absolute"),
                     share_embeddings_and_output_weights=True, mtp_block_spec=mtp)
    if case.get("dtype", "bf16") == "bf16":
        model = model.to(torch.bfloat16)
    return model.train()


def watch(model, where: list) -> None:
    """Keep where[0] at the place in the model that runs now (see Census)."""
    from megatron.core.transformer.transformer_layer import TransformerLayer

    layers = [m for m in model.decoder.modules() if isinstance(m, TransformerLayer)]  # not the MTP's layers
    for index, module in enumerate(layers):
        module.register_forward_pre_hook(lambda mod, args, i=index: where.__setitem__(0, ("layer", i)))
        module.register_forward_hook(lambda mod, args, out, i=index: where.__setitem__(0, ("between", i)))
    model.decoder.final_layernorm.register_forward_pre_hook(lambda mod, args: where.__setitem__(0, "final_norm"))
    model.decoder.register_forward_hook(lambda mod, args, out: where.__setitem__(0, "after"))
    if getattr(model, "mtp", None) is not None:
        model.mtp.register_forward_pre_hook(lambda mod, args, *rest: where.__setitem__(0, "mtp"), with_kwargs=True)


def tally(census: Census, n: int, listing: bool) -> dict:
    """Sort the live storages by place, after the forward (discarded outputs are 0 bytes by now)."""
    out = {"per_layer": [0] * n, "checkpoint": [0] * n, "shared": 0, "outside": 0, "shared_keys": set(), "total": 0}
    listed = []
    for place, places, nbytes, tensor in census.live():
        out["total"] += nbytes
        if len({p for p in places if isinstance(p, tuple)}) > 1:
            out["shared"] += nbytes
            out["shared_keys"].add(tensor.untyped_storage()._cdata)
            label = "shared"
        elif isinstance(place, tuple) and place[0] == "layer":
            out["per_layer"][place[1]] += nbytes
            label = f"layer {place[1]}"
        elif isinstance(place, tuple):
            out["checkpoint"][place[1]] += nbytes
            label = f"checkpoint {place[1]}"
        else:
            out["outside"] += nbytes
            label = place
        listed.append((label, list(tensor.shape), str(tensor.dtype), nbytes))
    if listing:
        out["tensors"] = listed
    return out


def measure(case: dict, listing: bool) -> dict:
    import torch

    from megatron.core import parallel_state as ps

    from megatron.core.transformer.multi_token_prediction import MTPLossLoggingHelper

    ps.get_global_memory_buffer().buffer.clear()  # each case sizes its own (the buffer only grows)
    MTPLossLoggingHelper.tracker.clear()  # sized by the first MTP case's layer count
    model = build(case)
    census = Census({p.untyped_storage()._cdata for p in model.parameters()})
    watch(model, census.where)
    s, b, n = case["seq"], case["batch"], case["layers"]
    tokens = torch.randint(0, case["vocab"], (b, s))
    position = torch.arange(s).unsqueeze(0).expand(b, s)
    mask = torch.triu(torch.ones(1, 1, s, s, dtype=torch.bool), diagonal=1)
    with torch.autograd.graph.saved_tensors_hooks(census.pack, lambda box: box.tensor):
        loss = model(tokens, position, mask, labels=tokens).float().sum()
        out = tally(census, n, listing)
        # megatron's GlobalMemoryBuffer: allocated by the forward, kept for the rest of the run
        out["global_buffer"] = sum(t.numel() * t.element_size() for t in ps.get_global_memory_buffer().buffer.values())
        if case.get("recompute") == "full":  # the backward re-runs each group under the same hooks
            census.backward = True
            loss.backward()
    # the mask and RoPE frequencies are model inputs every layer sees, not part of a layer's working set
    shared = out.pop("shared_keys")
    out["recompute"] = [sum(v for k, v in census.recompute.get(i, {}).items() if k not in shared) for i in range(n)]
    return out


class _HostStream:
    """A CUDA stream that does nothing: on CPU every copy is already synchronous."""

    def wait_stream(self, other) -> None:
        pass

    def record_event(self):
        return self

    def synchronize(self) -> None:
        pass


def cpu_setup() -> None:
    """One gloo rank on the CPU, with the patches above: megatron-core's layers run without a GPU."""
    import torch
    import torch.distributed as dist

    torch.cuda.current_device = lambda: "cpu"
    # one rank meets only itself: an in-memory store takes no port, so probes beside this one cannot collide
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from megatron.core.tensor_parallel import random as mrandom

    ps.initialize_model_parallel(1, 1)
    tracker = tensor_parallel.get_cuda_rng_tracker()
    tracker.fork = lambda *a, **k: contextlib.nullcontext()
    mrandom._get_cuda_rng_state = lambda *a, **k: None
    mrandom._set_cuda_rng_state = lambda *a, **k: None
    init = mrandom.CheckpointWithoutOutput.__init__

    def without_fp8(self, fp8=False):  # 0.16.1 sets fp8 = (fp8 is not None), True, and needs TE for it
        init(self, fp8)
        self.fp8 = False

    mrandom.CheckpointWithoutOutput.__init__ = without_fp8
    from megatron.core.transformer.moe import moe_utils

    moe_utils.te_general_gemm = getattr(moe_utils, "te_general_gemm", None)  # 0.16.1 reads it without TE
    # the alltoall dispatcher copies its split sizes to the host on a side CUDA stream: one stand-in stream
    stream = _HostStream()
    torch.cuda.Stream = lambda *a, **k: stream
    torch.cuda.current_stream = lambda *a, **k: stream
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()


def main() -> None:
    cpu_setup()
    cases = json.load(open(sys.argv[1]))
    listing = "--list" in sys.argv[3:]
    json.dump({name: measure(case, listing) for name, case in cases.items()}, open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()

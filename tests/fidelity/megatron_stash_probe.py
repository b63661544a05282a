"""Record the order and size of every forward and backward that megatron-core's pipeline schedules run, per rank.

python tests/fidelity/megatron_stash_probe.py CASES.json OUT.json. CASES.json maps a name to
{pp, layers, microbatches, vpp?, group?}; group is config.microbatch_group_size_per_vp_stage. One process per
pipeline rank (TP = 1, gloo), forked once per world size after megatron-core is imported, running every case
of that size in turn (the import dominates start-up). Each case builds a tiny GPT (local layer spec, bf16,
dropout 0, learned absolute positions, untied output layer, one GPTModel per virtual stage) and runs
megatron-core 0.16.1's own `get_forward_backward_func()` for one global batch.

OUT.json maps a name to one record per pipeline rank:
  events           ["F", chunk, layer_bytes, edge_bytes] when schedules.forward_step returns (bytes saved for
                   backward by that forward) and ["B", chunk] when schedules.backward_step returns, in order
  peak_inflight    max over time of forwards started minus backwards finished (virtual microbatches)
  peak_layer_bytes max bytes alive at once that TransformerLayers saved for backward
  peak_saved_bytes the same for everything saved (layers + embedding, final norm, output layer, loss)
Saved bytes: saved_tensors_hooks whose pack hook returns a Held box. A storage counts from its first box to
the collection of its last one (autograd drops the boxes when backward has used them). Parameters and the
probe's causal mask (one tensor every microbatch shares; GPU kernels build it in place) are not counted.

CPU patches (none changes what is scheduled or saved): torch.cuda.current_device returns "cpu";
torch.cuda.synchronize is a no-op; the schedule module's `torch` is wrapped so its device="cuda" zeros
(the token counter) are made on the CPU; the CUDA RNG tracker's fork() is a null context (no dropout here);
an explicit boolean causal mask is passed (megatron builds its default one on CUDA).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the checkout's root
from tests.fidelity.launch import run_by_world  # noqa: E402

SEQ, MICRO_BATCH, HIDDEN, HEADS, FFN, VOCAB = 32, 2, 64, 4, 256, 128


class CpuTorch:
    """schedules.py's view of torch: zeros it asks for on "cuda" are made on the CPU."""

    def __init__(self, torch):
        self._torch = torch

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def zeros(self, *args, **kwargs):
        if kwargs.get("device") == "cuda":
            kwargs["device"] = "cpu"
        return self._torch.zeros(*args, **kwargs)


class Census:
    """Live saved-for-backward bytes, split into TransformerLayer saves and the rest ("edges")."""

    def __init__(self, skip: set[int]):
        self.skip, self.refs = skip, {}
        self.live = {"layer": 0, "edge": 0}
        self.peak = {"layer": 0, "all": 0}
        self.in_layer = 0  # depth of TransformerLayer forwards running now

    def add(self, key: int, nbytes: int, kind: str) -> None:
        entry = self.refs.setdefault(key, [0, nbytes, kind])  # [boxes alive, bytes, kind of the first save]
        if entry[0] == 0:
            self.live[kind] += nbytes
            self.peak["layer"] = max(self.peak["layer"], self.live["layer"])
            self.peak["all"] = max(self.peak["all"], self.live["layer"] + self.live["edge"])
        entry[0] += 1

    def drop(self, key: int) -> None:
        entry = self.refs[key]
        entry[0] -= 1
        if entry[0] == 0:
            del self.refs[key]
            self.live[entry[2]] -= entry[1]


def held_type(census: Census):
    class Held:
        """What autograd keeps instead of the tensor: counts its storage while alive."""

        def __init__(self, tensor):
            storage = tensor.untyped_storage()
            self.tensor, self.key = tensor, storage.data_ptr()
            if self.key in census.skip or storage.nbytes() == 0:
                self.key = None
                return
            census.add(self.key, storage.nbytes(), "layer" if census.in_layer else "edge")

        def __del__(self):
            if self.key is not None:
                census.drop(self.key)

    return Held


def build(case: dict):
    """The case's model chunks on this rank, as Megatron-LM's model provider would build them."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    pp, vpp = case["pp"], case.get("vpp", 1)
    config = TransformerConfig(
        num_layers=case["layers"], hidden_size=HIDDEN, num_attention_heads=HEADS, ffn_hidden_size=FFN,
        pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
        microbatch_group_size_per_vp_stage=case.get("group"), pipeline_dtype=torch.bfloat16, bf16=True,
        params_dtype=torch.bfloat16, use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0,
        bias_dropout_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False)
    chunks = []
    for v in range(vpp):
        vp = v if vpp > 1 else None
        chunks.append(GPTModel(
            config, get_gpt_layer_local_spec(), vocab_size=VOCAB, max_sequence_length=SEQ,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
            share_embeddings_and_output_weights=False, vp_stage=vp).to(torch.bfloat16))
    return chunks


def run_case(case: dict) -> dict:
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func, schedules
    from megatron.core.transformer.transformer_layer import TransformerLayer

    pp, vpp, m = case["pp"], case.get("vpp", 1), case["microbatches"]
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(1, pp, virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None)
    torch.manual_seed(0)
    chunks = build(case)
    mask = torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool), diagonal=1)
    census = Census({p.untyped_storage().data_ptr() for c in chunks for p in c.parameters()}
                    | {mask.untyped_storage().data_ptr()})
    for layer in (mod for c in chunks for mod in c.modules() if isinstance(mod, TransformerLayer)):
        layer.register_forward_pre_hook(lambda *_: setattr(census, "in_layer", census.in_layer + 1))
        layer.register_forward_hook(lambda *_: setattr(census, "in_layer", census.in_layer - 1))

    events: list[list] = []
    state = {"inflight": 0, "peak": 0}
    chunk_of_output: dict[int, tuple] = {}  # id(output tensor) -> (tensor, chunk): backward_step gets no model
    forward_step, backward_step = schedules.forward_step, schedules.backward_step

    def first(x):
        return x[0] if isinstance(x, list) else x

    def counted_forward(forward_step_func, data_iterator, model, *args, **kwargs):
        state["inflight"] += 1
        state["peak"] = max(state["peak"], state["inflight"])
        before = dict(census.live)
        output, tokens = forward_step(forward_step_func, data_iterator, model, *args, **kwargs)
        chunk = chunks.index(model)
        chunk_of_output[id(first(output))] = (first(output), chunk)
        events.append(["F", chunk, census.live["layer"] - before["layer"], census.live["edge"] - before["edge"]])
        return output, tokens

    def counted_backward(input_tensor, output_tensor, *args, **kwargs):
        grad = backward_step(input_tensor, output_tensor, *args, **kwargs)
        state["inflight"] -= 1
        events.append(["B", chunk_of_output.pop(id(first(output_tensor)))[1]])
        return grad

    def batches():
        while True:
            tokens = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ))
            yield {"tokens": tokens, "labels": torch.roll(tokens, -1, 1),
                   "position_ids": torch.arange(SEQ).unsqueeze(0).expand(MICRO_BATCH, SEQ)}

    def forward_step_func(data_iterator, model):
        batch = next(data_iterator)
        output = model(batch["tokens"], batch["position_ids"], mask, labels=batch["labels"])
        return output, lambda out: (out.float().mean(), {"loss": out.detach().float().mean()})

    schedules.forward_step, schedules.backward_step = counted_forward, counted_backward
    try:
        iterators = [batches() for _ in chunks]
        with torch.autograd.graph.saved_tensors_hooks(held_type(census), lambda held: held.tensor):
            get_forward_backward_func()(
                forward_step_func=forward_step_func, data_iterator=iterators if vpp > 1 else iterators[0],
                model=chunks if vpp > 1 else chunks[0], num_microbatches=m, seq_length=SEQ,
                micro_batch_size=MICRO_BATCH, forward_only=False)
    finally:
        schedules.forward_step, schedules.backward_step = forward_step, backward_step
    return {"pp_rank": ps.get_pipeline_model_parallel_rank(), "events": events, "peak_inflight": state["peak"],
            "peak_layer_bytes": census.peak["layer"], "peak_saved_bytes": census.peak["all"]}


def worker(rank: int, world: int, init_method: str, cases: dict, out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from megatron.core import tensor_parallel
    from megatron.core.pipeline_parallel import schedules

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *a, **k: None
    schedules.torch = CpuTorch(torch)
    torch.set_num_threads(1)  # one core per rank at most: the ranks share a small machine
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
    tensor_parallel.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
    results = {}
    for name, case in cases.items():
        try:
            results[name] = run_case(case)
        except (ValueError, RuntimeError) as err:  # a layout the schedule refuses is a result, not a crash
            results[name] = {"pp_rank": rank, "error": f"{type(err).__name__}: {err}"}
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as handle:
        json.dump(results, handle)
    dist.destroy_process_group()


def main() -> None:
    cases = json.load(open(sys.argv[1]))
    results = run_by_world(worker, cases, lambda case: case["pp"])
    for name, records in results.items():  # TP = 1: rank order is pipeline order; sorted to say so
        results[name] = sorted(records, key=lambda rec: rec["pp_rank"])
    json.dump(results, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()

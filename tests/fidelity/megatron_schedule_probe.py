"""Run megatron-core's own pipeline schedules on CPU and record, per rank, the peak microbatches in flight and
the peak bytes of activations saved for backward.

python tests/fidelity/megatron_schedule_probe.py CASES.json OUT.json. One process per pipeline rank (TP = 1,
gloo), forked after megatron-core is imported once. Each case builds a small GPT (local layer spec, bf16,
no dropout, learned positions, one GPTModel per virtual stage) and runs `get_forward_backward_func()` for one
global batch. Counting:
- in flight: +1 when forward_step_func is called for a (virtual) microbatch, -1 when schedules.backward_step
  returns; the peak of that counter.
- saved bytes: every tensor autograd saves, through saved_tensors_hooks whose pack returns a holder object;
  a storage's bytes count while any holder of it lives (the graph drops them after backward). Parameters and
  the causal mask (one tensor shared by every microbatch) are left out.
Patches needed on CPU (none changes what is computed or kept): torch.cuda.current_device returns "cpu",
torch.cuda.synchronize is a no-op, the schedule module's device="cuda" token counter is made on the CPU, the
CUDA RNG tracker's fork() is a null context.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys

SEQ, MICRO_BATCH, HIDDEN, HEADS, FFN, VOCAB = 64, 2, 128, 4, 512, 256


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _CpuTorch:
    """schedules.py's view of torch: tensors it asks for on "cuda" are made on the CPU."""

    def __init__(self, torch):
        self._torch = torch

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def zeros(self, *args, **kwargs):
        if kwargs.get("device") == "cuda":
            kwargs["device"] = "cpu"
        return self._torch.zeros(*args, **kwargs)


def _run_case(case: dict, world: int) -> dict:
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.transformer import TransformerConfig

    pp, vpp, m = case["pp"], case.get("vpp", 1), case["microbatches"]
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(1, pp, virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None)
    config = TransformerConfig(
        num_layers=case["layers"], hidden_size=HIDDEN, num_attention_heads=HEADS, ffn_hidden_size=FFN,
        pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
        pipeline_dtype=torch.bfloat16, bf16=True, params_dtype=torch.bfloat16, use_cpu_initialization=True,
        hidden_dropout=0.0, attention_dropout=0.0, bias_dropout_fusion=False, masked_softmax_fusion=False,
        persist_layer_norm=False)
    spec = get_gpt_layer_local_spec()
    torch.manual_seed(0)
    chunks = []
    for v in range(vpp):
        vp = v if vpp > 1 else None
        chunks.append(GPTModel(
            config, spec, vocab_size=VOCAB, max_sequence_length=SEQ,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
            share_embeddings_and_output_weights=False, vp_stage=vp).to(torch.bfloat16))
    for chunk in chunks:
        chunk.config.no_sync_func = None
    params = {p.untyped_storage().data_ptr() for c in chunks for p in c.parameters()}
    mask = torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool), diagonal=1)
    params.add(mask.untyped_storage().data_ptr())

    state = {"inflight": 0, "peak_inflight": 0, "live": 0, "peak_live": 0}
    refs: dict[int, int] = {}

    class Held:
        """Keeps a saved tensor; its storage counts while any holder of it lives."""

        def __init__(self, tensor):
            self.tensor, self.key = tensor, tensor.untyped_storage().data_ptr()
            if self.key in params:
                self.key = None
                return
            if refs.get(self.key, 0) == 0:
                state["live"] += tensor.untyped_storage().nbytes()
                state["peak_live"] = max(state["peak_live"], state["live"])
            refs[self.key] = refs.get(self.key, 0) + 1

        def __del__(self):
            if self.key is None:
                return
            refs[self.key] -= 1
            if refs[self.key] == 0:
                state["live"] -= self.tensor.untyped_storage().nbytes()

    def batches():
        while True:
            tokens = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ))
            yield {"tokens": tokens, "labels": torch.roll(tokens, -1, 1),
                   "position_ids": torch.arange(SEQ).unsqueeze(0).expand(MICRO_BATCH, SEQ)}

    def forward_step(data_iterator, model):
        state["inflight"] += 1
        state["peak_inflight"] = max(state["peak_inflight"], state["inflight"])
        batch = next(data_iterator)
        output = model(batch["tokens"], batch["position_ids"], mask, labels=batch["labels"])

        def loss_func(output_tensor):
            loss = output_tensor.float().mean()
            return loss, {"loss": loss.detach()}

        return output, loss_func

    backward_step = schedules.backward_step

    def counted_backward_step(*args, **kwargs):
        result = backward_step(*args, **kwargs)
        state["inflight"] -= 1
        return result

    schedules.backward_step = counted_backward_step
    iterators = [batches() for _ in chunks]
    with torch.autograd.graph.saved_tensors_hooks(Held, lambda held: held.tensor):
        get_forward_backward_func()(
            forward_step_func=forward_step, data_iterator=iterators if vpp > 1 else iterators[0],
            model=chunks if vpp > 1 else chunks[0], num_microbatches=m, seq_length=SEQ,
            micro_batch_size=MICRO_BATCH, forward_only=False)
    schedules.backward_step = backward_step
    return {"pp_rank": ps.get_pipeline_model_parallel_rank(), "peak_inflight": state["peak_inflight"],
            "peak_saved_bytes": state["peak_live"]}


def _worker(rank: int, world: int, port: int, cases: dict, out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from megatron.core import tensor_parallel
    from megatron.core.pipeline_parallel import schedules

    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *a, **k: None
    schedules.torch = _CpuTorch(torch)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    tracker = tensor_parallel.get_cuda_rng_tracker()
    tracker.fork = lambda *a, **k: contextlib.nullcontext()  # dropout's CUDA RNG stream (dropout is 0 here)
    results = {name: _run_case(case, world) for name, case in cases.items()}
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as handle:
        json.dump(results, handle)
    dist.destroy_process_group()


def main() -> None:
    import tempfile

    import megatron.core.models.gpt  # noqa: F401  imported once here, inherited by the forked ranks
    import torch.multiprocessing as mp

    cases = json.load(open(sys.argv[1]))
    by_world: dict[int, dict] = {}
    for name, case in cases.items():
        by_world.setdefault(case["pp"], {})[name] = case
    results: dict[str, list] = {}
    for world, chosen in sorted(by_world.items()):
        with tempfile.TemporaryDirectory() as tmp:
            mp.start_processes(_worker, args=(world, _free_port(), chosen, tmp), nprocs=world, join=True,
                               start_method="fork")
            per_rank = [json.load(open(os.path.join(tmp, f"{r}.json"))) for r in range(world)]
        for name in chosen:
            results[name] = [ranks[name] for ranks in per_rank]
    json.dump(results, open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()

"""Megatron's per-layer CUDA graphs (guard/memory/cuda_graphs.py): the static input sets against megatron-core
0.16.1's own capture bookkeeping (TECudaGraphHelper._get_sample_arguments over its schedule order, run on CPU), the
static buffers and the phases by hand. No CPU oracle for the graph pool itself (CUDA graphs need a GPU): the GPU kit
measures it (bench/gpu_kit.py)."""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import pytest

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory import activations as acts
from guard.memory import cuda_graphs
from guard.memory.estimate import estimate_stage
from guard.settings import Settings

DENSE = ("pretrain_gpt.py --num-layers {layers} --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
         "--max-position-embeddings 512 --micro-batch-size 2 --global-batch-size {gbs} --vocab-size 1024 --bf16 "
         "--transformer-impl transformer_engine --use-flash-attn")


def _job(tmp_path, extra: str, layers: int = 8, gbs: int = 16, world: int = 1):
    script = tmp_path / "run.sh"
    script.write_text(f"torchrun --nproc_per_node {world} {DENSE.format(layers=layers, gbs=gbs)} {extra}\n")
    return read(Request(paths=(str(script),)), Settings()).job.required()


def _megatron_input_sets(pp: int, rank: int, chunks: int, microbatches: int, per_chunk: list[int]) -> int:
    """Distinct static input tensors megatron-core's capture helper allocates for rank `rank`."""
    torch = pytest.importorskip("torch")
    schedules = pytest.importorskip("megatron.core.pipeline_parallel.schedules")
    mcg = pytest.importorskip("megatron.core.transformer.cuda_graphs")
    ps = schedules.parallel_state
    if pp == 1:
        microbatches = 1  # _get_cuda_graph_input_data: one microbatch without PP
    with mock.patch.object(ps, "get_pipeline_model_parallel_world_size", return_value=pp), \
            mock.patch.object(ps, "get_pipeline_model_parallel_rank", return_value=rank), \
            mock.patch.object(ps, "get_virtual_pipeline_model_parallel_world_size",
                              return_value=chunks if chunks > 1 else None):
        _, _, warmup, _ = schedules.get_pp_rank_microbatches(microbatches, chunks, pp, False)
    order = mcg.convert_schedule_table_to_order(warmup, chunks, schedules.get_schedule_table(microbatches, chunks, pp))

    class Layer:
        def get_layer_static_inputs(self, seq_length, micro_batch_size):
            return {"hidden_states": torch.ones(seq_length, micro_batch_size, 4)}

    decoders = [SimpleNamespace(decoder=SimpleNamespace(layers=[Layer() for _ in range(n)])) for n in per_chunk]
    helper = SimpleNamespace(
        num_model_chunks=chunks, num_microbatches=microbatches, num_layers_per_chunk=per_chunk,
        callables_per_chunk=[d.decoder.layers for d in decoders], chunks_with_decoder=decoders,
        flattened_callables=[layer for d in decoders for layer in d.decoder.layers],
        config=SimpleNamespace(cuda_graph_scope=[], multi_latent_attention=False), seq_length=2, micro_batch_size=1)
    with mock.patch.object(mcg, "is_te_min_version", return_value=True):
        args, _ = mcg.TECudaGraphHelper._get_sample_arguments(helper, order)
    return len({id(a[0]) for a in args})


@pytest.mark.parametrize(("extra", "world", "layers", "gbs"), [
    ("", 1, 8, 16),  # no PP: one microbatch captured, one set per layer
    ("--pipeline-model-parallel-size 4", 4, 8, 16),  # 1F1B, 8 microbatches
    ("--pipeline-model-parallel-size 4", 4, 8, 4),  # fewer microbatches than stages
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2", 2, 8, 16),  # interleaved
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1", 2, 8, 8),
    ("--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1", 4, 12, 24),  # 3 chunks
])
def test_static_input_sets_are_megatrons(tmp_path, extra, world, layers, gbs):
    job = _job(tmp_path, f"{extra} --cuda-graph-impl transformer_engine", layers, gbs, world)
    for r in range(job.layout.pp):
        chunks = job.chunks[r]
        expected = _megatron_input_sets(job.layout.pp, r, len(chunks), job.num_microbatches,
                                        [len(c.layers) for c in chunks])
        assert cuda_graphs.input_sets(job, r, chunks) == expected


def test_static_buffers_by_hand(tmp_path):
    """PP 1, 8 layers, one microbatch captured: 8 sets of bf16 hidden states [512, 2, 256] (524,288 B) and bool
    masks [2, 1, 512, 512] (524,288 B); one gradient-output set (the layer output) and two gradient inputs."""
    job = _job(tmp_path, "--cuda-graph-impl transformer_engine")
    buffers = cuda_graphs.static_bytes(job, 0, job.chunks[0])
    hidden = 512 * 2 * 256 * 2
    assert buffers["static inputs: hidden states (bf16)"] == 8 * hidden
    assert buffers["static inputs: attention masks (bool)"] == 8 * 2 * 512 * 512
    assert buffers["shared gradient outputs, last gradient inputs"] == 3 * hidden
    # the MLP alone captured: no mask (get_layer_static_inputs adds it only with attention captured)
    job = _job(tmp_path, "--cuda-graph-impl transformer_engine --cuda-graph-scope mlp")
    assert "static inputs: attention masks (bool)" not in cuda_graphs.static_bytes(job, 0, job.chunks[0])


def test_every_saved_term_of_a_megatron_layer_is_placed(tmp_path):
    """Each term layer_terms names is inside or outside a graph by name: a new term must be placed, not dropped
    silently into the eager side."""
    known = (cuda_graphs.ATTENTION | cuda_graphs.MLP | cuda_graphs.ROUTER | cuda_graphs.PREPROCESS
             | cuda_graphs.EXPERTS | cuda_graphs.SHARED | cuda_graphs.NORMS | cuda_graphs.SPLIT)
    for extra in ("", "--attention-backend unfused --no-rope-fusion --position-embedding-type rope "
                  "--group-query-attention --num-query-groups 2",
                  "--num-experts 4 --moe-router-topk 2 --moe-shared-expert-intermediate-size 256 "
                  "--moe-ffn-hidden-size 128 --swiglu --moe-layer-freq 1",
                  "--hidden-dropout 0.1 --attention-dropout 0.1 --attention-backend unfused"):
        job = _job(tmp_path, extra)
        for i in range(job.arch.num_layers):
            assert set(acts.layer_terms(job, i)) <= known, extra


def test_whole_layer_graphs_hide_every_layer_term_at_replay(tmp_path):
    """Whole-layer graphs, PP 1: the replayed step's stash keeps no layer activations (only the edges); the
    attention alone captured hides exactly the attention's terms and half the norm and dropout-mask terms."""
    job = _job(tmp_path, "--cuda-graph-impl transformer_engine --cuda-graph-warmup-steps 0")
    stage = estimate_stage(job, 0)
    assert "forward/backward" not in stage.phases  # no eager step before the capture
    replayed = stage.phases["forward/backward (CUDA graphs replayed)"]
    assert replayed < estimate_stage(_job(tmp_path, ""), 0).phases["forward/backward"]
    terms = acts.layer_terms(job, 0)
    assert cuda_graphs.graphed_share(job, 0, terms) == pytest.approx(sum(terms.values()))
    job = _job(tmp_path, "--cuda-graph-impl transformer_engine --cuda-graph-scope attn")
    norms = sum(v for k, v in terms.items() if k in cuda_graphs.NORMS)
    attention = sum(v for k, v in terms.items() if k in cuda_graphs.ATTENTION)
    masks = terms["dropout masks"]  # megatron's default hidden dropout 0.1: one mask after attention, one after MLP
    assert cuda_graphs.graphed_share(job, 0, terms) == pytest.approx(attention + norms / 2 + masks / 2)


def test_eager_warmup_steps_keep_the_eager_peak(tmp_path):
    """With warm-up steps (the default 3) the eager steps run first: their peak stands, the graphs' static buffers
    are held after the step; without graphs nothing changes."""
    plain = estimate_stage(_job(tmp_path, ""), 0)
    graphed = estimate_stage(_job(tmp_path, "--cuda-graph-impl transformer_engine"), 0)
    assert graphed.phases["forward/backward"] == plain.phases["forward/backward"]
    added = sum(graphed.terms["cuda graph buffers"].values())
    assert graphed.resident_bytes - plain.resident_bytes == pytest.approx(added, abs=1)
    assert plain.resident_bytes == sum(plain.components[c] for c in ("params", "grads", "optimizer", "buffers"))


def test_the_pool_stays_on_the_device_beside_replayed_steps(tmp_path):
    """What replays leave out of max_memory_allocated is still on the device: the pool reserved at capture. PP 1,
    whole layers, no warm-up: the device peak (the allocated peak + runtime's pool term) is the replayed step's
    allocations + the pool, which holds every layer's saved tensors again: at least the eager peak plus the static
    buffers, whichever phase the allocated peak falls in."""
    eager = estimate_stage(_job(tmp_path, ""), 0)
    graphed = estimate_stage(_job(tmp_path, "--cuda-graph-impl transformer_engine --cuda-graph-warmup-steps 0"), 0)
    assert graphed.phase == "CUDA graph capture"
    pool = graphed.terms["runtime"]["CUDA graph pool (reserved, beside replayed steps)"]
    static = sum(graphed.terms["cuda graph buffers"].values())
    assert graphed.phases["CUDA graph capture"] + pool >= eager.phases["forward/backward"] + static


@pytest.mark.parametrize(("extra", "impl", "modules", "warmup", "full"), [
    ("", None, None, None, None),
    ("--enable-cuda-graph", "local", (), 3, False),  # arguments.py: deprecated spelling of --cuda-graph-impl local
    ("--external-cuda-graph", "transformer_engine", (), 3, False),
    ("--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router --cuda-graph-warmup-steps 0",
     "transformer_engine", ("attn", "moe_router"), 0, False),
    ("--cuda-graph-impl transformer_engine --cuda-graph-modules mlp", "transformer_engine", ("mlp",), 3, False),
    ("--cuda-graph-impl local --cuda-graph-scope full_iteration", "local", (), 3, True),
])
def test_the_flags_are_read_once_into_the_job(tmp_path, extra, impl, modules, warmup, full):
    graphs = _job(tmp_path, extra).cuda_graphs
    if impl is None:
        assert graphs is None
        return
    assert (graphs.impl, graphs.modules, graphs.warmup_steps, graphs.full_iteration) == (impl, modules, warmup, full)

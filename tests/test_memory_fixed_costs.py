"""GEMM workspaces, Megatron FSDP sharding, optimizer instances and activation offloading, each against the
rule in the code that allocates it (torch CublasHandlePool.cpp, Transformer Engine gemm.py, megatron-core
param_and_grad_buffer.py and fine_grained_activation_offload.py), worked by hand here."""

from __future__ import annotations

import pytest

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory import workspaces
from guard.memory.estimate import estimate_stage
from guard.settings import Settings

KIB, MIB = 1 << 10, 1 << 20
SMALL = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
         "--micro-batch-size 4 --global-batch-size 32 --vocab-size 50304 --make-vocab-size-divisible-by 128 --bf16")


def _job(extra: str = "", world: int = 8, gpu: str | None = None):
    return read(Request(megatron_args=(f"{SMALL} {extra}",)), Settings(world_size=world, gpu=gpu)).job.required()


def test_torch_workspace_size_follows_cublas_workspace_config():
    job = _job()
    job.blas_workspace_config = ":4096:8"
    assert workspaces.torch_workspace(job) == 4096 * KIB * 8
    job.blas_workspace_config = ":4096:2:16:8"  # pairs add up
    assert workspaces.torch_workspace(job) == 4096 * KIB * 2 + 16 * KIB * 8


def test_torch_default_is_32_mib_on_sm90_only_and_by_gfx_target_on_rocm():
    assert workspaces.torch_workspace(_job(gpu="H100")) == 32 * MIB
    assert workspaces.torch_workspace(_job(gpu="A100-80GB")) == 8 * MIB + 128 * KIB
    assert workspaces.torch_workspace(_job(gpu="GB200")) == 8 * MIB + 128 * KIB  # 10.0 is not sm_90
    assert workspaces.torch_workspace(_job(gpu="MI300X")) == 128 * MIB  # ROCm gfx942
    assert workspaces.torch_workspace(_job(gpu="MI250X")) == 32 * MIB  # ROCm gfx90a


def test_two_torch_workspaces_and_one_transformer_engine_workspace():
    h100 = workspaces.gemm_workspaces(_job(gpu="H100"))  # Transformer Engine is megatron's default impl
    assert sum(h100.values()) == 2 * 32 * MIB + 32 * MIB + KIB
    a100 = workspaces.gemm_workspaces(_job(gpu="A100-80GB"))
    assert sum(a100.values()) == 2 * (8 * MIB + 128 * KIB) + 4 * MIB
    local = workspaces.gemm_workspaces(_job("--transformer-impl local", gpu="H100"))
    assert sum(local.values()) == 2 * 32 * MIB


def test_grouped_gemm_adds_four_stream_workspaces():
    moe = "--num-experts 8 --expert-model-parallel-size 8 --moe-ffn-hidden-size 1024 --moe-grouped-gemm"
    terms = workspaces.gemm_workspaces(_job(moe, gpu="A100-80GB"))
    assert terms["Transformer Engine grouped-GEMM workspaces"] == 4 * 4 * MIB


def test_launch_script_environment_sets_the_workspace(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/bash\nexport CUBLAS_WORKSPACE_CONFIG=:16:8\ntorchrun --nproc_per_node 8 "
                      f"pretrain_gpt.py {SMALL}\n")
    job = read(Request(paths=(str(script),)), Settings()).job
    assert job.blas_workspace_config == ":16:8"
    assert (job.origin("blas_workspace_config").path, job.origin("blas_workspace_config").line) == (str(script), 2)
    assert workspaces.torch_workspace(job) == 16 * KIB * 8


def test_global_memory_buffer_is_the_largest_request():
    # local unfused attention: [b * heads / TP, s, s] in bf16; sequence parallel all-gather: [s, b, h]
    local = _job("--transformer-impl local --tensor-model-parallel-size 2")
    assert workspaces.global_memory_buffer(local) == 2 * 4 * 8 / 2 * 1024 * 1024
    sp = _job("--tensor-model-parallel-size 2 --sequence-parallel")
    assert workspaces.global_memory_buffer(sp) == 2 * 1024 * 4 * 512


def test_optimizer_instances_shard_over_their_part_of_dp():
    one = estimate_stage(_job("--use-distributed-optimizer"), 0)
    two = estimate_stage(_job("--use-distributed-optimizer --num-distributed-optimizer-instances 2"), 0)
    params = one.components["params"] // 2  # bf16
    assert one.components["optimizer"] == -(-params * 12 // 8)  # fp32 master + two moments over DP 8
    assert two.components["optimizer"] == -(-params * 12 // 4)


def test_megatron_fsdp_shards_by_strategy():
    plain = estimate_stage(_job("--use-distributed-optimizer"), 0).components
    n = plain["params"] // 2
    for strategy, (p, g, o) in {"no_shard": (1, 1, 1), "optim": (1, 1, 8), "optim_grads": (1, 8, 8),
                                "optim_grads_params": (8, 8, 8)}.items():
        job = _job(f"--use-distributed-optimizer --use-megatron-fsdp --data-parallel-sharding-strategy {strategy}")
        got = estimate_stage(job, 0).components
        assert (got["params"], got["grads"], got["optimizer"]) == (-(-n * 2 // p), -(-n * 4 // g),
                                                                   -(-n * 12 // o)), strategy


def test_offloaded_modules_leave_the_stash():
    # TP 1, s b = 4096 tokens, h 512: the attention projection input is 2M elements (offloaded), the two norm
    # inputs together 4 MiB of which attn_norm's half goes
    base = "--transformer-impl local --attention-backend unfused"
    kept = estimate_stage(_job(base), 0)
    off = estimate_stage(_job(f"{base} --fine-grained-activation-offloading --offload-modules attn_proj "
                              "attn_norm"), 0)
    per_layer = 2 * 4096 * 512 + 2 * 4096 * 512  # attn_proj input + attn_norm input, bf16
    assert kept.components["activations"] - off.components["activations"] == 4 * per_layer * off.inflight
    assert off.terms["transient"]["recompute working set / offloaded layers in flight"] == 2 * per_layer


def test_muon_keeps_one_momentum_per_matrix_and_adam_for_the_rest():
    # TP 1, PP 1: word embeddings 50304 x 512 (Adam: flagged embedding/output), position embeddings
    # 1024 x 512 (2-D, unflagged: Muon); per layer QKV 512 x 1536, proj 512 x 512, fc1 512 x 2048, fc2
    # 2048 x 512 (Muon), 2 LayerNorms (weight + bias) and 4 biases (Adam); final LayerNorm (Adam)
    matrices = 1024 * 512 + 4 * (512 * 1536 + 512 * 512 + 2 * 512 * 2048)
    vectors = 50304 * 512 + 4 * (4 * 512 + 1536 + 512 + 2048 + 512) + 2 * 512
    muon = estimate_stage(_job("--optimizer muon", world=1), 0).components["optimizer"]
    assert muon == matrices * (4 + 4) + vectors * (4 + 8)  # fp32 master + momentum / two moments


def test_layer_wise_distributed_muon_deals_whole_tensors_by_size():
    """shard_params: sorted by numel, dealt 0, 1, 1, 0, 0, 1, ... over two ranks; the largest tensor (the
    word embeddings) is the last one dealt."""
    from guard.memory import muon

    tensors = [(n, True, False) for n in (5, 1, 4, 2, 3)]
    assert muon.layer_wise_share(tensors, 2) == [[(1, True, False), (4, True, False), (5, True, False)],
                                                 [(2, True, False), (3, True, False)]]
    job = _job("--optimizer muon --use-distributed-optimizer", world=2)
    ranks = [estimate_stage(job, 0, dp_rank=r).components["optimizer"] for r in (0, 1)]
    whole = estimate_stage(_job("--optimizer muon", world=2), 0).components["optimizer"]
    assert sum(ranks) == whole  # every tensor's states on exactly one rank
    assert estimate_stage(job, 0).components["optimizer"] == max(ranks)


def test_megatron_torch_softmax_keeps_fp32_probabilities():
    """fusions/fused_softmax.py forward_torch_softmax: scores upcast, the fp32 softmax is what autograd keeps;
    the fused kernel (the default) keeps its 16-bit output. b 4 x 8 heads x 1024^2 scores per layer."""
    scores = 4 * 8 * 1024 * 1024
    local = "--transformer-impl local --attention-softmax-in-fp32"
    layer = "layer activations (one microbatch)"
    fused = estimate_stage(_job(local), 0).terms[layer]
    torch_path = estimate_stage(_job(f"{local} --no-masked-softmax-fusion"), 0).terms[layer]
    assert fused["softmax output"] == 2 * scores
    assert torch_path["softmax output"] == 4 * scores


@pytest.mark.parametrize("flags", [
    "--pipeline-model-parallel-size 2",
    "--group-query-attention --num-query-groups 2 --swiglu --normalization RMSNorm --disable-bias-linear "
    "--untie-embeddings-and-output-weights --position-embedding-type rope --tensor-model-parallel-size 2 "
    "--qk-layernorm",
    "--num-experts 4 --expert-model-parallel-size 2 --moe-ffn-hidden-size 128 "
    "--moe-shared-expert-intermediate-size 256 --moe-layer-freq 2",
    "--pipeline-model-parallel-size 2 --mtp-num-layers 1",
    "--mtp-num-layers 2 --untie-embeddings-and-output-weights",
])
def test_muon_deals_every_parameter_the_inventory_counts(flags):
    """Muon needs tensors one by one (params.py counts them by kind): both lists must hold the same parameters,
    which megatron-core's models confirm for the inventory (tests/test_fidelity_megatron_params.py)."""
    from guard.memory import muon
    from guard.memory.params import rank_inventory

    job = _job(f"--optimizer muon {flags}")
    for chunks in job.chunks:
        assert sum(n for n, _, _ in muon.stage_tensors(job, chunks)) == rank_inventory(job, chunks).total


LLAMA8B = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
           "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm --disable-bias-linear "
           "--position-embedding-type rope --untie-embeddings-and-output-weights --vocab-size 128256 "
           "--make-vocab-size-divisible-by 128 --seq-length 4096 --max-position-embeddings 4096 "
           "--micro-batch-size 1 --global-batch-size 64 --bf16 --use-distributed-optimizer --use-megatron-fsdp "
           "--data-parallel-sharding-strategy optim_grads_params")


def _fsdp(extra: str = ""):
    from guard.memory import megatron_fsdp
    from guard.memory.params import rank_inventory

    job = read(Request(megatron_args=(f"{LLAMA8B} {extra}",)), Settings(world_size=8)).job.required()
    return job, rank_inventory(job, job.chunks[0]), megatron_fsdp


def test_megatron_fsdp_prefetches_half_a_communication_unit_in_backward():
    """A Llama-3-8B layer: 4096 x (4096 + 2 x 1024) + 4096 x 4096 + 3 x 4096 x 14336 + 2 x 4096 norm = 218,112,000
    elements; the communication unit max(1e9, 2 x mean unit) = 1e9, so 5e8 prefetched: ceil(5e8 / 218,112,000) = 3
    units beside the current one; --fsdp-double-buffer keeps two; a 3e8 unit, 1.5e8 prefetched: one."""
    layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    assert layer == 218_112_000
    job, inv, fsdp = _fsdp()
    assert fsdp.prefetch_window(job, inv, layer, 32) == 4
    job, inv, fsdp = _fsdp("--fsdp-double-buffer")
    assert fsdp.prefetch_window(job, inv, layer, 32) == 2
    # its two pools (bf16 weights, fp32 gradients) are kept for good: buffers, held after the step too
    stage = estimate_stage(job, 0)
    pools = stage.terms["buffers"]["Megatron FSDP double buffer (two units' weights and gradients)"]
    assert pools == 2 * layer * (2 + 4) and stage.resident_bytes >= pools
    job, inv, fsdp = _fsdp("--suggested-communication-unit-size 300000000")
    assert fsdp.prefetch_window(job, inv, layer, 32) == 2
    job, inv, fsdp = _fsdp()
    assert fsdp.prefetch_window(job, inv, 1_000_000, 12) == 12  # a small model: every unit gathered


def test_megatron_fsdp_output_layer_gradient_bucket():
    """Untied 128,256 x 4096 = 525,336,576-element embedding and output layer. With --overlap-grad-reduce the
    bucket size is max(4e7, 1e6 x DP 8) = 4e7: the embedding closes its bucket, the final norm (4096) and the
    output layer share the next; without it one bucket holds every parameter outside the units."""
    vocab = 128256 * 4096
    job, inv, fsdp = _fsdp("--overlap-grad-reduce")
    assert fsdp.output_bucket(job, inv) == 4096 + vocab
    job, inv, fsdp = _fsdp()
    assert fsdp.output_bucket(job, inv) == 2 * vocab + 4096


def test_fp16_gradient_copies_live_from_the_step_to_the_next_zero_grad():
    """--fp16 keeps an fp16 gradient buffer; the step copies each gradient to fp32 (optimizer.py
    _copy_model_grads_to_main_grads) and zero_grad(set_to_none) frees the copies before the next forward
    (training.py train_step). So 4 B/param more in the step and after it, none in the forward/backward: the
    forward/backward differs from bf16's only by the 2 B/param smaller gradient buffer."""
    bf16 = estimate_stage(_job("", world=1), 0)
    fp16_job = read(Request(megatron_args=(SMALL.replace("--bf16", "--fp16"),)), Settings(world_size=1))
    fp16 = estimate_stage(fp16_job.job.required(), 0)
    n = bf16.components["params"] // 2
    assert fp16.components["grads"] == 2 * n and bf16.components["grads"] == 4 * n
    assert fp16.components["optimizer"] == bf16.components["optimizer"] == 12 * n  # fp32 masters + two moments
    assert bf16.phases["forward/backward"] - fp16.phases["forward/backward"] == 2 * n
    assert fp16.terms["optimizer step"]["fp32 gradient copies (held to the next zero_grad)"] == 4 * n
    assert fp16.resident_bytes - bf16.resident_bytes == 2 * n  # -2 B/param of buffer, +4 B/param of copies

"""The stated margin (guard/memory/margin.py): lower <= prediction <= upper, the verdicts, and a feature's bound
counted by hand from the code it cites."""

from __future__ import annotations

import json

from conftest import run_guard

GPT = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 16 "
       "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 2 --global-batch-size 16 --bf16 "
       "--vocab-size 32000 --use-distributed-optimizer --tensor-model-parallel-size 2 {extra}")


def _estimate(tmp_path, extra: str = "", gpu: str = "H100") -> tuple[int, dict]:
    script = tmp_path / "run.sh"
    script.write_text("export CUDA_DEVICE_MAX_CONNECTIONS=1\n" + GPT.format(extra=extra) + "\n")
    code, out, err = run_guard("estimate", str(script), "--format", "json", "--gpu", gpu)
    assert code in (0, 1), out + err
    return code, json.loads(out)


def test_the_band_brackets_the_prediction_and_fits_when_its_top_does(tmp_path):
    code, data = _estimate(tmp_path)
    m = data["margin"]
    assert m["lower_bytes"] <= m["predicted_bytes"] <= m["upper_bytes"]
    assert data["verdict"] == "fits" and data["fits"] is True and code == 0
    # what the upper bound adds is named, each with its bytes
    assert m["upper_bytes"] - m["predicted_bytes"] == sum(a["bytes"] for a in m["added"])


def test_an_unbounded_feature_makes_a_fitting_prediction_may_not_fit(tmp_path):
    """--moe-router-load-balancing-type with dropless routing over EP 2: nothing bounds the busiest rank's tokens."""
    code, data = _estimate(tmp_path, "--num-experts 4 --expert-model-parallel-size 2 --moe-router-topk 2 "
                                     "--moe-router-load-balancing-type aux_loss --moe-grouped-gemm --disable-bias-linear")
    assert data["verdict"] == "may not fit" and data["fits"] is False and code == 0
    assert data["margin"]["upper_bytes"] is None
    assert any(a["bytes"] is None for a in data["margin"]["added"])


def test_a_prediction_over_the_gpu_does_not_fit(tmp_path):
    code, data = _estimate(tmp_path, gpu="1GiB")
    assert data["verdict"] == "does not fit" and data["fits"] is False and code == 1


def test_deterministic_attention_is_bounded_by_one_fp32_dq(tmp_path):
    """flash-attn's and cuDNN's deterministic backward accumulate dQ in fp32: 4 bytes x 2048 tokens x 2 rows x
    16 heads x 64 head dim / TP 2 = 8 MiB beyond the non-deterministic run's band."""
    _, plain = _estimate(tmp_path)
    _, deterministic = _estimate(tmp_path, "--deterministic-mode")
    added = {a["what"]: a["bytes"] for a in deterministic["margin"]["added"]}
    bound = next(v for k, v in added.items() if k.startswith("deterministic kernels"))
    assert bound == 4 * 2048 * 2 * 16 * 64 // 2

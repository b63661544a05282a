"""guard plan's step-time model against published Megatron-LM measurements on A100-80GB (memory_anchors.md §12):

- Korthikanti et al. 2022, Table 5: iteration time of 22B-1T with full recompute and with SP + selective
  recompute (Table 3 layouts; 175B and 530B interleaved with 3 virtual stages);
- Narayanan et al. 2021, Table 1: achieved TFLOP/s per GPU (their count, with recompute:
  96 B s L h^2 (1 + s/(6h) + V/(16 L h)) / (time x GPUs)) for 1.7B-1T. The paper gives TP, PP, GPUs and
  batch; guard takes the fastest micro-batch and VPP that fit, with full recompute as the paper used.
Both papers ran the 2021-22 kernels: unfused softmax with attention dropout 0.1, fp16.
"""

from __future__ import annotations

import statistics

from guard.intake.read import read
from guard.intake.request import Request
from guard.memory.estimate import estimate
from guard.memory.gpu_choice import choose_gpu
from guard.plan.hardware import hardware
from guard.plan.step_time import replayed, step_time
from guard.settings import Settings

GPU = choose_gpu("A100-80GB")
HW = hardware(GPU, "fp16")
# name, heads, hidden, layers, TP, PP, GPUs, global batch, micro-batch, VPP, full recompute s, SP+selective s
KORTHIKANTI = [("22B", 64, 6144, 48, 8, 1, 8, 4, 4, 1, 1.42, 1.10),
               ("175B", 96, 12288, 96, 8, 8, 64, 64, 1, 3, 18.13, 13.75),
               ("530B", 128, 20480, 105, 8, 35, 280, 280, 1, 3, 49.05, 37.83),
               ("1T", 160, 25600, 128, 8, 64, 512, 512, 1, 1, 94.42, 71.49)]
# billions, heads, hidden, layers, TP, PP, GPUs, batch, TFLOP/s per GPU
NARAYANAN = [(1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
             (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
             (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
             (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
             (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163), (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163)]


def job(heads, hidden, layers, tp, pp, gpus, batch, micro, vpp, recompute):
    args = (f"--num-layers {layers} --hidden-size {hidden} --num-attention-heads {heads} --seq-length 2048 "
            f"--max-position-embeddings 2048 --micro-batch-size {micro} --global-batch-size {batch} "
            f"--tensor-model-parallel-size {tp} --pipeline-model-parallel-size {pp} --fp16 --vocab-size 51200 "
            "--attention-dropout 0.1 --hidden-dropout 0.1")
    if vpp > 1:
        args += f" --num-layers-per-virtual-pipeline-stage {layers // pp // vpp}"
    args += (" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
             if recompute == "full" else " --sequence-parallel --recompute-granularity selective")
    settings = Settings()
    settings.world_size = gpus
    out = read(Request(megatron_args=(args,)), settings).job
    out.attention = "unfused"  # the papers' softmax: scores materialised (no flash attention in 2021-22)
    return out


def seconds(j) -> float:
    return replayed(j, step_time(j, HW)).seconds


def korthikanti() -> list[float]:
    print("Korthikanti et al. 2022, Table 5: iteration time (s), A100-80GB")
    print(f"{'model':6} {'technique':16} {'published':>9} {'guard':>8} {'error':>7}")
    errors = []
    for name, heads, hidden, layers, tp, pp, gpus, batch, micro, vpp, full, selective in KORTHIKANTI:
        for technique, published in (("full recompute", full), ("SP + selective", selective)):
            predicted = seconds(job(heads, hidden, layers, tp, pp, gpus, batch, micro, vpp,
                                    "full" if technique == "full recompute" else "selective"))
            errors.append(predicted / published - 1)
            print(f"{name:6} {technique:16} {published:9.2f} {predicted:8.2f} {errors[-1]:+7.1%}")
    return errors


def narayanan() -> dict[str, list[float]]:
    """The paper does not give the micro-batch: guard prices micro-batch 1 and the fastest that fits."""
    print("\nNarayanan et al. 2021, Table 1: TFLOP/s per GPU, A100-80GB, full recompute")
    print(f"{'params':>7} {'TP':>3} {'PP':>3} {'GPUs':>5} {'published':>9} {'guard b=1':>10} {'error':>7} "
          f"{'guard best':>10} {'error':>7}  (micro-batch, VPP)")
    errors: dict[str, list[float]] = {"micro-batch 1": [], "fastest micro-batch": []}
    for billions, heads, hidden, layers, tp, pp, gpus, batch, published in NARAYANAN:
        flops = 96 * batch * 2048 * layers * hidden ** 2 * (1 + 2048 / (6 * hidden) + 51200 / (16 * layers * hidden))
        priced = {}
        for micro in (1, 2, 4, 8):
            for vpp in (1, 2, 3, 4) if pp > 1 else (1,):
                dp = gpus // (tp * pp)
                if batch % (micro * dp) or (layers // pp) % vpp or layers % pp:
                    continue
                j = job(heads, hidden, layers, tp, pp, gpus, batch, micro, vpp, "full")
                if (vpp > 1 and j.num_microbatches % pp) or not estimate(j, GPU).fits:
                    continue
                priced[(micro, vpp)] = flops / seconds(j) / gpus / 1e12
        one = max(v for (micro, _), v in priced.items() if micro == 1)
        best_key = max(priced, key=priced.get)
        best = priced[best_key]
        errors["micro-batch 1"].append(one / published - 1)
        errors["fastest micro-batch"].append(best / published - 1)
        print(f"{billions:7.1f} {tp:3} {pp:3} {gpus:5} {published:9} {one:10.0f} {one / published - 1:+7.1%} "
              f"{best:10.0f} {best / published - 1:+7.1%}  {best_key}")
    return errors


def main() -> None:
    k, n = korthikanti(), narayanan()
    rows = [("Korthikanti Table 5 (time)", k)] + [(f"Narayanan Table 1 (TFLOP/s), {name}", e) for name, e in n.items()]
    for label, errors in rows:
        absolute = [abs(e) for e in errors]
        print(f"\n{label}: median |error| {statistics.median(absolute):.1%}, max {max(absolute):.1%}, "
              f"within 15%: {sum(a <= 0.15 for a in absolute)}/{len(absolute)}")


if __name__ == "__main__":
    main()

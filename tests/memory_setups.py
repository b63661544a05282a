"""Hand-built memory-model setups for the paper tests (dimensions from the papers, not from guard)."""

from __future__ import annotations

from guard.job.architecture import Architecture
from guard.job.stages import even_chunks
from guard.job.training_job import TrainingJob, new_job

# Korthikanti et al. 2022, Table 3: (heads, hidden, layers, TP, PP, micro batch, global batch, interleave v)
KORTHIKANTI = {
    "22B": (64, 6144, 48, 8, 1, 4, 4, 1),
    "175B": (96, 12288, 96, 8, 8, 1, 64, 3),
    "530B": (128, 20480, 105, 8, 35, 1, 280, 3),
    "1T": (160, 25600, 128, 8, 64, 1, 512, 1),
}


def korthikanti(model: str, sp: bool = False, recompute: str = "none") -> TrainingJob:
    heads, hidden, layers, tp, pp, mbs, gbs, v = KORTHIKANTI[model]
    arch = Architecture(num_layers=layers, hidden=hidden, heads=heads, query_groups=heads,
                        kv_channels=hidden // heads, ffn_hidden=4 * hidden, vocab=51200, max_positions=2048,
                        hidden_dropout=0.1, attention_dropout=0.1, linear_bias=False, name=model)
    setup = new_job(arch=arch, framework="megatron", world_size=tp * pp, tp=tp, pp=pp, vpp=v, seq_length=2048,
                  micro_batch=mbs, num_microbatches=gbs // mbs, attention="unfused", sequence_parallel=sp,
                  recompute=recompute, params_dtype="bf16", grads_dtype="fp32")
    setup.chunks = even_chunks(layers, pp, v)
    return setup

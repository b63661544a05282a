"""`guard estimate --plot FILE.png|svg`: stacked bars per pipeline stage against the GPU's capacity."""

from __future__ import annotations

from guard.memory.estimate import COMPONENTS, Estimate
from guard.units import GIB


def plot(est: Estimate, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'guard[plot]'") from None
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(est.stages) + 4), 4.5))
    xs = [f"PP {st.pp_rank}" for st in est.stages]
    bottom = [0.0] * len(est.stages)
    for key in COMPONENTS:
        values = [st.components[key] / GIB for st in est.stages]
        if any(values):
            ax.bar(xs, values, bottom=bottom, label=key)
            bottom = [b + v for b, v in zip(bottom, values)]
    if est.capacity:
        ax.axhline(est.capacity / GIB, color="black", linestyle="--", label=f"{est.gpu.name} usable")
    ax.set_ylabel("GiB per rank")
    name = est.setup.arch.name.rsplit("/", 1)[-1]
    ax.set_title(f"predicted peak per pipeline stage\n{name}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

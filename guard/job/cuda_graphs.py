"""Which parts of a Megatron job run as CUDA graphs, read once from its flags (megatron-core 0.16.1 and main)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CudaGraphs:
    """--cuda-graph-impl (or the older --enable-cuda-graph / --external-cuda-graph) and what it captures."""

    impl: str  # local (megatron's CudaGraphManager) | transformer_engine (TE's make_graphed_callables)
    # --cuda-graph-scope / --cuda-graph-modules, CudaGraphScope's names (attn, mlp, moe, moe_router,
    # moe_preprocess, mamba: megatron/core/transformer/enums.py); () = every layer whole
    modules: tuple[str, ...] = ()
    warmup_steps: int = 3  # --cuda-graph-warmup-steps: steps run eagerly before the graphs are captured
    full_iteration: bool = False  # local impl capturing the whole forward-backward (FullCudaGraphWrapper)

    def captures(self, module: str) -> bool:
        """Whether a layer's `module` part runs inside its graph."""
        if self.full_iteration:
            return False  # nothing per layer: the whole step is one graph
        if not self.modules:
            return True
        if module in ("moe_router", "shared_experts"):
            return "moe" in self.modules or "moe_router" in self.modules
        return module in self.modules

    @property
    def eager_first(self) -> bool:
        """Whether eager steps run before the capture (their peak counts in max_memory_allocated): the local impl
        records its graphs while step 1 runs eagerly; TE's helper captures after --cuda-graph-warmup-steps."""
        return self.impl == "local" or self.warmup_steps > 0


def read(impl: object, enable: bool, external: bool, modules: object, warmup: object) -> CudaGraphs | None:
    """The job's CUDA graphs from the flag values (None: not used)."""
    name = str(impl or "none").split(".")[-1].lower()
    if name == "none":
        name = "local" if enable else "transformer_engine" if external else "none"
    if name == "none":
        return None
    listed = modules if isinstance(modules, (list, tuple)) else [modules] if modules else []
    scope = tuple(sorted({str(m).split(".")[-1].lower() for m in listed} - {"full"}))
    full = name == "full_iteration" or "full_iteration" in scope
    steps = int(warmup) if isinstance(warmup, (int, float)) and not isinstance(warmup, bool) else 3
    return CudaGraphs("local" if full else name, tuple(m for m in scope if m != "full_iteration"), steps, full)

"""Cold wall time of `guard check` / `guard estimate` on a fine-tuning job (the LLaMA-Factory example, and the
script that launches it), beside check-jsonschema validating the DeepSpeed file alone in the same run."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from lint_speed import REPEATS, SCHEMA, cold

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "finetune" / "llama3_lora_sft.yaml"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "run.sh"
        script.write_text(f"FORCE_TORCHRUN=1 NPROC_PER_NODE=8 llamafactory-cli train {EXAMPLE} cutoff_len=8192\n")
        guard = [sys.executable, "-m", "guard"]
        cjs = shutil.which("check-jsonschema") or str(Path(sys.executable).with_name("check-jsonschema"))
        base = cold([cjs, "--schemafile", str(SCHEMA), str(EXAMPLE.with_name("ds_z3_config.json"))])
        rows = [("guard check, training config", cold(guard + ["check", "--isolated", "--exit-zero", str(EXAMPLE)])),
                ("guard check, launch script", cold(guard + ["check", "--isolated", "--exit-zero", str(script)])),
                ("guard estimate, training config", cold(guard + ["estimate", str(EXAMPLE), "--world-size", "8",
                                                                  "--gpu", "A100-80GB"])),
                ("guard estimate, launch script", cold(guard + ["estimate", str(script), "--gpu", "A100-80GB"]))]
    python = cold([sys.executable, "-c", "pass"])
    print(f"cold wall time, median of {REPEATS} runs (python startup alone: {python:.3f} s)\n")
    print(f"{'command':34} {'seconds':>8} {'vs check-jsonschema on the DeepSpeed file':>44}")
    for name, seconds in rows:
        print(f"{name:34} {seconds:8.3f} {seconds / base:43.2f}x")
    print(f"{'check-jsonschema, DeepSpeed file':34} {base:8.3f}")


if __name__ == "__main__":
    main()

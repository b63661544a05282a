"""Build schemas/catalog/catalog.json from the Hub config.json copies named in schemas/catalog/catalog_sources.yaml."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "schemas/catalog/catalog_sources.yaml"
OUTPUT = ROOT / "schemas/catalog/catalog.json"
MIRRORS = Path("/work/.mirror")
# torch_dtype / dtype stay: "auto" loading (transformers 5's default) takes the weights in that dtype
NOISE = {"transformers_version", "initializer_range", "auto_map", "_name_or_path",
         "use_cache", "bos_token_id", "eos_token_id", "pad_token_id"}
NESTED = ("text_config", "vision_config", "llm_config")


def is_noise(key: str) -> bool:
    return key in NOISE or key.endswith("_token_id") or key.startswith("output_")


def clean(config: dict) -> dict:
    out = {k: v for k, v in config.items() if not is_noise(k)}
    for key in NESTED:
        if isinstance(out.get(key), dict):
            out[key] = {k: v for k, v in out[key].items() if not is_noise(k)}
    return out


class Files:
    """File bytes from a --copies folder, else a local git mirror, else raw.githubusercontent.com."""

    def __init__(self, copies: Path | None):
        self.copies = copies
        self.online = True

    def get(self, repo: str, commit: str, path: str) -> bytes | None:
        if self.copies:
            copy = self.copies / repo.replace("/", "+") / commit / path
            if copy.is_file():
                return copy.read_bytes()
        for git_dir in self._git_dirs(repo):
            shown = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], capture_output=True)
            if shown.returncode == 0:
                return shown.stdout
        if self.online:
            try:
                url = f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"
                with urllib.request.urlopen(url, timeout=10) as reply:
                    return reply.read()
            except OSError:
                self.online = False
        return None

    @staticmethod
    def _git_dirs(repo: str) -> list[Path]:
        base = MIRRORS / repo.replace("/", "+")
        candidates = [base, *base.glob("*"), *base.glob("*/*")] if base.is_dir() else []
        return [d for d in candidates if (d / "HEAD").is_file() and (d / "objects").is_dir()]


def build(entries: list[dict], files: Files) -> dict:
    models, aliases = {}, {}
    for entry in entries:
        ident = entry["id"]
        if "config" in entry:
            ref = entry["config"]
            data = files.get(ref["repo"], ref["commit"], ref["path"])
            if data is None:
                sys.exit(f"{ident}: cannot obtain {ref['repo']}@{ref['commit']}:{ref['path']}")
            if hashlib.sha256(data).hexdigest() != ref["sha256"]:
                sys.exit(f"{ident}: sha256 of {ref['repo']}@{ref['commit']}:{ref['path']} differs from the catalog")
            config = json.loads(data)
            source = f"https://github.com/{ref['repo']}/blob/{ref['commit']}/{ref['path']}"
        else:
            config, source = entry["inline"], entry["inline_source"]
        models[ident] = {"config": clean(config), "source": source, "family": entry["family"],
                         "params": entry.get("params"), "params_tolerance": entry.get("params_tolerance"),
                         "params_source": entry.get("params_source"),
                         **({"params_note": entry["params_note"]} if entry.get("params_note") else {})}
        for name in [ident, *entry.get("names", [])]:
            if aliases.setdefault(name.lower(), ident) != ident:
                sys.exit(f"{ident}: name {name} already belongs to {aliases[name.lower()]}")
    return {"_generated": "by scripts/build_model_catalog.py from schemas/catalog/catalog_sources.yaml; do not edit",
            "models": models, "aliases": aliases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--copies", type=Path, help="folder laid out as DIR/<owner>+<name>/<commit>/<path>")
    parser.add_argument("--out", type=Path, default=OUTPUT,
                        help="where to write the catalog (default: the shipped one)")
    args = parser.parse_args()
    entries = yaml.safe_load(SOURCES.read_text())
    catalog = build(entries, Files(args.copies))
    args.out.write_text(json.dumps(catalog, sort_keys=True, indent=1) + "\n")
    names = len(catalog["aliases"])
    print(f"wrote {args.out}: {len(catalog['models'])} models, {names} names")


if __name__ == "__main__":
    main()

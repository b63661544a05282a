"""guard's catalog of Hub architectures (schemas/catalog/) against the parameter counts their publishers state.

Each entry's published figure comes from a text named in its `params_source` (a model card, a README table, or the
count keras-hub records for the checkpoint it loads), never from the config. Published figures are rounded or
truncated, so guard's count (guard/memory/params.py, from the config alone) must lie within one unit of the last
digit quoted; an entry whose figure is a size class or disagrees with its own config carries a `params_note` saying
so, and is held to 8 % (a wrong family, e.g. a tied embedding counted twice, is off by more).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT
from guard.job import model_catalog, model_ref
from guard.job.hf_config import HfConfigError, from_dict
from guard.memory.params import model_param_count

ENTRIES = model_catalog.entries()
CHECKED = {name: e for name, e in ENTRIES.items() if e["params"] is not None}


def _count(entry: dict) -> int | None:
    try:
        return model_param_count(from_dict(entry["config"]))
    except HfConfigError:
        return None  # a family guard refuses by name (multimodal, MLA, gpt-oss, hybrids)


def _unit(entry: dict) -> float:
    """One unit of the last quoted digit, relative: params_tolerance is recorded as half of it."""
    return 2 * (entry["params_tolerance"] or 0)


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_parameter_count_matches_the_published_figure(name):
    entry = CHECKED[name]
    got = _count(entry)
    if got is None:
        pytest.skip(f"{name}: a family guard refuses by name")
    published = entry["params"]
    off = abs(got - published) / published
    if entry.get("params_note"):
        assert off <= 0.08, (name, got, published, entry["params_note"])
    else:
        assert off <= _unit(entry) or got == published, (name, got, published, entry["params_source"])


def test_the_catalog_is_wide_and_every_entry_has_a_source():
    names = json.loads((ROOT / "schemas" / "catalog" / "catalog.json").read_text())["aliases"]
    assert len(names) >= 100 and len(ENTRIES) >= 50
    assert all(e["source"].startswith("https://") or "@" in e["source"] or "model_preset" in e["source"]
               for e in ENTRIES.values())
    assert all(e["params_source"] for e in ENTRIES.values())
    families = {e["config"].get("model_type") for e in ENTRIES.values()}
    # the families the issue names, as their configs spell them
    assert {"llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral", "gemma2", "phi3", "gpt_oss",
            "deepseek_v3", "olmo2", "internlm2", "baichuan"} <= families


def test_most_published_counts_are_met_exactly_enough():
    """Not a pass for a loose check: most entries must meet their figure to its last digit, unnoted."""
    priced = {n: e for n, e in CHECKED.items() if _count(e) is not None}
    exact = [n for n, e in priced.items() if not e.get("params_note")]
    assert len(exact) >= 0.6 * len(priced), f"only {len(exact)} of {len(priced)} entries met without a note"


def test_every_name_resolves_offline_to_its_entry_or_a_refusal_by_family():
    for alias, canonical in json.loads((ROOT / "schemas" / "catalog" / "catalog.json").read_text())["aliases"].items():
        try:
            arch, how = model_ref.resolve(alias, offline=True)
        except HfConfigError as err:
            assert "not priced by guard" in str(err) or "multi-latent" in str(err), err
            continue
        assert canonical in how, (alias, how)


def test_the_build_is_reproducible_from_the_sources(tmp_path):
    """The build script needs the config copies (fetched, never committed): where this machine has them,
    rebuilding gives the committed catalog byte for byte."""
    copies = ROOT.parent / "catalog_copies"
    if not copies.is_dir():
        pytest.skip("no config copies beside the checkout (scripts/build_model_catalog.py fetches them)")
    out = tmp_path / "catalog.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_model_catalog.py"), "--copies", str(copies),
                           "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == (ROOT / "schemas" / "catalog" / "catalog.json").read_text()

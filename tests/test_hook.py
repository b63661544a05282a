"""The pre-commit hook: its file pattern, and the real `pre-commit` tool running it on a git repository."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

BAD = '{\n  "train_batch_size": 8,\n  "fp16": {"enabled": true},\n  "bf16": {"enabled": true}\n}\n'
GOOD = '{\n  "train_micro_batch_size_per_gpu": 4,\n  "gradient_clipping": 1.0,\n  "bf16": {"enabled": true}\n}\n'


def _hook() -> dict:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    return next(h for h in hooks if h["id"] == "guard-deepspeed")


@pytest.mark.parametrize("path", ["ds_config.json", "configs/ds_config_zero3.json", "configs/zero2.json",
                                  "deepspeed_config.yaml", "train/deepspeed.json", "ds_z3.hjson"])
def test_hook_pattern_matches_deepspeed_configs(path):
    assert re.search(_hook()["files"], path)


@pytest.mark.parametrize("path", ["train.py", "package.json", "configs/model.yaml", "tsconfig.json"])
def test_hook_pattern_skips_other_files(path):
    assert not re.search(_hook()["files"], path)


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.slow
def test_pre_commit_runs_the_hook(tmp_path):
    pre_commit = shutil.which("pre-commit") or str(Path(sys.executable).with_name("pre-commit"))
    if not Path(pre_commit).exists():
        pytest.skip("pre-commit is not installed (pip install -e '.[test]')")
    try:
        rev = _git("rev-parse", "HEAD", cwd=ROOT)
    except subprocess.CalledProcessError:
        pytest.skip("the checkout has no commit for pre-commit to install")
    repo = tmp_path / "user-repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {ROOT}\n    rev: {rev}\n    hooks:\n      - id: guard-deepspeed\n")
    (repo / "ds_config.json").write_text(BAD)
    (repo / "ds_config_good.json").write_text(GOOD)
    (repo / "train.py").write_text("print('not a config')\n")
    _git("add", ".", cwd=repo)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def run(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run([pre_commit, "run", "--files", *files], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=600)

    bad = run("ds_config.json", "train.py")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "ds_config.json:4:12: DS401" in bad.stdout
    good = run("ds_config_good.json", "train.py")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout

"""The hook manifest judged by the real `pre-commit` tool, and a `pre-commit run --all-files` over a repository.

tests/test_hook.py runs the hook with `--files`. Here pre-commit itself validates the manifest,
picks the files from a whole repository with the hook's `files` pattern (`--all-files`), fails
on the bad config and passes once it is fixed; with concurrency off, guard is called once, on
exactly the files the pattern selects.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

# "stagee" is on line 6, indented by 4 spaces: column 5.
BAD = ('{\n  "train_micro_batch_size_per_gpu": 4,\n  "gradient_clipping": 1.0,\n  "zero_optimization": {\n'
       '    "stage": 2,\n    "stagee": 1\n  }\n}\n')
GOOD = '{\n  "train_micro_batch_size_per_gpu": 4,\n  "gradient_clipping": 1.0,\n  "zero_optimization": {"stage": 2}\n}\n'
NOT_CONFIGS = {"package.json": '{"name": "x", "version": "1.0.0"}\n', "train.py": "print('hi')\n",
               "configs/model.yaml": "hidden_size: 1024\nnum_layers: 2\n"}


def _pre_commit() -> str:
    exe = shutil.which("pre-commit") or str(Path(sys.executable).with_name("pre-commit"))
    if not Path(exe).exists():
        pytest.skip("pre-commit is not installed (pip install -e '.[test]')")
    return exe


def test_pre_commit_accepts_the_manifest():
    result = subprocess.run([_pre_commit(), "validate-manifest", str(ROOT / ".pre-commit-hooks.yaml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.slow
def test_pre_commit_run_all_files(tmp_path):
    pre_commit = _pre_commit()
    try:
        rev = _git("rev-parse", "HEAD", cwd=ROOT)
    except (subprocess.CalledProcessError, FileNotFoundError):
        pytest.skip("the checkout has no commit (or no git): pre-commit installs a hook repo at a commit")
    repo = tmp_path / "user-repo"
    (repo / "configs").mkdir(parents=True)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PRE_COMMIT_NO_CONCURRENCY": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    _git("init", "-q", cwd=repo)
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {ROOT}\n    rev: {rev}\n    hooks:\n      - id: guard-deepspeed\n"
        "        args: [--isolated]\n        verbose: true\n")
    (repo / "ds_config.json").write_text(BAD)
    (repo / "configs" / "zero2.json").write_text(GOOD)
    for name, text in NOT_CONFIGS.items():
        (repo / name).write_text(text)
    _git("add", ".", cwd=repo)
    subprocess.run(["git", "commit", "-q", "-m", "configs"], cwd=repo, env=env, check=True)

    def run() -> subprocess.CompletedProcess:
        return subprocess.run([pre_commit, "run", "--all-files"], cwd=repo, env=env, capture_output=True,
                              text=True, timeout=600)

    bad = run()
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "ds_config.json:6:5: DS101" in bad.stdout, bad.stdout
    for name in NOT_CONFIGS:
        assert name not in bad.stdout, bad.stdout
    assert "configs/zero2.json" not in bad.stdout  # clean: no finding printed for it

    (repo / "ds_config.json").write_text(GOOD)
    _git("add", ".", cwd=repo)
    good = run()
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout and "All checks passed (2 files)" in good.stdout, good.stdout

"""#SBATCH directives of a batch script, and the SLURM_* variables the job sees because of them."""

from __future__ import annotations

import re

from guard.shell.located import LText
from guard.shell.model import Var

SBATCH = re.compile(r"^#SBATCH\s+(.*)$")


class Slurm:
    """#SBATCH handling for the Interpreter (fills its script.sbatch and vars)."""

    def _read_sbatch(self, text: str | LText, path: str) -> None:
        """The directives at the top of the script: sbatch stops reading them at the first command. `text` may be
        a heredoc (an LText): its lines keep the file's line numbers."""
        first = text.first[0] if isinstance(text, LText) and text.first is not None else 1
        for line_no, line in enumerate(str(getattr(text, "text", text)).splitlines(), first):
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                break
            match = SBATCH.match(stripped)
            if match:
                self._sbatch(match.group(1), line_no, line, path)

    def _slurm_environment(self, path: str) -> None:
        """The SLURM_* variables a batch job sees, from its #SBATCH directives (unless preset)."""
        given = {key: value for key, value in self.script.sbatch}
        nodes = given.get("--nodes") or given.get("-N")
        gres = given.get("--gres")
        gpus = given.get("--gpus-per-node")
        if gpus is None and gres is not None:
            match = re.search(r"gpu(?::[\w.-]+)?:(\d+)", gres.text)
            if match:
                gpus = gres.slice(match.start(1), match.end(1))
        tasks_per_node = given.get("--ntasks-per-node")
        tasks = given.get("--ntasks") or given.get("-n")
        derived = {"SLURM_NNODES": nodes, "SLURM_JOB_NUM_NODES": nodes, "SLURM_GPUS_ON_NODE": gpus,
                   "SLURM_GPUS_PER_NODE": gpus, "SLURM_NTASKS_PER_NODE": tasks_per_node,
                   "SLURM_NTASKS": tasks}
        if tasks is None and nodes is not None and tasks_per_node is not None and \
                nodes.text.isdigit() and tasks_per_node.text.isdigit():
            derived["SLURM_NTASKS"] = LText.plain(str(int(nodes.text) * int(tasks_per_node.text)),
                                                  nodes.first, path)
        for name, value in derived.items():
            if value is not None and name not in self.vars:
                self.vars[name] = Var(value, value.span())

    def _sbatch(self, text: str, line_no: int, line: str, path: str) -> None:
        col = line.find(text) + 1
        words = text.split("#")[0].split()
        i = 0
        while i < len(words):
            word = words[i]
            start = line.find(word, col - 1) + 1
            if word.startswith("-"):
                key, eq, value = word.partition("=")
                if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                    value = words[i + 1]
                    i += 1
                vstart = line.find(value, start - 1 + len(key)) + 1 if value else start
                self.script.sbatch.append((key, LText.at(value, line_no, vstart, path)))
            i += 1

"""The DeepSpeed release a config is judged for, and the vendored schema that stands for it."""

from __future__ import annotations

from dataclasses import dataclass

from guard import installed, resources

DEFAULT_HELP = ("judge the config for this DeepSpeed release (default: the installed DeepSpeed's version, "
                "read from its package metadata; without DeepSpeed installed, the newest vendored schema)")


@dataclass(frozen=True)
class Target:
    version_text: str  # the release judged for, as given or installed
    version: tuple[int, ...]
    schema_version: str  # the vendored schema that stands for it
    source: str  # why this release: "--deepspeed-version", "installed", "newest vendored"

    def describe(self) -> str:
        why = {"installed": "the installed DeepSpeed", "newest vendored": "DeepSpeed is not installed: the "
               "newest vendored schema"}.get(self.source, self.source)
        schema = "" if self.schema_version == self.version_text else f", judged with the {self.schema_version} schema"
        return f"DeepSpeed {self.version_text} ({why}{schema})"


def installed_version() -> str | None:
    """The installed DeepSpeed's version (guard/installed.py: read without importing it)."""
    return installed.version("deepspeed")


def resolve(explicit: str | None) -> Target:
    """--deepspeed-version (or [tool.guard] deepspeed-version), else the installed release, else the newest."""
    text, source = (explicit, "--deepspeed-version") if explicit else (installed_version(), "installed")
    if not text:
        text, source = resources.deepspeed_versions()[-1], "newest vendored"
    text = text.strip().lstrip("v").split("+")[0]  # 0.19.8+cu124 from a local build is 0.19.8
    version = resources.version_tuple(text)
    return Target(text, version, resources.nearest_deepspeed_version(version) or text, source)

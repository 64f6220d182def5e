"""Embedded default specs, so the demo needs no file and no cloud account."""

from importlib import resources
from pathlib import Path


def default_spec_path(name: str = "local-cpu.yaml") -> Path:
    return Path(str(resources.files(__package__).joinpath(name)))

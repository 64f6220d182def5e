"""The hostile-input corpus: each case feeds fleetforge what an attacker or a careless operator
would, and asserts the exact exit code and that nothing was created outside the case's output.

A Jinja payload names a canary file through ``lookup('pipe', 'touch CANARY')``; the case fails if
the canary exists afterwards, which is the proof that no value was ever templated.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetforge.cli import main


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) when what runs inside blocks, e.g. on a FIFO opened for
    reading. Around the command only: what a case writes first (results fsync every record) is as
    slow as the disk, which the test hosts' installs keep busy."""

    def expired(*_: object) -> None:
        raise TimeoutError(f"did not return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Canary:
    path: Path

    @property
    def pipe(self) -> str:
        """A Jinja expression that creates the canary if anything renders it."""
        return "{{ lookup('pipe', 'touch " + str(self.path) + "') }}"

    @property
    def block(self) -> str:
        return "{% set x = lookup('pipe', 'touch " + str(self.path) + "') %}"

    def assert_untouched(self) -> None:
        assert not self.path.exists(), f"a value was templated: {self.path} was created"


@pytest.fixture
def canary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Canary]:
    c = Canary(tmp_path_factory.mktemp("canary") / "pwned")
    yield c
    c.assert_untouched()


def tree(root: Path) -> set[str]:
    """Every path under root, relative, so a case can assert which files a command created."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@dataclass
class CliRun:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Run the CLI in-process with tmp_path as the working directory; returns a CliRun."""
    monkeypatch.chdir(tmp_path)

    def run(*argv: str) -> CliRun:
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err, captured.err
        return CliRun(code, captured.out, captured.err)

    return run


@pytest.fixture(autouse=True)
def _no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setitem(os.environ, "COLUMNS", "200")

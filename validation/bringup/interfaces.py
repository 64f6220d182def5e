"""What the loop needs from the world, as protocols: the real implementations are in adapters.py,
the tests' fakes stand behind the same ones."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from validation.actions.model import RejectedNode
from validation.gate import Reason


@dataclass
class BurnIn:
    """One burn-in over (part of) the inventory: what came home and what went wrong outside it."""

    results_dir: Path  # <host>.jsonl of every host burned in (and the kept hosts' copies)
    host_reasons: dict[str, list[Reason]] = field(default_factory=dict)  # unreachable, failed task
    summary: Mapping[str, Any] = field(default_factory=dict)  # for the record (fleet-run.json)
    problem: str | None = None  # the run as a whole went wrong


class FleetRunner(Protocol):
    def __call__(self, inventory: Path, out_dir: Path, limit: tuple[str, ...], time_left_s: float) -> BurnIn:
        """Burn in `limit` (every inventory host when empty) into `out_dir`/results, keeping the
        files already there for the other hosts; a run still going after `time_left_s` is cut short
        and reports a problem."""
        ...


@dataclass(frozen=True)
class InventoryView:
    """One reading of the inventory: hosts and their vars from the same listing."""

    hosts: list[str]  # what it lists now (the group re-read: replacements appear here)
    hostvars: Mapping[str, Mapping[str, Any]]  # merged vars: the identifiers the replace action needs


class InventoryReader(Protocol):
    path: Path

    def read(self) -> InventoryView:
        """The inventory as it is now; HostListError when it cannot be read."""
        ...


@dataclass(frozen=True)
class ReplaceOutcome:
    node: str
    ok: bool
    detail: str


class Replacer(Protocol):
    name: str
    # True when a replacement comes back under the same inventory name (GCP recreate): the loop
    # then waits for that name to show a new machine instead of waiting for a new name.
    keeps_names: bool
    # The host var naming the machine behind an inventory name (an instance id), which tells a
    # replacement from the node it replaces under one name; None: names alone tell them apart.
    identity_var: str | None

    def check(self, nodes: Sequence[RejectedNode]) -> None:
        """Raise (an ActionError) before anything is changed when a node cannot be replaced."""
        ...

    def replace(self, nodes: Sequence[RejectedNode]) -> list[ReplaceOutcome]:
        """Replace every node; a failure is an outcome, the other nodes are still replaced."""
        ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

"""`<out>/bringup.json`: the loop's record, rewritten whole (write_atomic) after every step, so an
interruption leaves the last step's record and `--resume` continues from it.

The fleet's state (which results each kept node is judged on, the slot lineage of replacements)
changes only when a round finishes: a round that did not finish is redone from its burn-in, except
that replacements it already made are never made again (it resumes at the wait for them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.atomic import write_atomic
from validation.gate import Reason

RECORD_NAME = "bringup.json"
SCHEMA = 1
# Round phases, in order. `done`: the round finished and the state above holds its outcome.
PHASES = ("burn-in", "replaced", "done")
# How a bring-up ended (None while running).
STATUSES = ("ready", "budget-spent", "action-failed")


class RecordError(ValueError):
    """bringup.json cannot be resumed from (missing, not ours, another fleet)."""

    def __init__(self, message: str, exit_name: str = "DATA") -> None:
        super().__init__(message)
        self.exit_name = exit_name


@dataclass
class BringupRecord:
    fleet: str
    inventory: str
    status: str | None = None
    stop_reason: str | None = None
    elapsed_s: float = 0.0
    replacements: int = 0
    # host -> its results file (in the round that burned it in); a replaced host is dropped.
    results: dict[str, str] = field(default_factory=dict)
    # host -> what its burn-in found outside the results (unreachable, failed task): judged again.
    host_reasons: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # host -> the slot it fills: the first round's host name whose line of replacements it continues.
    slots: dict[str, str] = field(default_factory=dict)
    # slot -> every replacement made in it: round, node, reason keys.
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "fleet": self.fleet,
            "inventory": self.inventory,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "elapsed_s": round(self.elapsed_s, 3),
            "replacements": self.replacements,
            "results": dict(self.results),
            "host_reasons": dict(self.host_reasons),
            "slots": dict(self.slots),
            "history": dict(self.history),
            "rounds": list(self.rounds),
        }

    def save(self, path: Path) -> None:
        write_atomic(path, json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")

    def reasons_of(self, host: str) -> list[Reason]:
        return [Reason(**r) for r in self.host_reasons.get(host, [])]

    @classmethod
    def load(cls, path: Path) -> BringupRecord:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RecordError(
                f"{path}: no record to resume from (run without --resume first)", "NO_INPUT"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RecordError(f"{path}: cannot be read ({exc.__class__.__name__})") from None
        except json.JSONDecodeError as exc:
            raise RecordError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise RecordError(f"{path}: not a bring-up record of schema {SCHEMA}")
        try:
            record = cls(
                fleet=_text(doc, "fleet"),
                inventory=_text(doc, "inventory"),
                status=doc.get("status"),
                stop_reason=doc.get("stop_reason"),
                elapsed_s=float(doc.get("elapsed_s", 0.0)),
                replacements=int(doc.get("replacements", 0)),
                results={str(k): str(v) for k, v in _map(doc, "results").items()},
                host_reasons={str(k): list(v) for k, v in _map(doc, "host_reasons").items()},
                slots={str(k): str(v) for k, v in _map(doc, "slots").items()},
                history={str(k): list(v) for k, v in _map(doc, "history").items()},
                rounds=[r for r in doc.get("rounds", []) if isinstance(r, dict)],
            )
            for host in record.host_reasons:
                record.reasons_of(host)
        except (TypeError, ValueError) as exc:
            raise RecordError(f"{path}: malformed record ({exc})") from None
        if record.status is not None and record.status not in STATUSES:
            raise RecordError(f"{path}: status {record.status!r}; allowed: {', '.join(STATUSES)}")
        for r in record.rounds:
            if r.get("phase") not in PHASES:
                raise RecordError(f"{path}: round {r.get('round')}: phase {r.get('phase')!r}")
        return record


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def _map(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{key} must be an object")
    return value

"""`<out>/bringup.json`: the loop's record, rewritten whole (write_atomic) after every step, so an
interruption leaves the last step's record and `--resume` continues from it.

The fleet's state (which results each kept node is judged on, the slot lineage of replacements)
changes only when a round finishes: a round that did not finish is redone from its burn-in, except
that replacements it already made are never made again (it resumes at the wait for them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from fleet.atomic import write_atomic
from validation.gate import Reason

RECORD_NAME = "bringup.json"
SCHEMA = 1
# Round phases, in order. `replacing`: the cloud is being asked (the nodes are in the round's
# `replacing`); `done`: the round finished and the state above holds its outcome.
PHASES = ("burn-in", "replacing", "replaced", "done")
# How a bring-up ended (None while running). `waiting`: replacements asked for have not joined yet.
STATUSES = ("ready", "budget-spent", "action-failed", "waiting")


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
    # Slots whose replacement was asked for and has not joined the inventory yet, oldest first.
    pending: list[str] = field(default_factory=list)
    # host -> the instance (the replace action's identity var) its results were measured on.
    instances: dict[str, str] = field(default_factory=dict)
    # host -> the instance replaced under that name, until the name shows another one.
    retired: dict[str, str] = field(default_factory=dict)
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
            "pending": list(self.pending),
            "instances": dict(self.instances),
            "retired": dict(self.retired),
            "rounds": list(self.rounds),
        }

    def save(self, path: Path) -> None:
        write_atomic(path, json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")

    def reasons_of(self, host: str) -> list[Reason]:
        return [Reason(**r) for r in self.host_reasons.get(host, [])]

    @classmethod
    def load(cls, path: Path) -> BringupRecord:
        """The record at path, every field checked: a damaged or edited record is a RecordError
        naming the field, never a resume that starts over, skips a step or reads files elsewhere."""
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
        except RecursionError:
            raise RecordError(f"{path}: nested too deeply to be a bring-up record") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise RecordError(f"{path}: not a bring-up record of schema {SCHEMA}")
        try:
            _Record.model_validate(doc)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the record"
            raise RecordError(f"{path}: {where}: {first['msg']}") from None
        record = cls(
            fleet=doc["fleet"],
            inventory=doc["inventory"],
            status=doc.get("status"),
            stop_reason=doc.get("stop_reason"),
            elapsed_s=float(doc.get("elapsed_s", 0.0)),
            replacements=doc.get("replacements", 0),
            results=dict(doc.get("results", {})),
            host_reasons=dict(doc.get("host_reasons", {})),
            slots=dict(doc.get("slots", {})),
            history=dict(doc.get("history", {})),
            pending=list(doc.get("pending", [])),
            instances=dict(doc.get("instances", {})),
            retired=dict(doc.get("retired", {})),
            rounds=list(doc.get("rounds", [])),
        )
        for host, file in record.results.items():
            # Only what the loop writes: <out>/round-N/results/<host>.jsonl. Read under this record's
            # own folder whatever folder the path names (a copied bring-up names the one it was
            # copied from; an edited one could name any folder of that shape).
            written = Path(file)
            if not (
                written.name == f"{host}.jsonl"
                and written.parent.name == "results"
                and re.fullmatch(r"round-[1-9][0-9]*", written.parent.parent.name)
            ):
                raise RecordError(f"{path}: results.{host}: {file} is not a results file of this bring-up")
            record.results[host] = str(path.parent / written.parent.parent.name / "results" / written.name)
        for i, r in enumerate(record.rounds, start=1):
            if r["round"] != i:
                raise RecordError(f"{path}: rounds.{i - 1}.round: {r['round']}, expected {i}")
            if r["phase"] == "replacing" and not r.get("replacing"):
                raise RecordError(f"{path}: rounds.{i - 1}: phase replacing without the nodes asked for")
        return record


_Text = Annotated[str, Strict()]
_Keys = list[_Text]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Asked(_Open):
    node: _Text
    slot: _Text
    keys: _Keys
    reasons: list[_Text] = []
    instance: _Text | None = None


class _Replaced(_Asked):
    ok: Annotated[bool, Strict()]


class _ReasonDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule: _Text
    check: _Text | None
    metric: _Text | None
    measured: float | _Text | None
    expected: float | _Text | None
    message: _Text


class _Noted(_Open):
    """A node the round left out or burns in again, the instance it showed, and why."""

    node: _Text
    instance: _Text | None = None
    why: _Text


class _Round(_Open):
    round: Annotated[int, Strict(), Field(ge=1)]
    phase: Literal[PHASES]  # type: ignore[valid-type]
    inventory: list[_Text] = []
    kept: list[_Text] = []
    burned: list[_Text] = []
    replacing: list[_Asked] = []
    replaced: list[_Replaced] = []
    # What the loop reads back on resume: each typed, so damage is a field named, not a crash.
    left_out: list[_Noted] = []
    retry: list[_Noted] = []
    instances: dict[str, _Text] = {}
    timings_s: dict[str, Annotated[float, Field(allow_inf_nan=False)]] = {}
    host_reasons: dict[str, list[_ReasonDoc]] = {}
    measured: Annotated[bool, Strict()] = False


class _Replacement(_Open):
    round: Annotated[int, Strict(), Field(ge=1)]
    node: _Text
    keys: _Keys


class _Record(BaseModel):
    """What load() requires of the document; the record keeps the document's own dicts."""

    model_config = ConfigDict(extra="forbid")
    schema_: int = Field(alias="schema")
    fleet: _Text
    inventory: _Text
    status: Literal[STATUSES] | None = None  # type: ignore[valid-type]
    stop_reason: _Text | None = None
    elapsed_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    replacements: Annotated[int, Strict(), Field(ge=0)] = 0
    results: dict[str, _Text] = {}
    host_reasons: dict[str, list[_ReasonDoc]] = {}
    slots: dict[str, _Text] = {}
    history: dict[str, list[_Replacement]] = {}
    pending: list[_Text] = []
    instances: dict[str, _Text] = {}
    retired: dict[str, _Text] = {}
    rounds: list[_Round] = []

"""PAIRS.json: pair measurements made with any tool, for `fleetforge fabric attribute`.

    {"hosts": ["node1", "node2", ...],
     "pairs": [["node1", "node2", 41.7], ["node3", "node4", null, "timeout"], ...]}

Read strictly: busbw is a JSON number >= 0 (GB/s) or null for a pair that did not complete, with an
optional reason; a pair names two different listed hosts; a host is listed once; nothing else is
accepted. Every error is one line naming the file and the place in it (`pairs[3].busbw_gbps`).
"""

from __future__ import annotations

import json
import stat
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from fleet.text import printable
from validation.fabric.model import Pair, PairResult
from validation.gate.model import natural_key

MAX_BYTES = 64 * 2**20  # 4,096 hosts x 3 rounds is about 300 KB; anything near this is not a pairs file
_ROW_FIELDS = ("host_a", "host_b", "busbw_gbps", "reason")
_ROW_SHAPE = "[host_a, host_b, busbw_gbps] or [host_a, host_b, busbw_gbps, reason]"

HostName = Annotated[str, StringConstraints(min_length=1, max_length=255)]


class PairsFileError(Exception):
    """A pairs file that cannot be used; `no_input` when it could not be read at all (exit 66)."""

    def __init__(self, message: str, *, no_input: bool = False) -> None:
        super().__init__(message)
        self.no_input = no_input


class _Row(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    host_a: HostName
    host_b: HostName
    busbw_gbps: float | None = Field(ge=0, allow_inf_nan=False)
    reason: Annotated[str, StringConstraints(max_length=1000)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, value: Any) -> Any:
        if not isinstance(value, list) or len(value) not in (3, 4):
            raise ValueError(f"a pair is {_ROW_SHAPE}")
        return dict(zip(_ROW_FIELDS, value, strict=False))


class _PairsDoc(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    hosts: list[HostName] = Field(min_length=2)
    pairs: list[_Row]


def _where(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "top level"


def _validation_message(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "not a known key (allowed: hosts, pairs)"
    where = _where(tuple(first["loc"]))
    got = first.get("input")
    shown = "" if first["type"] in {"missing", "extra_forbidden"} else f"; got {_short(got)}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {msg}{shown}{more}"


def _short(value: Any) -> str:
    text = printable(repr(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def read_text(path: Path) -> str:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise PairsFileError(f"{printable(str(path))}: no such file", no_input=True) from None
    except OSError as exc:
        raise PairsFileError(f"{printable(str(path))}: cannot read: {exc.strerror}", no_input=True) from None
    # A FIFO or a device would block or never end: only regular files are read.
    if not stat.S_ISREG(info.st_mode):
        raise PairsFileError(f"{printable(str(path))}: not a regular file", no_input=True)
    if info.st_size > MAX_BYTES:
        raise PairsFileError(f"{printable(str(path))}: {info.st_size} bytes, more than {MAX_BYTES} allowed")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PairsFileError(f"{printable(str(path))}: cannot read: {exc.strerror}", no_input=True) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PairsFileError(f"{printable(str(path))}: not UTF-8 text (byte {exc.start})") from None


def parse_pairs(text: str, name: str = "pairs file") -> tuple[tuple[str, ...], tuple[PairResult, ...]]:
    """The hosts and pair results of a pairs document, or PairsFileError naming what is wrong."""
    label = printable(name)
    try:
        raw = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise PairsFileError(f"{label}: not JSON: nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise PairsFileError(f"{label}: not JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:  # NaN/Infinity, or an integer too long to convert
        raise PairsFileError(f"{label}: not JSON: {printable(str(exc))}") from None
    if not isinstance(raw, dict):
        raise PairsFileError(
            f"{label}: top level: must be an object with hosts and pairs; got {type(raw).__name__}"
        )
    try:
        doc = _PairsDoc.model_validate(raw)
    except ValidationError as exc:
        raise PairsFileError(f"{label}: {_validation_message(exc)}") from None
    except RecursionError:
        raise PairsFileError(f"{label}: nested too deeply") from None
    twice = sorted((h for h, n in Counter(doc.hosts).items() if n > 1), key=natural_key)
    if twice:
        raise PairsFileError(f"{label}: hosts: {_short(twice[0])} is listed more than once")
    known = set(doc.hosts)
    results: list[PairResult] = []
    for i, row in enumerate(doc.pairs):
        for field_name, host in (("host_a", row.host_a), ("host_b", row.host_b)):
            if host not in known:
                raise PairsFileError(f"{label}: pairs[{i}].{field_name}: {_short(host)} is not in hosts")
        if row.host_a == row.host_b:
            raise PairsFileError(f"{label}: pairs[{i}]: {_short(row.host_a)} is paired with itself")
        results.append(PairResult(Pair.of(row.host_a, row.host_b), row.busbw_gbps, row.reason))
    return tuple(doc.hosts), tuple(results)


def load_pairs(path: Path) -> tuple[tuple[str, ...], tuple[PairResult, ...]]:
    return parse_pairs(read_text(path), str(path))

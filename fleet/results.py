"""Burn-in result records (docs/results.md): the typed shape, a durable writer, a tolerant reader.

The writer appends one JSON line per record and fsyncs before returning, so a crash of the runner
never loses a finished check. The reader keeps every line that parses and reports the rest; a
truncated tail is never guessed at, and the checks it would have held count as missing.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import IO, Annotated, Any, Literal, get_args

from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

SCHEMA = "fleetforge.result/1"
SCHEMA_VERSION = 1
_SCHEMA_NAME = re.compile(r"fleetforge\.result/([0-9]{1,9})")
# A record is a few KiB even with per-device lists for 64 devices; a line far beyond that is not a
# record, and reading it whole would let one file exhaust the gate's memory.
MAX_LINE_BYTES = 1 << 20
Status = Literal["pass", "fail", "error", "skip"]
# Burn-in levels, shortest first: the spec, the node runner and the gate all read this one list.
Level = Literal["quick", "standard", "extended"]
LEVELS: tuple[Level, ...] = get_args(Level)
# A measured number: JSON strings and booleans are refused (pydantic would coerce "720" and true),
# and so are infinities (`1e999` parses as one); integers are numbers and stay accepted.
Number = Annotated[float, Strict(), AllowInfNan(False)]
# A metric's name (the keys of `metrics` and `per_device`): lowercase words of letters and digits
# joined by single underscores, the one shape every name of fleet/metrics.py has (the longest,
# `multinode_allreduce_busbw_gbps`, is 30 characters; no check builds a name per device or per size:
# devices are the positions of a `per_device` list). Nothing else is a metric a reader could print,
# plot or export: no markup, no control characters, no name as long as the line.
MAX_METRIC_NAME = 64
_METRIC_NAME = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
# The most metrics one record may carry. The largest a check writes is `health`'s 9 (ECC, remapped
# rows, PCIe, NVLink, temperature, XID, GPU faults, MCE counters) and the whole vocabulary is 36: 64
# leaves room for every metric fleetforge has, and some it may add, in one record. What each name
# costs the gate (statistics, a plot, a Prometheus series) is no longer open-ended: a line of 1 MiB
# holds ~80,000 short names.
MAX_RECORD_METRICS = 64
# The pydantic error type of a record that breaks the two rules above: it is no torn write (the one
# harmless cause of an unreadable line) but a writer that is not fleetforge's, so the reader refuses
# the file it is in (BadLine.refuses_file), as it does one of a newer schema.
_CONTRACT = "metric_contract"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class _Record(BaseModel):
    # Readers of this version ignore fields a later writer adds (docs/results.md).
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_: Literal["fleetforge.result/1"] = Field(default="fleetforge.result/1", alias="schema")
    run_id: str = Field(min_length=1)
    node: str = Field(min_length=1)
    sku: str = Field(min_length=1)
    level: Level
    started: str
    versions: dict[str, str] = {}

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), separators=(",", ":"), sort_keys=True)


class RunRecord(_Record):
    kind: Literal["run"] = "run"
    checks: tuple[str, ...]
    # A run narrowed by `--only` records only some checks; the gate must not read its short list as
    # the whole burn-in. Files written before this field existed read as full runs.
    partial: bool = False
    # The machine that began the run (validation/burnin/probes/host.py machine_identity): `machine_id`
    # (/etc/machine-id) or, where that is missing, `product_uuid` (DMI), and `hostname`. `--resume`
    # continues a run only on that machine. Not in `versions`: the gate holds every version key to
    # one value across the fleet. Files written before this field existed have none.
    machine: dict[str, str] = {}


class CheckRecord(_Record):
    kind: Literal["check"] = "check"
    check: str = Field(min_length=1)
    status: Status
    reason: str | None = None
    metrics: dict[str, Number] = {}
    per_device: dict[str, list[Number]] = {}
    findings: list[str] = []
    backend: str = ""
    duration_s: Number = Field(ge=0)
    error: str | None = None
    # A digest of what set this check's measuring and judging (the spec's thresholds, its options,
    # the storage path): `--resume` keeps the record only under the same. Older files have none.
    settings: str | None = None

    @field_validator("metrics", "per_device", mode="before")
    @classmethod
    def _metric_names(cls, value: Any, info: ValidationInfo) -> Any:
        # Before the numbers are validated: an absurd record is refused on its size, not walked.
        if isinstance(value, dict):
            problem = metric_names_problem(value)
            if problem is not None:
                check = info.data.get("check")
                which = f"the record of check {_shown(check)}" if isinstance(check, str) else "the record"
                raise PydanticCustomError(
                    _CONTRACT, "{which}: {problem}", {"which": which, "problem": problem}
                )
        return value

    @model_validator(mode="after")
    def _status_is_earned(self) -> CheckRecord:
        # A pass without measurements would let a broken check call a node healthy.
        if self.status == "pass" and not self.metrics:
            raise ValueError("a pass record must carry the metrics it measured")
        if self.status in {"fail", "error", "skip"} and not (self.reason or self.error):
            raise ValueError(f"a {self.status} record must say why (reason or error)")
        return self


Record = RunRecord | CheckRecord


def is_metric_name(name: object) -> bool:
    """`name` has the shape of a metric's name (see _METRIC_NAME); whether it is a known one is
    fleet/metrics.py's to say."""
    return isinstance(name, str) and len(name) <= MAX_METRIC_NAME and _METRIC_NAME.fullmatch(name) is not None


def metric_names_problem(metrics: Mapping[Any, object]) -> str | None:
    """Why the keys of one record's `metrics` (or `per_device`) break the results contract, or None."""
    if len(metrics) > MAX_RECORD_METRICS:
        return f"{len(metrics)} metrics, more than the {MAX_RECORD_METRICS} a record may carry"
    for name in metrics:
        if not is_metric_name(name):
            return (
                f"metric name {_shown(name)} is not a metric name (lowercase letters, digits and single "
                f"underscores, starting with a letter, at most {MAX_METRIC_NAME} characters)"
            )
    return None


class ResultsWriter:
    """Appends records to one JSONL file, flushed and fsynced per record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = path.open("a", encoding="utf-8")

    def append(self, record: Record) -> None:
        self._fh.write(record.to_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class BadLine:
    """A line (or, with line 0, the whole entry) that could not be read.

    `refuses_file` marks a problem that makes the file as a whole untrustworthy (a newer schema,
    a record whose metrics break the results contract, an entry that is not a regular file): the
    gate rejects the node even if its run looks complete.
    """

    path: Path
    line: int
    problem: str
    refuses_file: bool = False

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


@dataclass
class ResultFile:
    """Everything readable in one results file, plus what was not."""

    path: Path
    runs: list[RunRecord] = field(default_factory=list)
    checks: list[CheckRecord] = field(default_factory=list)
    bad_lines: list[BadLine] = field(default_factory=list)


class NewerSchemaError(ValueError):
    """The line was written by a newer fleetforge: this reader refuses the file (docs/results.md)."""


class MetricContractError(ValueError):
    """The record's metrics break the results contract (a name that is no metric name, more metrics
    than a record may carry): no fleetforge wrote it, so this reader refuses the file."""


def _no_constant(name: str) -> float:
    # json.loads would turn NaN / Infinity / -Infinity (not JSON) into floats; a record holding one
    # measured nothing, so the line is unreadable.
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # json's own dict keeps the last of two equal keys: "status": "fail", "status": "pass" would
    # read as a pass. A line that says two things is no record.
    obj = dict(pairs)
    if len(obj) != len(pairs):  # the usual case costs one comparison; find the key only when it fails
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {key!r} appears twice")
            seen.add(key)
    return obj


# One instance: json.loads would build one per line.
_DECODER = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=_unique_keys)


def parse_line(text: str | bytes) -> Record:
    """One JSONL line to a record; raises ValueError with a short reason, NewerSchemaError for a newer schema."""
    if len(text) > MAX_LINE_BYTES:
        raise ValueError(f"line of {len(text)} bytes is longer than {MAX_LINE_BYTES}; not a record")
    try:
        data = _DECODER.decode(text.decode("utf-8") if isinstance(text, bytes) else text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg}); truncated write?") from None
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except RecursionError:
        raise ValueError("nested too deeply to be a record") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    schema = data.get("schema")
    if schema != SCHEMA:
        _refuse_schema(schema)
    kind = data.get("kind")
    model: type[RunRecord] | type[CheckRecord]
    if kind == "run":
        model = RunRecord
    elif kind == "check":
        model = CheckRecord
    else:
        raise ValueError(f"kind {_shown(kind)} is not 'run' or 'check'")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        broken = [e for e in errors if e["type"] == _CONTRACT]
        first = (broken or errors)[0]
        where = ".".join(str(p) for p in first["loc"]) or kind
        raise (MetricContractError if broken else ValueError)(f"{where}: {first['msg']}") from None
    except RecursionError:
        raise ValueError("nested too deeply to be a record") from None


def _shown(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _refuse_schema(schema: object) -> None:
    found = _SCHEMA_NAME.fullmatch(schema) if isinstance(schema, str) else None
    if found is not None and int(found.group(1)) > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"schema {schema!r} was written by a newer fleetforge; this one reads {SCHEMA!r}: "
            f"upgrade fleetforge to judge this file"
        )
    if schema is None:
        raise ValueError(f'not a fleetforge record: it has no "schema" field (fleetforge writes {SCHEMA!r})')
    raise ValueError(f"not a fleetforge record: schema {_shown(schema)} is not {SCHEMA!r}")


def read_results(path: Path) -> ResultFile:
    """Read one JSONL file; unreadable lines, and an entry that is no readable file, are collected in
    `bad_lines`, never raised.

    The entry is opened non-blocking and checked with fstat before anything is read, so a FIFO
    named *.jsonl is reported instead of blocking the gate forever, and a folder, a device or a
    dangling symlink is reported the same way.
    """
    result = ResultFile(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        result.bad_lines.append(BadLine(path, 0, _open_problem(path, exc), refuses_file=True))
        return result
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            problem = f"is {_kind_of(mode)}, not a results file"
            result.bad_lines.append(BadLine(path, 0, problem, refuses_file=True))
            os.close(fd)
            return result
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        try:
            _read_records(fh, result)
        except OSError as exc:
            # Failed midway (EIO, a file truncated under us): what was read stays, and the file as a
            # whole is refused, since its rest is unknown.
            problem = f"cannot be read ({exc.strerror or exc.__class__.__name__})"
            result.bad_lines.append(BadLine(path, 0, problem, refuses_file=True))
    return result


def _read_records(fh: IO[bytes], result: ResultFile) -> None:
    path = result.path
    for number, raw in _lines(fh):
        if raw is None:
            problem = f"line longer than {MAX_LINE_BYTES} bytes; not a record"
            result.bad_lines.append(BadLine(path, number, problem))
            continue
        text = raw.strip()
        if not text:
            continue
        try:
            record = parse_line(text)
        except (NewerSchemaError, MetricContractError) as exc:
            result.bad_lines.append(BadLine(path, number, str(exc), refuses_file=True))
            continue
        except ValueError as exc:
            result.bad_lines.append(BadLine(path, number, str(exc)))
            continue
        if isinstance(record, RunRecord):
            result.runs.append(record)
        else:
            result.checks.append(record)


# Files up to this size are read in one call and split (the common case, and the fast one); larger
# ones are streamed line by line so an absurd file never has to fit in memory.
_READ_WHOLE_BYTES = 16 << 20


def _lines(fh: IO[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """Numbered lines; None for a line over MAX_LINE_BYTES, which is skipped without being held."""
    size = os.fstat(fh.fileno()).st_size
    if size <= _READ_WHOLE_BYTES:
        data = fh.read(size + 1)
        if len(data) <= size:  # it did not grow while being read
            for number, raw in enumerate(data.split(b"\n"), start=1):
                yield number, (raw if len(raw) <= MAX_LINE_BYTES else None)
            return
        fh.seek(0)
    number = 0
    while True:
        raw = fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield number, raw
            continue
        while raw and not raw.endswith(b"\n"):  # drain the rest of the oversized line
            raw = fh.readline(MAX_LINE_BYTES)
        yield number, None


def _open_problem(path: Path, exc: OSError) -> str:
    if path.is_symlink() and not path.exists():
        return f"is a dangling symlink (to {os.readlink(path)!r}), not a results file"
    return f"cannot be opened ({exc.strerror or exc.__class__.__name__})"


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def iter_result_paths(inputs: Iterable[Path]) -> Iterator[Path]:
    """Expand files and folders (recursively, *.jsonl) in a stable order.

    Every entry named *.jsonl is yielded, whatever it is (a folder, a FIFO, a dangling symlink):
    read_results reports it as unreadable rather than the gate passing over it in silence. Inside a
    folder given, folders named *.prev are passed over: they hold what a rerun replaced (a fleet
    run's results.prev), and a host missing from the new run must not be judged on its old one. A
    file or folder named outright is read whatever its name.
    """
    for item in inputs:
        if item.is_dir():
            yield from sorted(
                p
                for p in item.rglob("*.jsonl")
                if not any(part.endswith(".prev") for part in p.relative_to(item).parts[:-1])
            )
        else:
            yield item


# ------------------------------------------------------------------ times and node names


def stamp_after_latest(results: ResultFile, stamp: str | None = None) -> str:
    """`stamp` (now when None), or just after the latest record of `results` (a node's file, as
    read) where that is not later.

    What the controller appends to a node's fetched file must be the record the gate counts (its
    latest): a node's clock may run behind, or ahead, and a node could date a record it forged in
    the future to outrank the controller's figure.
    """
    stamps = [parsed_instant(r.started) for r in (*results.runs, *results.checks)]
    latest = max((s for s in stamps if s is not None), default=None)
    wanted = parsed_instant(stamp) if stamp is not None else datetime.now(UTC)
    if wanted is not None and (latest is None or wanted > latest):
        return stamp if stamp is not None else wanted.isoformat(timespec="milliseconds")
    later = (latest or datetime.now(UTC)) + timedelta(milliseconds=1)
    return later.isoformat(timespec="milliseconds")


def controller_record(results: ResultFile, **fields: Any) -> CheckRecord:
    """A check record the controller appends to a node's fetched file: of its latest run (node,
    SKU, level, run id) and dated after every record in it (stamp_after_latest). `fields` are the
    record's own: check, status, metrics, reason, duration_s, ..."""
    run = results.runs[-1]
    return CheckRecord(
        run_id=run.run_id,
        node=run.node,
        sku=run.sku,
        level=run.level,
        started=stamp_after_latest(results),
        **fields,
    )


# An unparsable start time sorts as the oldest, so it never wins "latest".
OLDEST = datetime.min.replace(tzinfo=UTC)


def instant(stamp: str) -> datetime:
    """An ISO 8601 time as an aware instant; an unparsable one sorts as the oldest."""
    parsed = parsed_instant(stamp)
    return OLDEST if parsed is None else parsed


def parsed_instant(stamp: str) -> datetime | None:
    """An ISO 8601 time as an aware instant, or None when it is not one."""
    # No ISO 8601 time is this long; refusing it up front keeps huge strings out of the cache.
    return None if len(stamp) > 64 else _parse_instant(stamp)


@lru_cache(maxsize=65536)
def _parse_instant(stamp: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def node_from_path(path: str) -> str:
    """The runner writes `<out>/<node>.jsonl`: the file's name, less `.jsonl`, is its node.

    Only `/` separates folders: a backslash is an ordinary character in a POSIX file (and node) name.
    """
    name = path.rsplit("/", 1)[-1]
    return name[: -len(".jsonl")] if name.endswith(".jsonl") else name

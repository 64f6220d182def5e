"""The fleet run's fabric stage: pairwise all-reduce rounds over the hosts that burned in, then
attribution (validation/fabric/) of which host or link is slow, handed to the gate.

Each round is one ansible-runner play of playbooks/fabric-round.yml, limited to the round's hosts,
with `burnin_fabric_round` mapping each host to its pair (members, rendezvous host, port, id): every
pair runs the node-side all-reduce with its two hosts only, all pairs at once. The play's
"Read the pair's record" task returns the record the pair wrote; a pair whose hosts left no passing
record (timeout, rendezvous error, host unreachable mid-stage) is a failed pair, attributed like a
slow one, never a reject of every member.

On InfiniBand / RoCE fleets with perftest, each pair then measures ib_write_bw between its HCAs
(validation/burnin/pairbw.py, one side serving, the other connecting); "Read the pair's ib_write_bw
record" returns that record. Those pairs are attributed on their own, like the all-reduce's: a host
bad with every partner is guilty, a pair bad only together a suspect link. A pair whose hosts lack
perftest or RDMA devices is a note, never a reject; a pair whose all-reduce step already failed on a
host is left to the all-reduce's attribution, so one fault is not counted twice. ib_write_bw needs
no PyTorch: where the step runs, a host the burn-in found without PyTorch is paired all the same,
and its pairs measure ib_write_bw only (the round tells the role so per pair: `allreduce` false);
those pairs' all-reduce is a note, and the all-reduce attribution judges the other pairs only.

A round whose play did not run (no events came back: the run's deadline had passed, ansible-runner
could not start it; or none of its hosts reached the read of its pair's record: the play was stopped
first) measured nothing: its pairs are no evidence about any host, so they are left out of the
attribution with a note naming the round, and the stage is `incomplete`, not `measured`: every host
it was to pair in that round is rejected as not measured (a "missing" reason, never guilt), and the
fleet run reports the stage as its problem.

What the gate gets: each host's best pair as its metric `fabric_pair_busbw_gbps` (a FABRIC_CHECK
record appended to the host's fetched results, so floors and the fleet-relative rule judge it),
beside it `fabric_pair_ib_write_gbitps` where ib_write_bw pairs were measured, and
as `host_reasons` a reject for every guilty host naming the pairs it was bad in, and for a host
that became unreachable during the rounds. Suspect links and inconclusive hosts are notes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.metrics import (
    FABRIC_CHECK,
    FABRIC_IB_CHECK,
    FABRIC_IB_METRIC,
    FABRIC_METRIC,
    MULTINODE_CHECK,
    MULTINODE_LAUNCHER_FAILED,
    MULTINODE_METRIC,
    MULTINODE_NO_TORCH,
)
from fleet.results import CheckRecord, ResultsWriter, controller_record, parse_line, read_results
from validation.fabric.attribute import DEFAULT_MAD_K, DEFAULT_MIN_RELATIVE_MARGIN, attribute
from validation.fabric.model import Attribution, Pair, PairResult, Round, Schedule
from validation.fabric.schedule import pairing_schedule
from validation.fabric.stage import run_schedule
from validation.fleetrun.events import clean, failure_message, result_of
from validation.gate import Reason, natural_key

# Task names in roles/burnin/tasks/fabric_round.yml the controller reads (a test keeps them in step).
READ_TASK = "Read the pair's record"
WAIT_TASK = "Wait for the all-reduce of the pair"
START_TASK = "Start the all-reduce of the pair"
IB_READ_TASK = "Read the pair's ib_write_bw record"
# The ib_write_bw step's tasks: a failure in one of them fails the pair's ib_write_bw figure, not
# its all-reduce, which had already been read back.
IB_TASKS = frozenset(
    {
        "Copy the node's results for the pair's ib_write_bw record",
        "Look for ib_write_bw and the fabric's RDMA devices",
        "Note what this host measures ib_write_bw with",
        "Start ib_write_bw of the pair",
        "Wait for ib_write_bw of the pair",
        "Clean up the pair's ib_write_bw job status",
        IB_READ_TASK,
    }
)
IB_UNIT = "Gb/s"
LAUNCHER_FAILED = MULTINODE_LAUNCHER_FAILED
NO_TORCH_SKIP = MULTINODE_NO_TORCH
# The burn-in play's probe (roles/burnin/tasks/collectives.yml): rc 0 PyTorch is there, 3 it is not.
TORCH_TASK = "Look for PyTorch in fleetforge's environment"
NO_TORCH = (
    "PyTorch is not installed in fleetforge's environment on this host: it cannot take part in the "
    "fabric rounds; add it to the bundle with --extra-package torch==<version>"
)
# Pairs the controller measures with ib_write_bw only: a member has no PyTorch for the all-reduce.
NO_TORCH_PAIRS = (
    "PyTorch is not installed in fleetforge's environment on {hosts}: their pairs measure "
    "ib_write_bw only; add PyTorch with --extra-package torch==<version>"
)


def no_torch_pairs(off: Sequence[tuple[Pair, tuple[str, ...]]]) -> str:
    """Why these pairs measured ib_write_bw only, naming every member without PyTorch once."""
    lacking = sorted({h for _, hosts in off for h in hosts}, key=natural_key)
    return NO_TORCH_PAIRS.format(hosts=", ".join(lacking))


def hosts_without_torch(events: Sequence[Mapping[str, Any]]) -> set[str]:
    """Hosts whose burn-in play found no PyTorch: a round would only record their skip."""
    found: set[str] = set()
    for e in events:
        data = e.get("event_data") or {}
        host = data.get("host")
        if (
            e.get("event") == "runner_on_ok"
            and data.get("task") == TORCH_TASK
            and result_of(data).get("rc") == 3
            and isinstance(host, str)
        ):
            found.add(host)
    return found


def recorded_without_torch(path: Path) -> bool:
    """Whether a host's results say it has no PyTorch: its last all-reduce across nodes is the skip
    the launcher records for that. For a host a rerun (--limit) keeps, whose burn-in play (and its
    probe) is not in this run's events."""
    if not path.is_file():
        return False
    try:
        records = [c for c in read_results(path).checks if c.check == MULTINODE_CHECK]
    except OSError:
        return False
    if not records:
        return False
    last = records[-1]
    return last.status == "skip" and (last.reason or "").startswith(NO_TORCH_SKIP)


# A play of one round: the round's role variables and the hosts to limit it to in, events out.
PlayRound = Callable[[Mapping[str, object], Sequence[str]], Sequence[Mapping[str, Any]]]


class FabricSkipped(Exception):
    """No pair of a round could measure, by all-reduce or ib_write_bw (no PyTorch, and no perftest
    or RDMA devices where the step runs): the stage has nothing to judge."""


def round_vars(
    round_: Round, *, base_port: int, stage_id: str, no_allreduce: Collection[str] = ()
) -> dict[str, dict[str, object]]:
    """`burnin_fabric_round` for one round: every paired host -> its pair's rendezvous. Each pair has
    its own id (a late host of another pair or round cannot join it) and port; `allreduce` is false
    where a member is in no_allreduce (no PyTorch), and the pair measures ib_write_bw only."""
    out: dict[str, dict[str, object]] = {}
    for i, pair in enumerate(round_.pairs):
        spec: dict[str, object] = {
            "members": f"{pair.a},{pair.b}",
            "endpoint_host": pair.a,
            "port": base_port + i,
            "rdzv_id": f"{stage_id}-r{round_.index}-p{i}",
            "allreduce": pair.a not in no_allreduce and pair.b not in no_allreduce,
        }
        out[pair.a] = dict(spec)
        out[pair.b] = dict(spec)
    return out


@dataclass
class RoundEvents:
    """What one round's play said per host: the pair record read back, or why there is none."""

    records: dict[str, CheckRecord] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    ib_records: dict[str, CheckRecord] = field(default_factory=dict)
    ib_problems: dict[str, str] = field(default_factory=dict)


def read_round(events: Sequence[Mapping[str, Any]]) -> RoundEvents:
    seen = RoundEvents()
    for e in events:
        kind = e.get("event")
        data = e.get("event_data") or {}
        host, task = data.get("host"), str(data.get("task") or "")
        if not isinstance(host, str):
            continue
        res = result_of(data)
        if kind == "runner_on_unreachable":
            msg = clean(str(res.get("msg") or "unreachable"))
            seen.unreachable.setdefault(host, msg)
            seen.problems.setdefault(host, f"{host} unreachable: {msg}")
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            where = seen.ib_problems if task in IB_TASKS else seen.problems
            if task == WAIT_TASK and res.get("rc") == LAUNCHER_FAILED:
                why = f"the all-reduce launcher failed (exit {LAUNCHER_FAILED}), nothing measured"
                where.setdefault(host, f"{host}: {task}: {why}: {failure_message(task, res)}")
            else:
                where.setdefault(host, f"{host}: {task}: {failure_message(task, res)}")
        elif kind == "runner_on_ok" and task == IB_READ_TASK:
            line = _last_line(res.get("stdout"))
            if not line:
                seen.ib_problems.setdefault(host, f"{host}: no record of the pair's ib_write_bw was written")
                continue
            try:
                record = parse_line(line)
            except ValueError as exc:
                seen.ib_problems.setdefault(
                    host, f"{host}: the pair's ib_write_bw record is unreadable: {exc}"
                )
                continue
            if not isinstance(record, CheckRecord) or record.check != FABRIC_IB_CHECK:
                seen.ib_problems.setdefault(host, f"{host}: no record of the pair's ib_write_bw was written")
                continue
            seen.ib_records[host] = record
        elif kind == "runner_on_ok" and task == READ_TASK:
            # The role prints what the launcher appended to the pair's copy of the node's results,
            # one record; nothing at all when it wrote none, never an older line of the copy.
            line = _last_line(res.get("stdout"))
            if not line:
                seen.problems.setdefault(host, f"{host}: no record of the pair's all-reduce was written")
                continue
            try:
                record = parse_line(line)
            except ValueError as exc:
                seen.problems.setdefault(host, f"{host}: the pair's record is unreadable: {exc}")
                continue
            if not isinstance(record, CheckRecord) or record.check != MULTINODE_CHECK:
                seen.problems.setdefault(host, f"{host}: no record of the pair's all-reduce was written")
                continue
            seen.records[host] = record
    return seen


def _last_line(stdout: object) -> str:
    lines = [line for line in str(stdout or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def round_not_run(events: Sequence[Mapping[str, Any]], hosts: Collection[str]) -> str | None:
    """Why a round's play measured nothing at all, or None when it did: no events came back (it
    never started), or none of its hosts reached the read of its pair's record (it was stopped
    before, or every launcher failed alike): the round's fault, or the run's, not any host's."""
    if not events:
        return (
            "its play did not run (no events came back: the run had passed its deadline, or "
            "ansible-runner could not start it)"
        )
    read = False
    first: str | None = None
    for e in events:
        data = e.get("event_data") or {}
        if data.get("host") not in hosts:
            continue
        if e.get("event") in ("runner_on_ok", "runner_on_failed") and data.get("task") in (
            READ_TASK,
            IB_READ_TASK,
        ):
            read = True
            break
        if e.get("event") == "runner_on_unreachable":
            # The play ran and lost a host (a pair of one round: its partner then fails before the
            # read): the host's fault, which read_round names, not the round's.
            read = True
            break
        if first is None and e.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            task = str(data.get("task") or "")
            first = f"{data.get('host')}: {task}: {failure_message(task, result_of(data))}"
    if read:
        return None
    return "none of its hosts reached the read of its pair's record (the play was stopped first)" + (
        f"; first failure: {first}" if first else ""
    )


def pair_result(pair: Pair, seen: RoundEvents) -> tuple[PairResult, bool]:
    """The pair's measurement from both hosts' records, failing closed; and whether it was a skip
    (the hosts cannot run the all-reduce at all, which is not the fabric's fault)."""
    problems = [seen.problems[h] for h in (pair.a, pair.b) if h in seen.problems]
    if problems:
        return PairResult(pair, None, "; ".join(problems)[:500]), False
    records = [seen.records.get(h) for h in (pair.a, pair.b)]
    for host, rec in zip((pair.a, pair.b), records, strict=True):
        if rec is None:
            return PairResult(pair, None, f"{host}: no record of the pair came back"), False
    got = [r for r in records if r is not None]
    skips = [r for r in got if r.status == "skip"]
    if skips:
        return PairResult(pair, None, f"not measured: {skips[0].reason or 'skipped'}"), len(skips) == len(got)
    for host, rec in zip((pair.a, pair.b), got, strict=True):
        if rec.status != "pass" or MULTINODE_METRIC not in rec.metrics:
            why = clean(rec.reason or rec.error or rec.status)
            return PairResult(pair, None, f"{host}: {rec.status}: {why}"), False
    # Both records hold the slowest rank's time, so they agree; the lower one counts if they do not.
    return PairResult(pair, min(r.metrics[MULTINODE_METRIC] for r in got)), False


def ib_pair_result(
    pair: Pair, seen: RoundEvents, round_index: int | None = None, *, allreduce: bool = True
) -> tuple[PairResult | None, str | None]:
    """The pair's ib_write_bw measurement, failing closed, or None with why it was not measured
    (None, None: the step did not run for the pair, or its all-reduce step already failed). A pair
    measured with ib_write_bw only (`allreduce` false) has no all-reduce to leave a failure to: a
    host lost or failing anywhere in its round fails its ib_write_bw figure."""
    hosts = (pair.a, pair.b)
    if allreduce and any(h in seen.problems for h in hosts):
        return None, None
    problems = [seen.ib_problems[h] for h in hosts if h in seen.ib_problems]
    if not allreduce:
        problems += [seen.problems[h] for h in hosts if h in seen.problems and h not in seen.ib_problems]
    if problems:
        return PairResult(pair, None, "ib_write_bw: " + "; ".join(problems)[:500], round_index), None
    records = {h: seen.ib_records.get(h) for h in hosts}
    got = {h: r for h, r in records.items() if r is not None}
    if not got:
        return None, None  # the step is off (burnin_fabric_ib false)
    for host in hosts:
        if host not in got:
            return PairResult(pair, None, f"ib_write_bw: {host}: no record came back", round_index), None
    skips = [r for r in got.values() if r.status == "skip"]
    if skips:
        return None, clean(skips[0].reason or "skipped")
    for host, rec in got.items():
        if rec.status != "pass" or FABRIC_IB_METRIC not in rec.metrics:
            why = clean(rec.reason or rec.error or rec.status)
            return PairResult(
                pair, None, f"ib_write_bw: {host}: {rec.status}: {why}"[:500], round_index
            ), None
    # The server prints the client's report, so the sides agree; the lower counts if they do not.
    return PairResult(pair, min(r.metrics[FABRIC_IB_METRIC] for r in got.values()), None, round_index), None


class AnsibleRounds:
    """A `RoundRunner` that measures a round through one play (`play`) and reads back its events.
    Pairs with a member in `no_allreduce` (no PyTorch) measure ib_write_bw only: their all-reduce
    result is a "not measured" kept apart in `allreduce_off`, for the stage to leave out of its
    all-reduce attribution."""

    def __init__(
        self, play: PlayRound, *, base_port: int, stage_id: str, no_allreduce: Collection[str] = ()
    ) -> None:
        self.play = play
        self.base_port = base_port
        self.stage_id = stage_id
        self.no_allreduce = frozenset(no_allreduce)
        self.unreachable: dict[str, str] = {}
        self.backend = ""
        self.ib_results: list[PairResult] = []
        self.ib_skipped: list[tuple[Pair, str]] = []
        self.allreduce_off: list[tuple[Pair, tuple[str, ...]]] = []  # and its members without PyTorch
        self.not_run: dict[int, str] = {}  # round index -> why its play measured nothing

    def __call__(self, round_: Round, /) -> Sequence[PairResult]:
        mapping = round_vars(
            round_, base_port=self.base_port, stage_id=self.stage_id, no_allreduce=self.no_allreduce
        )
        hosts = sorted(mapping, key=natural_key)
        events = self.play({"burnin_fabric_round": mapping}, hosts)
        why_not = round_not_run(events, set(hosts)) if hosts else None
        if why_not is not None:
            # Not measured: no pair of it is evidence (run_stage leaves them out), and nobody in it
            # was found unreachable by a play that never got to them.
            self.not_run[round_.index] = why_not
            return []
        seen = read_round(events)
        for host, msg in seen.unreachable.items():
            self.unreachable.setdefault(host, msg)
        for rec in seen.records.values():
            self.backend = self.backend or rec.backend
        out: list[PairResult] = []
        skipped: list[str] = []
        ib_measured = 0
        for pair in round_.pairs:
            allreduce = bool(mapping[pair.a]["allreduce"])
            if allreduce:
                result, skip = pair_result(pair, seen)
            else:
                lacking = tuple(h for h in (pair.a, pair.b) if h in self.no_allreduce)
                why = f"not measured: no PyTorch on {' and '.join(lacking)} (ib_write_bw only)"
                result, skip = PairResult(pair, None, why), True
                self.allreduce_off.append((pair, lacking))
            out.append(result)
            if skip:
                skipped.append(result.reason or "skipped")
            ib, ib_skip = ib_pair_result(pair, seen, round_.index, allreduce=allreduce)
            if ib is not None:
                self.ib_results.append(ib)
                ib_measured += 1
            elif ib_skip is not None:
                self.ib_skipped.append((pair, ib_skip))
        # Nothing this round measured, by either method: another round would only say so again.
        if round_.pairs and len(skipped) == len(round_.pairs) and not ib_measured:
            off = [(p, hosts) for p, hosts in self.allreduce_off if p in round_.pairs]
            why = no_torch_pairs(off) if off else skipped[0]
            ib_why = [_without_host(w) for p, w in self.ib_skipped if p in round_.pairs]
            raise FabricSkipped(why + (f"; ib_write_bw: {ib_why[0]}" if ib_why else ""))
        return out


def _not_measured_notes(
    skipped: Sequence[tuple[Pair, str]], label: str, key: Callable[[str], str] = str
) -> list[str]:
    """One line per distinct reason (as `key` words it), with a few of its pairs named."""
    by_reason: dict[str, list[str]] = {}
    for pair, why in skipped:
        by_reason.setdefault(key(why), []).append(f"{pair.a}-{pair.b}")
    notes = []
    for why, pairs in by_reason.items():
        shown = ", ".join(pairs[:3]) + (f" and {len(pairs) - 3} more" if len(pairs) > 3 else "")
        notes.append(f"{label} not measured in {len(pairs)} pair(s) ({shown}): {why}")
    return notes


def _attribution_notes(attribution: Attribution | None, label: str) -> list[str]:
    """Suspect links and inconclusive hosts: what the report says beside the rejects."""
    if attribution is None:
        return []
    notes = [
        f"{label}: suspect link {link.pair.a}-{link.pair.b} (bad only together, neither host rejected "
        f"for it): " + "; ".join(e.describe() for e in link.evidence)
        for link in attribution.suspect_links
    ]
    notes += [f"{label}: {f.host} inconclusive: {f.reason}" for f in attribution.inconclusive]
    return notes


@dataclass
class FabricStage:
    """The stage as it ran: what it measured, what attribution made of it, what the gate gets."""

    # measured | skipped | incomplete (some round's play measured nothing: `not_run`; what the other
    # rounds measured is attributed, and the hosts of the lost rounds are not accepted on it)
    status: str
    hosts: tuple[str, ...]
    reason: str | None = None
    schedule: Schedule | None = None
    results: tuple[PairResult, ...] = ()
    notes: tuple[str, ...] = ()
    attribution: Attribution | None = None
    unreachable: dict[str, str] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)  # host -> why it was not paired
    seconds: float = 0.0
    backend: str = ""  # the pairs' all-reduce (torch-gloo, torch-nccl)
    ib_results: tuple[PairResult, ...] = ()
    ib_attribution: Attribution | None = None
    ib_skipped: tuple[tuple[Pair, str], ...] = ()  # pairs whose hosts cannot run ib_write_bw, and why
    ib_off: str | None = None  # why no pair ran ib_write_bw at all (the SKU's fabric, the operator)
    # Pairs measured with ib_write_bw only, each with its members that have no PyTorch.
    allreduce_off: tuple[tuple[Pair, tuple[str, ...]], ...] = ()
    not_run: dict[int, str] = field(default_factory=dict)  # round index -> why it measured nothing

    def not_measured(self) -> dict[str, list[int]]:
        """Per host, the rounds it was to be paired in whose play measured nothing."""
        out: dict[str, list[int]] = {}
        if self.schedule is None:
            return out
        for round_ in self.schedule.rounds:
            if round_.index in self.not_run:
                for pair in round_.pairs:
                    for host in (pair.a, pair.b):
                        out.setdefault(host, []).append(round_.index)
        return out

    def reasons(self) -> dict[str, list[Reason]]:
        """Per host, the gate's rejects from the stage: unreachable during it, guilty, or (an
        incomplete stage) not measured in a round whose play did not run: never a pass, never guilt."""
        out: dict[str, list[Reason]] = {}
        for host, indexes in self.not_measured().items():
            why = "; ".join(f"round {i + 1}: {self.not_run[i]}" for i in indexes)
            out.setdefault(host, []).append(
                Reason(
                    "missing",
                    FABRIC_CHECK,
                    None,
                    None,
                    "measured in every fabric round",
                    f"fabric: not measured in {len(indexes)} of the stage's rounds, not counted against "
                    f"this host: {why}"[:500],
                )
            )
        for host, msg in self.unreachable.items():
            out.setdefault(host, []).append(
                Reason(
                    "missing",
                    FABRIC_CHECK,
                    None,
                    msg,
                    "reachable over SSH",
                    f"unreachable during the fabric rounds: {msg}",
                )
            )
        for attribution, label in ((self.attribution, "fabric"), (self.ib_attribution, "fabric ib_write_bw")):
            if attribution is None:
                continue
            for finding in attribution.guilty:
                fig = attribution.figures.get(finding.host)
                failed = finding.kind == "failed_with_every_partner"
                out.setdefault(finding.host, []).append(
                    Reason(
                        "error" if failed else "outlier",
                        FABRIC_CHECK,
                        attribution.metric,
                        None if fig is None else fig.best_gbps,
                        attribution.rule.limit_gbps,
                        f"{label}: {finding.reason}",
                    )
                )
        return out

    def ib_notes(self) -> list[str]:
        """What the ib_write_bw pairs add to the report beside their rejects."""
        notes = _attribution_notes(self.ib_attribution, "fabric ib_write_bw")
        # One line per distinct reason, a few pairs named: a fleet without perftest says it once.
        return notes + _not_measured_notes(self.ib_skipped, "fabric ib_write_bw", _without_host)

    def gate_notes(self) -> list[str]:
        """What the gate's report says beside the rejects: suspect links and inconclusive hosts."""
        if self.status not in ("measured", "incomplete"):
            return [f"fabric rounds not measured: {self.reason}"] if self.reason else []
        notes: list[str] = []
        if self.status == "incomplete":
            rounds = len(self.schedule.rounds) if self.schedule is not None else "?"
            notes.append(
                f"fabric rounds incomplete: {len(self.not_run)} of {rounds} round(s) measured nothing "
                "(the notes below say why); no host is accepted on a round it was not measured in"
            )
        notes += _attribution_notes(self.attribution, "fabric")
        if self.allreduce_off:
            why = no_torch_pairs(self.allreduce_off)
            notes += _not_measured_notes([(pair, why) for pair, _ in self.allreduce_off], "fabric all-reduce")
        return notes + self.ib_notes() + [f"fabric: {n}" for n in self.notes]

    def write_host_records(self, results_dir: Path) -> list[str]:
        """Append each host's figures over its pairs (all-reduce busbw, and ib_write_bw where it
        was measured) to its fetched results, with the stage's verdict on it: a host the rounds
        found guilty or lost is a failed or errored record (reasons()), so any later reading of
        the files rejects it too. The hosts written."""
        stage = self.reasons()
        per_host: dict[str, tuple[dict[str, float], list[str]]] = {h: ({}, []) for h in stage}
        for attribution, what in ((self.attribution, "all-reduce"), (self.ib_attribution, "ib_write_bw")):
            if attribution is None:
                continue
            by_host: dict[str, list[str]] = {}
            for j in attribution.pairs:
                for h in (j.result.pair.a, j.result.pair.b):
                    by_host.setdefault(h, []).append(j.describe(h))
            for host, fig in attribution.figures.items():
                if fig.best_gbps is None:
                    continue
                metrics, findings = per_host.setdefault(host, ({}, []))
                metrics.update(fig.metrics())
                findings.append(
                    f"{what}: best of {fig.completed} completed pair(s) ({fig.failed} failed): "
                    + "; ".join(by_host.get(host, []))
                )
        written: list[str] = []
        for host in sorted(per_host, key=natural_key):
            metrics, findings = per_host[host]
            path = results_dir / f"{host}.jsonl"
            if not path.is_file():
                continue
            found = read_results(path)
            if not found.runs:
                continue
            reasons = stage.get(host, [])
            # Guilty on what it measured: a fail; lost, or failed with every partner: an error.
            status = (
                "pass" if not reasons else "fail" if all(r.rule == "outlier" for r in reasons) else "error"
            )
            record = controller_record(
                found,
                check=FABRIC_CHECK,
                status=status,
                metrics=metrics,
                findings=findings,
                reason="; ".join(r.message for r in reasons) or None,
                backend=self.backend,
                duration_s=round(self.seconds, 3),
            )
            with ResultsWriter(path) as writer:
                writer.append(record)
            written.append(host)
        return written

    def summary(self) -> str:
        """One line for the run's text output."""
        a = self.attribution
        if self.status == "incomplete" and a is None and self.ib_attribution is None:
            return f"fabric: incomplete, nothing measured: {self.reason}"
        if (
            self.status not in ("measured", "incomplete")
            or self.schedule is None
            or (a is None and self.ib_attribution is None)
        ):
            return f"fabric: not measured: {self.reason}"
        done = [r.busbw_gbps for r in self.results if r.busbw_gbps is not None]
        median = None if a is None else a.rule.median_gbps
        parts = [
            f"fabric: {len(self.schedule.rounds)} round(s), {len(self.results)} pair(s), "
            f"{len(done)} completed"
            + (f", median {median:.4g} GB/s" if median is not None else "")
            + f" ({self.seconds:.0f} s)"
        ]
        if self.status == "incomplete":
            parts.append(f"INCOMPLETE: {self.reason}")
        if self.allreduce_off:
            parts.append(f"all-reduce not measured in {len(self.allreduce_off)} pair(s) (no PyTorch)")
        if a is not None and a.guilty:
            parts.append("guilty: " + ", ".join(a.guilty_hosts))
        if a is not None and a.suspect_links:
            parts.append("suspect links: " + ", ".join(f"{x.pair.a}-{x.pair.b}" for x in a.suspect_links))
        if a is not None and a.inconclusive:
            parts.append("inconclusive: " + ", ".join(f.host for f in a.inconclusive))
        if a is not None and len(parts) == 1:
            parts.append("no host or link singled out")
        ib = self.ib_attribution
        if ib is not None:
            done_ib = [r for r in self.ib_results if r.busbw_gbps is not None]
            said = f"ib_write_bw: {len(self.ib_results)} pair(s), {len(done_ib)} completed"
            if ib.rule.median_gbps is not None:
                said += f", median {ib.rule.median_gbps:.4g} {IB_UNIT}"
            if ib.guilty:
                said += ", guilty: " + ", ".join(ib.guilty_hosts)
            if ib.suspect_links:
                said += ", suspect links: " + ", ".join(f"{x.pair.a}-{x.pair.b}" for x in ib.suspect_links)
            parts.append(said)
        elif self.ib_skipped:
            parts.append(f"ib_write_bw not measured ({len(self.ib_skipped)} pair(s) skipped)")
        elif self.ib_off is not None:
            parts.append(f"ib_write_bw not run: {self.ib_off}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "status": self.status,
            "reason": self.reason,
            "hosts": list(self.hosts),
            "left_out": dict(self.left_out),
            "rounds": []
            if self.schedule is None
            else [
                {"index": r.index, "pairs": [[p.a, p.b] for p in r.pairs], "idle": list(r.idle)}
                for r in self.schedule.rounds
            ],
            "pairs": [
                {
                    "hosts": [r.pair.a, r.pair.b],
                    "busbw_gbps": r.busbw_gbps,
                    "reason": r.reason,
                    "round": r.round,
                }
                for r in self.results
            ],
            "attribution": None if self.attribution is None else self.attribution.as_dict(),
            "ib_write_bw": {
                "unit": IB_UNIT,
                "pairs": [
                    {
                        "hosts": [r.pair.a, r.pair.b],
                        "gbitps": r.busbw_gbps,
                        "reason": r.reason,
                        "round": r.round,
                    }
                    for r in self.ib_results
                ],
                "skipped": [{"hosts": [p.a, p.b], "reason": why} for p, why in self.ib_skipped],
                "off": self.ib_off,
                "attribution": None if self.ib_attribution is None else self.ib_attribution.as_dict(),
            },
            "allreduce_off": [
                {"hosts": [p.a, p.b], "without_torch": list(lacking)} for p, lacking in self.allreduce_off
            ],
            "unreachable": dict(self.unreachable),
            "not_run": {str(i): why for i, why in sorted(self.not_run.items())},
            "notes": list(self.notes),
            "backend": self.backend,
            "seconds": round(self.seconds, 3),
        }


def run_stage(
    hosts: Sequence[str],
    measure: AnsibleRounds,
    *,
    rounds: int,
    seed: int | None = None,
    left_out: Mapping[str, str] | None = None,
    clock: Callable[[], float] | None = None,
    mad_k: float = DEFAULT_MAD_K,
    min_relative_margin: float = DEFAULT_MIN_RELATIVE_MARGIN,
) -> FabricStage:
    """Pair `hosts` for `rounds` rounds, measure each round with `measure`, attribute with the
    outlier rule's `mad_k` and `min_relative_margin` (validation/fabric/attribute.py)."""
    import time

    now = clock or time.perf_counter
    t0 = now()
    ordered = tuple(sorted(hosts, key=natural_key))
    skipped_out = dict(left_out or {})
    if len(ordered) < 2:
        why = f"{len(ordered)} host(s) ready for the fabric rounds: nothing to pair"
        reasons = sorted(set(skipped_out.values()))
        if reasons:
            why += f"; {len(skipped_out)} left out: " + "; ".join(reasons)[:400]
        return FabricStage("skipped", ordered, why, left_out=skipped_out)
    schedule = pairing_schedule(ordered, rounds, seed)
    try:
        ran = run_schedule(schedule, measure)
    except FabricSkipped as exc:
        return FabricStage(
            "skipped",
            ordered,
            str(exc),
            schedule=schedule,
            unreachable=dict(measure.unreachable),
            left_out=skipped_out,
            seconds=now() - t0,
        )
    # A round whose play measured nothing (it never started, or was stopped before any pair was
    # read) is no evidence: its pairs, which the schedule's reconciling made failed ones, are left
    # out, and the stage is incomplete. What the other rounds measured stands.
    not_run = dict(sorted(measure.not_run.items()))
    results = tuple(r for r in ran.results if r.round not in not_run)
    notes = [
        *ran.notes,
        *(f"round {i + 1} not measured, its pairs not counted: {why}" for i, why in not_run.items()),
    ]
    # Pairs measured with ib_write_bw only (a member without PyTorch) are no evidence about the
    # all-reduce: its attribution judges the other pairs, and leaves out a host that had no other.
    off = {pair for pair, _ in measure.allreduce_off}
    measured = [r for r in results if r.pair not in off]
    only_off = {h for pair in off for h in (pair.a, pair.b)} - set(_hosts_of(measured))
    lost = set(measure.unreachable)
    attribution = None
    if measured:
        # A host the lost rounds alone were to pair is not "never measured" by the attribution:
        # the stage's reasons say it was not measured, and why.
        in_measured = set(_hosts_of(measured))
        only_lost = {h for h in ordered if h not in in_measured and _only_in(schedule, h, not_run)}
        attribution = attribute(
            [h for h in ordered if h not in only_off and h not in only_lost],
            measured,
            metric=FABRIC_METRIC,
            mad_k=mad_k,
            min_relative_margin=min_relative_margin,
            lost=lost,
        )
    ib_results = tuple(measure.ib_results)
    ib_attribution = None
    if ib_results:
        # Only the hosts in an ib_write_bw pair: a host whose pairs were skipped is not "unmeasured".
        ib_attribution = attribute(
            _hosts_of(ib_results),
            ib_results,
            metric=FABRIC_IB_METRIC,
            unit=IB_UNIT,
            mad_k=mad_k,
            min_relative_margin=min_relative_margin,
            lost=lost,
        )
    reason = None
    if not_run:
        reason = (
            f"{len(not_run)} of {len(schedule.rounds)} round(s) measured nothing, their pairs not "
            "counted: " + "; ".join(f"round {i + 1}: {why}" for i, why in not_run.items())
        )[:600]
    return FabricStage(
        "incomplete" if not_run else "measured",
        ordered,
        reason,
        schedule=schedule,
        results=results,
        notes=tuple(notes),
        attribution=attribution,
        unreachable=dict(measure.unreachable),
        left_out=skipped_out,
        seconds=now() - t0,
        backend=measure.backend,
        ib_results=ib_results,
        ib_attribution=ib_attribution,
        ib_skipped=tuple(measure.ib_skipped),
        allreduce_off=tuple(measure.allreduce_off),
        not_run=not_run,
    )


def _only_in(schedule: Schedule, host: str, rounds: Collection[int]) -> bool:
    """Whether `host` is paired in some round, and every round that pairs it is one of `rounds`."""
    paired = [r.index for r in schedule.rounds if any(host in p for p in r.pairs)]
    return bool(paired) and all(i in rounds for i in paired)


def _hosts_of(results: Sequence[PairResult]) -> list[str]:
    return sorted({h for r in results for h in (r.pair.a, r.pair.b)}, key=natural_key)


def _without_host(reason: str) -> str:
    """A skip reason without the partner's name, so one cause reads as one line fleet-wide."""
    if reason.startswith("partner "):
        _, _, rest = reason.partition(": ")
        return rest or reason
    return reason

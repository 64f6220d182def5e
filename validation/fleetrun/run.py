"""One fleet run: build the bundle, run playbooks/burnin.yml through ansible-runner, read back what
happened on every host and which results came home.

    out/
      results/<host>.jsonl   fetched by the play (an earlier run's folder is kept as results.prev)
      ansible/               ansible-runner's private data dir: artifacts/<ident>/ holds every event
      bundle/                this run's fleetforge wheel
      fleet-run.json         the run summary (hosts, exit codes, failures, timings, fabric stage)

After the burn-in play, the fabric stage (validation/fleetrun/fabric.py) pairs the hosts that burned
in and runs playbooks/fabric-round.yml once per round; each host's best pair is appended to its
results as `fabric_pair_busbw_gbps`, and the attribution's guilty hosts join the run's reasons.

The gate (run by the caller) judges results/ with `expected=` every inventory host and this run's
reasons per host, so an unreachable host, a failed task or a guilty host is a reject with its reason.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import shutil
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from fleet import ansible_yaml
from fleet.atomic import write_atomic
from fleet.catalog import Sku, UnknownSkuError, get_sku
from fleet.metrics import FLEET_RUN_CHECK
from fleet.results import ResultsWriter, controller_record, read_results
from fleet.text import printable
from validation.fabric.attribute import DEFAULT_MAD_K, DEFAULT_MIN_RELATIVE_MARGIN
from validation.fleetrun.bundle import Bundle, build_bundle
from validation.fleetrun.events import (
    BURNIN_TASK,
    COLLECTIVES_TASK,
    HostRun,
    clean,
    failure_message,
    host_runs,
    result_of,
    stopped_reasons,
)
from validation.fleetrun.fabric import (
    NO_TORCH,
    AnsibleRounds,
    FabricStage,
    hosts_without_torch,
    recorded_without_torch,
    run_stage,
)
from validation.fleetrun.hosts import MissingAnsibleError, ansible_tool, list_hosts
from validation.fleetrun.rerun import FleetCollective, measure_fleet_collective
from validation.gate import Reason

# Time for everything but the burn-in and the all-reduce: facts, installation, copies, fetches.
_OVERHEAD_S = 900


class FleetRunError(RuntimeError):
    """The fleet run cannot start (no playbook, bundle failed); nothing ran on any host.

    `exit_name` names the fleetforge.exitcodes constant the command line exits with."""

    def __init__(self, message: str, exit_name: str = "UNAVAILABLE") -> None:
        super().__init__(message)
        self.exit_name = exit_name


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fleetforge" / "bundles"


@dataclass
class FleetRunOptions:
    inventory: Path
    out_dir: Path
    sku: str = "auto"
    level: str | None = None
    spec: Path | None = None
    forks: int = 10
    timeout_s: int = 1800  # per host burn-in
    throttle: int = 0  # most hosts measuring at once; 0 = forks
    poll_s: int = 5
    extra_packages: Sequence[str] = ()
    wheelhouse: Path | None = None
    collectives: bool = True
    collectives_port: int = 29400
    collectives_timeout_s: int = 300
    # Pairwise rounds after the burn-in (fleets of 2+ hosts): which host or link is slow.
    fabric: bool = True
    fabric_rounds: int = 3
    fabric_timeout_s: int = 120
    # The pairs' outlier rule (validation/fabric/attribute.py); a spec may widen it, never narrow
    # it below these defaults: one short two-host run is noisier than a node's own figures.
    fabric_mad_k: float = DEFAULT_MAD_K
    fabric_min_relative_margin: float = DEFAULT_MIN_RELATIVE_MARGIN
    extravars: Mapping[str, object] = field(default_factory=dict)  # role variables, override all above
    cache_dir: Path = field(default_factory=default_cache)
    # Rerun only these hosts (the suspects of an earlier run into the same out_dir); the other
    # hosts' results stay and the gate judges the whole inventory on the merged set.
    limit: tuple[str, ...] = ()
    source: Path | None = None  # the fleetforge source tree the node wheel is built from
    ansible_root: Path | None = None  # the folder holding playbooks/burnin.yml and roles/
    # time.monotonic() by which every play has ended (a bring-up's --max-wall); a run that reaches
    # it is cut short and reports a problem, so none of its results is judged.
    deadline: float | None = None


@dataclass
class FleetRun:
    expected: list[str]
    hosts: dict[str, HostRun]
    results_dir: Path
    fetched: list[Path]
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    problem: str | None  # the run as a whole went wrong (no recap: time limit, playbook error)
    bundle: Bundle | None
    artifacts: Path
    timings: dict[str, float]
    limited_to: tuple[str, ...] = ()  # the hosts this run burned in, when it reran a subset
    # The whole fleet's all-reduce after a rerun of some hosts (validation/fleetrun/rerun.py).
    fleet_collective: FleetCollective | None = None
    fabric: FabricStage | None = None  # None: the stage was off (--no-fabric)

    def reasons(self) -> dict[str, list[Reason]]:
        """Per host, what the run found outside the results: for the gate's `host_reasons`."""
        out = {h: r.reasons() for h, r in self.hosts.items() if not r.ok}
        if self.problem:
            with_results = {p.stem for p in self.fetched}
            for host, reasons in stopped_reasons(self.hosts, self.problem, with_results).items():
                out.setdefault(host, []).extend(reasons)
        if self.fabric is not None:
            for host, reasons in self.fabric.reasons().items():
                out.setdefault(host, []).extend(reasons)
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "expected": list(self.expected),
            "status": self.status,
            "rc": self.rc,
            "problem": self.problem,
            "results_dir": str(self.results_dir),
            "fetched": [str(p) for p in self.fetched],
            "artifacts": str(self.artifacts),
            "bundle": None
            if self.bundle is None
            else {
                "wheel": str(self.bundle.wheel),
                "wheel_sha256": self.bundle.wheel_sha,
                "deps_key": self.bundle.deps_key,
                "deps_wheels": list(self.bundle.deps_wheels),
                "python": self.bundle.python,
                "machine": self.bundle.machine,
            },
            "timings_s": {k: round(v, 3) for k, v in self.timings.items()},
            "limited_to": list(self.limited_to),
            "fleet_collective": None if self.fleet_collective is None else self.fleet_collective.as_dict(),
            "fabric": None if self.fabric is None else self.fabric.as_dict(),
            "hosts": {h: r.as_dict() for h, r in self.hosts.items()},
        }


FABRIC_PLAYBOOK = "fabric-round.yml"


def playbook_paths(root: Path | None) -> tuple[Path, Path]:
    """(playbooks/burnin.yml, roles/) under `root`, the folder the front door found them in."""
    if root is None or not (root / "playbooks" / "burnin.yml").is_file():
        raise FleetRunError(
            "playbooks/burnin.yml not found: this fleetforge has neither a checkout nor its packaged "
            "Ansible content; reinstall it (pip install 'fleetforge[onprem]')",
            "NO_INPUT",
        )
    return root / "playbooks" / "burnin.yml", root / "roles"


def run_fleet(opts: FleetRunOptions, say: Callable[[str], None] = lambda _: None) -> FleetRun:
    """Run the burn-in on every inventory host. Raises FleetRunError, HostListError or
    MissingAnsibleError before touching any host; after that, every outcome is in the FleetRun."""
    t0 = time.perf_counter()
    playbook, roles = playbook_paths(opts.ansible_root)
    binary = ansible_tool("ansible-playbook")  # found (or MissingAnsibleError) before anything runs
    try:
        import ansible_runner
    except ImportError:
        raise MissingAnsibleError(
            "ansible-runner is not installed: install the onprem extra (pip install 'fleetforge[onprem]')"
        ) from None
    expected = list_hosts(opts.inventory)
    ran = limited_hosts(expected, opts.limit)
    out = opts.out_dir.resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FleetRunError(f"--out {out}: cannot prepare it ({exc.strerror or exc})", "USAGE") from None
    # The bundle first: a bad --wheelhouse or a failed build leaves the earlier results as they were.
    t_bundle = time.perf_counter()
    bundle = _bundle(opts, out, say)
    bundle_s = time.perf_counter() - t_bundle
    try:
        results = _rerun_results_dir(out, ran) if opts.limit else _fresh_results_dir(out)
    except OSError as exc:
        raise FleetRunError(f"--out {out}: cannot prepare it ({exc.strerror or exc})", "USAGE") from None
    extravars = role_vars(opts, bundle, results)
    private = out / "ansible"
    private.mkdir(parents=True, exist_ok=True)
    say(f"burn-in on {len(ran)} host(s) through Ansible ({opts.forks} forks)")
    t_play = time.perf_counter()
    try:
        runner = _run_playbook(ansible_runner, opts, playbook, roles, binary, extravars, private, say)
    except ansible_runner.exceptions.AnsibleRunnerException as exc:
        raise FleetRunError(f"ansible-runner could not start the play: {exc}", "SOFTWARE") from None
    play_s = time.perf_counter() - t_play
    events = list(runner.events)
    hosts = host_runs(events, runner.stats, ran)
    problem = _run_problem(runner, events, run_time_limit(opts))
    if _past(opts.deadline):
        problem = WALL_PROBLEM
    write_failure_records(results, {h: hosts[h] for h in ran if h in hosts})
    fetched = sorted(results.glob("*.jsonl"))
    plays = _Plays(ansible_runner, opts, playbook.parent, roles, binary, extravars, private, say)
    kept = [h for h in expected if h not in ran] if opts.limit else []
    no_torch = hosts_without_torch(events) | kept_without_torch(results, kept)
    ib_runs = ib_write_bw_expected(opts)
    ready, left_out = fabric_ready(ran, hosts, fetched, problem, kept, no_torch, ib_runs=ib_runs)
    fleet_collective = None
    # Past the deadline no later play starts: the run is cut short as a whole (WALL_PROBLEM).
    if kept and opts.collectives and not _past(opts.deadline):
        t_collective = time.perf_counter()
        with_torch = [h for h in ready if h not in no_torch]
        fleet_collective = _fleet_collective(plays, with_torch, ran, results)
        collective_s = time.perf_counter() - t_collective
    fabric = None
    if opts.fabric and not _past(opts.deadline):
        t_fabric = time.perf_counter()
        fabric = _fabric_stage(plays, ready, left_out, no_torch)
        fabric.write_host_records(results)
        fabric_s = time.perf_counter() - t_fabric
    if problem is None and _past(opts.deadline):
        problem = WALL_PROBLEM  # a later play was cut short: its pairs or all-reduce are partial
    problem = later_problem(problem, plays.failures, fabric)
    run = FleetRun(
        expected=expected,
        hosts=hosts,
        results_dir=results,
        fetched=fetched,
        status=str(runner.status),
        rc=int(runner.rc if runner.rc is not None else -1),
        problem=problem,
        bundle=bundle,
        artifacts=Path(runner.config.artifact_dir),
        timings={
            "bundle": bundle_s,
            "playbook": play_s,
            "burnin": phase_seconds(events, BURNIN_TASK),
            **({"fleet_collective": collective_s} if fleet_collective is not None else {}),
            **({"fabric": fabric_s} if fabric is not None else {}),
            "total": time.perf_counter() - t0,
        },
        limited_to=tuple(ran) if opts.limit else (),
        fleet_collective=fleet_collective,
        fabric=fabric,
    )
    write_atomic(out / "fleet-run.json", json.dumps(run.as_dict(), indent=2) + "\n")
    return run


def kept_without_torch(results: Path, kept: Sequence[str]) -> set[str]:
    """The hosts a rerun (--limit) keeps whose results say they have no PyTorch: their burn-in play,
    with its probe, is not in this run's events. Paired for the all-reduce, such a host would only
    record its skip, and leave its partner waiting for it until --fabric-timeout every round."""
    return {h for h in kept if recorded_without_torch(results / f"{h}.jsonl")}


def later_problem(problem: str | None, failures: Sequence[str], fabric: FabricStage | None) -> str | None:
    """The run's problem with what went wrong after the burn-in play: a later play that did not start
    (past the deadline, ansible-runner refused it) and a fabric stage that did not measure every
    round. Either leaves hosts unmeasured through no fault of theirs: the run did not finish."""
    parts = [problem] if problem else []
    parts += [f for f in failures if f not in parts]
    if fabric is not None and fabric.status == "incomplete":
        parts.append(f"the fabric stage is incomplete: {fabric.reason}")
    return "; ".join(parts)[:1000] if parts else None


def write_failure_records(results: Path, hosts: Mapping[str, HostRun]) -> list[str]:
    """Append what went wrong on each host whose play failed (a task, the host lost) to the results
    it did fetch, as an errored FLEET_RUN_CHECK record dated after them: the files alone then
    reject the host, in a later gate of them or a --limit rerun that keeps it. The hosts written."""
    written: list[str] = []
    for host, ran in hosts.items():
        reasons = ran.reasons()
        path = results / f"{host}.jsonl"
        if not reasons or not path.is_file():
            continue
        try:
            found = read_results(path)
        except OSError:
            continue  # unreadable: the gate rejects it as such
        if not found.runs:
            continue
        record = controller_record(
            found,
            check=FLEET_RUN_CHECK,
            status="error",
            reason="; ".join(r.message for r in reasons),
            duration_s=0,
        )
        with ResultsWriter(path) as writer:
            writer.append(record)
        written.append(host)
    return written


def _run_playbook(
    ansible_runner: Any,
    opts: FleetRunOptions,
    playbook: Path,
    roles: Path,
    binary: Path,
    extravars: Mapping[str, object],
    private: Path,
    say: Callable[[str], None],
    limit: Sequence[str] | None = None,
    timeout: int | None = None,
) -> Any:
    hosts = opts.limit if limit is None else limit
    return ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(playbook.parent),
        playbook=playbook.name,
        inventory=str(opts.inventory.resolve()),
        roles_path=[str(roles)],
        cmdline=f"-e @{shlex.quote(str(write_extravars(private, extravars)))}",
        forks=opts.forks,
        envvars={**ansible_env(), "PATH": f"{binary.parent}{os.pathsep}{os.environ.get('PATH', '')}"},
        quiet=True,
        suppress_env_files=True,
        # Every play keeps its events: each fabric round is a run of its own, so rotating by count
        # deleted the burn-in play's events within the same fleet run from the fifth round on.
        rotate_artifacts=0,
        limit=",".join(hosts) or None,
        timeout=_until_deadline(run_time_limit(opts) if timeout is None else timeout, opts.deadline),
        event_handler=_Progress(say),
    )


def fabric_ready(
    ran: Sequence[str],
    hosts: Mapping[str, HostRun],
    fetched: Sequence[Path],
    problem: str | None,
    kept: Sequence[str] = (),
    no_torch: Collection[str] = (),
    *,
    ib_runs: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """The hosts the fabric rounds pair: those that burned in without a failed task and whose results
    came home; the others (already rejected with their reasons) are left out, with why. A host
    without PyTorch is paired only where the rounds' ib_write_bw, which needs none, is known to
    measure (`ib_runs`): its pairs measure that alone.

    `kept` are the hosts a rerun (--limit) did not burn in again but whose earlier results stay:
    they are paired too, so a rerun host has partners proven healthy and every host's figure comes
    from the same rounds."""
    with_results = {p.stem for p in fetched}
    ready: list[str] = []
    left_out: dict[str, str] = {}
    for host in kept:
        if host not in with_results or problem is not None:
            continue
        if host in no_torch and not ib_runs:
            left_out[host] = NO_TORCH
        else:
            ready.append(host)
    for host in ran:
        hr = hosts.get(host)
        if problem is not None:
            left_out[host] = f"the burn-in play did not finish: {problem}"
        elif hr is None or not hr.ok:
            left_out[host] = "unreachable or a task failed in the burn-in play"
        elif host not in with_results:
            left_out[host] = "no results came back from the burn-in"
        elif host in no_torch and not ib_runs:
            left_out[host] = NO_TORCH
        else:
            ready.append(host)
    return ready, left_out


# roles/burnin/defaults/main.yml: burnin_fabric_ib_timeout_s; validation/burnin/pairbw.py stops its
# server this long after the client's limit.
IB_TIMEOUT_DEFAULT_S = 90
IB_SERVER_GRACE_S = 10


def ib_write_bw_off(opts: FleetRunOptions) -> str | None:
    """Why the pairs' ib_write_bw step does not run in this fleet run, or None when it does: the
    operator's burnin_fabric_ib decides, else the SKU's fabric. A SKU chosen per node (auto) keeps
    the step, and each node's probe says whether it has perftest and RDMA devices."""
    asked = opts.extravars.get("burnin_fabric_ib")
    if asked is not None:
        return None if _truthy(asked) else "turned off (burnin_fabric_ib false)"
    sku = _known_sku(opts)
    if sku is None or sku.fabric.rdma:
        return None
    return (
        f"{sku.sku}'s fabric ({sku.fabric.kind}, {sku.fabric.nics} fabric NIC(s)) has no RDMA NICs: "
        f"ib_write_bw does not apply"
    )


def ib_write_bw_expected(opts: FleetRunOptions) -> bool:
    """Whether the pairs' ib_write_bw step is known to have something to measure: the operator
    turned it on, or the SKU's fabric has RDMA NICs. A SKU chosen per node (auto) runs the step
    without that promise, so a host without PyTorch is not paired on the hope of it."""
    asked = opts.extravars.get("burnin_fabric_ib")
    if asked is not None:
        return _truthy(asked)
    sku = _known_sku(opts)
    return sku is not None and sku.fabric.rdma


def _known_sku(opts: FleetRunOptions) -> Sku | None:
    """The catalog's SKU the run names, or None for one chosen per node (auto) or not in the catalog."""
    try:
        return get_sku(opts.sku)
    except UnknownSkuError:
        return None


def fabric_time_limit(opts: FleetRunOptions) -> int:
    """One round's play: the pairs' own limit, then (unless off) the pairs' ib_write_bw with its
    server's grace, plus the copies, polls and reads around them."""
    limit = opts.fabric_timeout_s + 240
    if ib_write_bw_off(opts) is None:
        ib = opts.extravars.get("burnin_fabric_ib_timeout_s", IB_TIMEOUT_DEFAULT_S)
        limit += _seconds(ib, IB_TIMEOUT_DEFAULT_S) + IB_SERVER_GRACE_S
    return int(limit)


def _truthy(value: object) -> bool:
    return value not in (False, 0, "false", "False", "no", "0", "")


def _seconds(value: object, default: int) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return default


@dataclass(frozen=True)
class _Plays:
    """What every play of one fleet run shares; `run` plays one more (a fabric round, the fleet's
    all-reduce after a rerun) and returns its events, none when it cannot start (past the deadline,
    ansible-runner refused it): `failures` then says which play and why, for the run's problem."""

    ansible_runner: Any
    opts: FleetRunOptions
    playbooks: Path
    roles: Path
    binary: Path
    extravars: Mapping[str, object]
    private: Path
    say: Callable[[str], None]
    failures: list[str] = field(default_factory=list)

    def run(
        self, playbook: str, extravars: Mapping[str, object], limit: Sequence[str], timeout: int, what: str
    ) -> list[Mapping[str, Any]]:
        if _past(self.opts.deadline):
            self.say(f"{what}: not started, the run is past its deadline")
            self.failures.append(f"{what}: not started, the run was past its deadline")
            return []  # the run reports WALL_PROBLEM: nothing of it is judged
        try:
            runner = _run_playbook(
                self.ansible_runner,
                self.opts,
                self.playbooks / playbook,
                self.roles,
                self.binary,
                {**self.extravars, **extravars},
                self.private,
                self.say,
                limit=limit,
                timeout=timeout,
            )
        except self.ansible_runner.exceptions.AnsibleRunnerException as exc:
            self.say(f"{what}: ansible-runner could not start the play: {exc}")
            # Nothing of it ran: a problem of the run, which must not read as the hosts' failure.
            self.failures.append(clean(f"{what}: ansible-runner could not start the play: {exc}"))
            return []
        return list(runner.events)

    @property
    def rdzv_prefix(self) -> str:
        """This fleet run's rendezvous id; each later play's ids start with it."""
        return str(self.extravars.get("burnin_collectives_id") or "fleetforge")


def _fleet_collective(
    plays: _Plays, ready: Sequence[str], ran: Sequence[str], results: Path
) -> FleetCollective:
    opts, say = plays.opts, plays.say
    # The fabric round's play with one group; its payload, iterations and limit are the all-reduce's.
    group_extravars = {
        "burnin_fabric_bytes": plays.extravars.get("burnin_collectives_bytes", 0),
        "burnin_fabric_iters": 0,
        "burnin_fabric_timeout_s": int(opts.collectives_timeout_s),
        "burnin_fabric_ib": False,
    }

    what = "all-reduce across the fleet after the rerun"

    def play(group_vars: Mapping[str, object], limit: Sequence[str]) -> Sequence[Mapping[str, Any]]:
        say(f"{what}: {len(limit)} host(s)")
        extravars = {**group_extravars, **group_vars}
        return plays.run(FABRIC_PLAYBOOK, extravars, limit, int(opts.collectives_timeout_s) + 240, what)

    collective = measure_fleet_collective(
        play, ready, ran, results, port=int(opts.collectives_port), rdzv_id=f"{plays.rdzv_prefix}-fleet"
    )
    if collective.status != "measured":
        say(f"{what}: not measured: {collective.reason}")
    for host, why in collective.failed.items():
        say(f"{host}: {why}")
    return collective


def _fabric_stage(
    plays: _Plays, ready: Sequence[str], left_out: Mapping[str, str], no_torch: Collection[str] = ()
) -> FabricStage:
    opts, say = plays.opts, plays.say
    ib_off = ib_write_bw_off(opts)
    base = {
        "burnin_fabric_timeout_s": int(opts.fabric_timeout_s),
        **({"burnin_fabric_ib": False} if ib_off is not None else {}),
        **{k: v for k, v in opts.extravars.items() if k.startswith("burnin_fabric_")},
    }
    round_no = [0]
    time_limit = fabric_time_limit(opts)

    def play(round_vars: Mapping[str, object], limit: Sequence[str]) -> Sequence[Mapping[str, Any]]:
        round_no[0] += 1
        say(f"fabric round {round_no[0]}: {len(limit) // 2} pair(s) at once")
        what = f"fabric round {round_no[0]}"
        return plays.run(FABRIC_PLAYBOOK, {**base, **round_vars}, limit, time_limit, what)

    if len(ready) >= 2:
        say(f"fabric: {len(ready)} host(s) in up to {opts.fabric_rounds} round(s) of pairs")
    measure = AnsibleRounds(
        play,
        base_port=int(opts.collectives_port) + 1,
        stage_id=f"{plays.rdzv_prefix}-fabric",
        no_allreduce=[h for h in ready if h in no_torch],
    )
    stage = run_stage(
        ready,
        measure,
        rounds=opts.fabric_rounds,
        left_out=left_out,
        mad_k=opts.fabric_mad_k,
        min_relative_margin=opts.fabric_min_relative_margin,
    )
    if ib_off is not None and stage.status in ("measured", "incomplete"):
        stage = dataclasses.replace(stage, ib_off=ib_off)
    say(stage.summary())
    return stage


def write_extravars(private: Path, extravars: Mapping[str, object]) -> Path:
    """The role's variables as a file Ansible reads as data: extra vars are templated when used, and
    ansible-runner's own extravars file drops `!unsafe`, so a path or --var value holding '{{' would
    run on the controller. Every string is written Unsafe (tagged where it holds a '{')."""
    path = private / "fleetforge-extravars.yml"
    write_atomic(path, ansible_yaml.dump(ansible_yaml.unsafe_values(dict(extravars))))
    return path


def phase_seconds(events: Sequence[Mapping[str, Any]], task: str) -> float:
    """Wall time of one task across all hosts: its start to its last host's result (0 if it never ran)."""
    start = end = None
    for e in events:
        data = e.get("event_data") or {}
        if data.get("task") != task or not isinstance(e.get("created"), str):
            continue
        stamp = datetime.fromisoformat(e["created"])
        if e.get("event") == "playbook_on_task_start":
            start = stamp if start is None else min(start, stamp)
        elif e.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
            end = stamp if end is None else max(end, stamp)
    return (end - start).total_seconds() if start is not None and end is not None else 0.0


def role_vars(opts: FleetRunOptions, bundle: Bundle, results: Path) -> dict[str, object]:
    """The burnin role's variables for this run (roles/burnin/defaults/main.yml); --var wins."""
    extravars: dict[str, object] = {
        **bundle.extravars(),
        "burnin_sku": opts.sku,
        "burnin_level": opts.level or "",
        "burnin_spec_src": str(opts.spec.resolve()) if opts.spec is not None else "",
        "burnin_fetch_dir": str(results),
        "burnin_timeout_s": int(opts.timeout_s),
        "burnin_throttle": int(opts.throttle),
        "burnin_poll_s": int(opts.poll_s),
        "burnin_collectives_enabled": bool(opts.collectives),
        "burnin_collectives_port": int(opts.collectives_port),
        "burnin_collectives_timeout_s": int(opts.collectives_timeout_s),
        # A late node of an earlier run must not join this run's rendezvous.
        "burnin_collectives_id": f"fleetforge-{uuid.uuid4().hex[:12]}",
    }
    extravars.update(opts.extravars)
    return extravars


def ansible_env() -> dict[str, str]:
    """Environment of ansible-playbook: plain output, no retry files, fail fast on a bad inventory."""
    return {
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_FORCE_COLOR": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_PIPELINING": "True",
    }


WALL_PROBLEM = "the run reached its deadline (the bring-up's --max-wall) and was cut short"


def _until_deadline(timeout: int, deadline: float | None) -> int:
    """A play's limit, no later than the deadline (ansible-runner takes whole seconds, at least 1)."""
    if deadline is None:
        return timeout
    return max(1, min(timeout, math.ceil(deadline - time.monotonic())))


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def run_time_limit(opts: FleetRunOptions) -> int:
    """The whole play's limit: a host that hangs past every task's own limit cannot hang the run."""
    collectives = opts.collectives_timeout_s + 180 if opts.collectives else 0
    return int(_OVERHEAD_S + opts.timeout_s + 60 + collectives)


def limited_hosts(inventory_hosts: Sequence[str], limit: Sequence[str]) -> list[str]:
    """The hosts a run burns in: all, or the named subset, each of which the inventory must list."""
    if not limit:
        return list(inventory_hosts)
    unknown = [h for h in dict.fromkeys(limit) if h not in inventory_hosts]
    if unknown:
        raise FleetRunError(
            f"--limit: {', '.join(unknown)} not in the inventory; allowed: {', '.join(inventory_hosts)}",
            "USAGE",
        )
    return [h for h in inventory_hosts if h in limit]


def _rerun_results_dir(out: Path, rerun: Sequence[str]) -> Path:
    """The earlier run's results folder with the rerun hosts' files moved to results.prev/: their
    new results replace them, and an old file is never judged as this run's."""
    results = out / "results"
    results.mkdir(parents=True, exist_ok=True)
    prev = out / "results.prev"
    for host in rerun:
        old = results / f"{host}.jsonl"
        if old.exists() or old.is_symlink():
            prev.mkdir(exist_ok=True)
            old.replace(prev / old.name)
    return results


def _fresh_results_dir(out: Path) -> Path:
    """An empty results folder: results of an earlier run must never be judged as this run's."""
    results = out / "results"
    if results.exists() and any(results.iterdir()):
        prev = out / "results.prev"
        if prev.exists():
            shutil.rmtree(prev)
        results.rename(prev)
    results.mkdir(parents=True, exist_ok=True)
    return results


def _bundle(opts: FleetRunOptions, out: Path, say: Callable[[str], None]) -> Bundle:
    from validation.fleetrun.bundle import BundleError

    try:
        return build_bundle(
            out / "bundle",
            opts.cache_dir,
            source=opts.source,
            wheelhouse=opts.wheelhouse,
            extra_packages=opts.extra_packages,
            log=say,
        )
    except BundleError as exc:
        raise FleetRunError(f"bundle: {exc}") from None


def _run_problem(runner: Any, events: Sequence[Mapping[str, Any]], limit: int) -> str | None:
    """Why the run as a whole did not finish, or None when the play reached its recap."""
    if runner.status == "timeout":
        return f"the fleet run passed its time limit of {limit} s and was stopped"
    if runner.status == "canceled":
        return "the fleet run was canceled"
    if any(e.get("event") == "playbook_on_stats" for e in events):
        return None
    tail = ""
    try:
        tail = clean(runner.stdout.read()[-600:])
    except (OSError, AttributeError, ValueError):
        tail = ""
    return f"ansible-playbook stopped without a recap (exit {runner.rc}){': ' + tail if tail else ''}"


class _Progress:
    """ansible-runner event handler: one line per host milestone, as it happens."""

    def __init__(self, say: Callable[[str], None]) -> None:
        # What a node wrote (its stderr's last line, its host name in an event) reaches the
        # operator's terminal as text: never an escape sequence that clears it or fakes a verdict.
        self._say = say

    def say(self, line: str) -> None:
        self._say(printable(line))

    def __call__(self, event: Mapping[str, Any]) -> bool:
        kind = event.get("event")
        data = event.get("event_data") or {}
        host, task = data.get("host"), str(data.get("task") or "")
        res = result_of(data)
        if kind == "runner_on_unreachable":
            self.say(f"{host}: unreachable: {clean(str(res.get('msg') or ''))}")
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            self.say(f"{host}: task failed: {task}: {failure_message(task, res)}")
        elif kind == "runner_on_ok" and task == BURNIN_TASK:
            self.say(f"{host}: burn-in exited {res.get('rc')}")
        elif kind == "runner_on_ok" and task == COLLECTIVES_TASK:
            self.say(f"{host}: all-reduce across nodes exited {res.get('rc')}")
        elif kind == "playbook_on_task_start" and task in (BURNIN_TASK, COLLECTIVES_TASK):
            self.say(f"{task.lower()} ...")
        return True  # keep every event: the summary reads them

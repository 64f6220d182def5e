"""ib_write_bw between the two hosts of a fabric pair: one side serves, the other connects.

The burnin role runs this on both hosts of each pair of a fabric round, after the pair's all-reduce
(roles/burnin/tasks/fabric_round.yml), in two steps:

    python -m validation.burnin.pairbw --probe --results R
        prints {"devices": [...], "skip": null | "why not"}: what this host can measure with
    python -m validation.burnin.pairbw --role server|client --results R --self NODE --peer NODE \\
        --peer-addr ADDR --peer-probe JSON --port P --seconds D --timeout T
        measures, and appends one `fabric_pair_ib_write` record to R (a copy of the node's results)

Which HCAs face which: HCA i of one host against HCA i of the other, every i both hosts have. Each
host lists the RDMA devices of its SKU's fabric (InfiniBand: link layer InfiniBand; RoCE: link layer
Ethernet) in natural order (mlx5_2 before mlx5_10), whatever their port state, so a down port keeps
its place and fails its own measurement instead of shifting every later HCA onto the wrong partner.
On rail-optimised clusters HCA i of every node is cabled to the same rail, so i-to-i is the path
NCCL's rail-aligned traffic takes; where device names do not line up that way the role's
`burnin_fabric_ib_devices` names the same list for every host. Measuring only the first HCA was
rejected: a bad cable on rail 5 would never be seen. The HCAs are measured one after the other, so
each gets the links to itself and a slow one is not hidden by its neighbours' load.

The server starts one `ib_write_bw -d <hca> -i <port> -F --report_gbits -D <s> -p <port+i>` per
HCA at once, each waiting for its one client; the client runs its HCAs in order, retrying a refused
connection while the server's listener comes up. Both sides have hard limits: the client `--timeout`
for all its HCAs (each run killed at its share), the server `--timeout` plus a grace for a client
that started later; whatever is still running then is killed with its process group and recorded as
a failure. A hung server never hangs the round, and an HCA pair that did not report is never a pass.

The record: `pass` with `fabric_pair_ib_write_gbitps` the slowest HCA pair's average (Gb/s) and
every HCA pair in `per_device`; `skip` when this host or its partner has no perftest or no RDMA
device of the fabric (a note, never a reject: the all-reduce pairs still run); `error` naming every
HCA pair that failed. The server's perftest prints the client's report (perftest src/write_bw.c,
github.com/linux-rdma/perftest, half duplex: `print_full_bw_report(&user_param, &rem_bw_rep,
NULL)`), so both sides hold the figure; the controller takes the lower if they differ.

What was exercised for real and what was not: the parser reads real ib_write_bw output, client and
server side, copied from public sources (tests/validation/burnin/fixtures/pairbw/, each with its
source); the orchestration (process groups, timeouts, retries, records, exit codes) runs real
processes in the tests, with a stand-in `ib_write_bw` on PATH that prints those captured outputs,
sleeps past the limit or exits non-zero. No RDMA hardware was available: a real ib_write_bw between
two hosts, and its flags on a real HCA (-i port, -F, -D), were not run by this project's tests.

Exit codes: 0 measured or skipped (the record says which), 2 a measurement failed, 3 the node has no
burn-in results to append to, 64 bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.catalog import UnknownSkuError, get_sku
from fleet.metrics import FABRIC_IB_CHECK, FABRIC_IB_METRIC
from fleet.results import CheckRecord, ResultsWriter, RunRecord, read_results, utc_now
from validation.burnin.parsers.perftest import bw_average_gbitps
from validation.burnin.procutil import USAGE, UsageExitParser

BINARY = "ib_write_bw"
EXIT = {"pass": 0, "skip": 0, "error": 2}
NO_RESULTS = 3
# The client's run of one HCA pair may take this long beyond its -D seconds: perftest's own
# connection set-up and warm-up, then the report exchange.
PER_HCA_SLACK_S = 20.0
# How long the client keeps retrying a refused connection for one HCA pair: the server's listeners
# start when its own task starts, which Ansible may reach a little later than the client's.
CONNECT_WINDOW_S = 15.0
CONNECT_RETRY_S = 0.5
# The server waits this much beyond --timeout for a client that started later than it did.
SERVER_GRACE_S = 10.0
# Which RDMA devices carry the fabric, by the catalog's fabric kind: the link layer sysfs reports.
LINK_LAYER = {"infiniband": "InfiniBand", "gpudirect-rdma": "Ethernet"}


def parser() -> argparse.ArgumentParser:
    p = UsageExitParser(prog="python -m validation.burnin.pairbw", description=__doc__.split("\n")[0])
    p.add_argument("--probe", action="store_true", help="print what this host can measure with, as JSON")
    p.add_argument("--role", choices=("server", "client"), help="this host's side of the pair")
    p.add_argument("--results", type=Path, required=True, help="the <node>.jsonl to append the record to")
    p.add_argument("--self", dest="me", default="", help="this host's inventory name")
    p.add_argument("--peer", default="", help="the partner's inventory name")
    p.add_argument("--peer-addr", default="", help="the server's address (the client connects to it)")
    p.add_argument("--peer-probe", default="", help="the partner's --probe answer, as JSON")
    p.add_argument("--devices", default="", help="comma-separated HCAs in pairing order; default: the SKU's")
    p.add_argument("--port", type=int, default=18600, help="TCP port of HCA pair 0; pair i uses port+i")
    p.add_argument("--seconds", type=float, default=5.0, help="ib_write_bw -D: seconds per HCA pair")
    p.add_argument("--timeout", type=float, default=90.0, help="hard limit for this side, all HCA pairs")
    p.add_argument("--sysfs", type=Path, default=Path("/sys"), help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    problem = _bad_arguments(args)
    if problem:
        print(f"python -m validation.burnin.pairbw: error: {problem}", file=sys.stderr)
        return USAGE
    run = latest_run(args.results)
    if args.probe:
        sku = run.sku if run is not None else ""
        print(json.dumps(probe(sku, args.sysfs, _listed(args.devices)).as_dict()))
        return 0
    if run is None:
        print(f"{args.results}: no burn-in run record to append the ib_write_bw pair to", file=sys.stderr)
        return NO_RESULTS
    record = measure_pair(args, run)
    _append(args.results, record)
    line = f"{FABRIC_IB_CHECK}: {record.status}" + (f": {record.reason}" if record.reason else "")
    print(line, file=sys.stderr if record.status == "error" else sys.stdout)
    return EXIT[record.status]


def _bad_arguments(args: argparse.Namespace) -> str | None:
    if args.probe:
        return None
    if args.role is None:
        return "--role server|client is required unless --probe"
    if args.role == "client" and not args.peer_addr:
        return "--peer-addr is required for the client"
    if not 0 < args.port < 65536:
        return f"--port must be a TCP port, got {args.port}"
    if not args.seconds > 0 or not args.timeout > 0:
        return "--seconds and --timeout must be positive"
    return None


def _listed(text: str) -> list[str]:
    return [d for d in (x.strip() for x in text.split(",")) if d]


# ---------------------------------------------------------------------- what this host has


@dataclass(frozen=True)
class Hca:
    device: str
    port: int


@dataclass(frozen=True)
class Probe:
    """What a host can measure with: its fabric HCAs in pairing order, or why it cannot."""

    devices: tuple[Hca, ...]
    skip: str | None

    def as_dict(self) -> dict[str, object]:
        return {"devices": [f"{h.device}:{h.port}" for h in self.devices], "skip": self.skip}


def natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """mlx5_2 before mlx5_10."""
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", name) if t)


def rdma_devices(sysfs: Path) -> list[tuple[Hca, str]]:
    """Every RDMA device's first port with its link layer, in natural order of device names."""
    found: list[tuple[Hca, str]] = []
    root = sysfs / "class" / "infiniband"
    if not root.is_dir():
        return found
    for dev in sorted(root.iterdir(), key=lambda p: natural(p.name)):
        ports = sorted((p for p in (dev / "ports").glob("*") if p.name.isdigit()), key=lambda p: int(p.name))
        if not ports:
            continue
        try:
            layer = (ports[0] / "link_layer").read_text().strip()
        except OSError:
            layer = ""
        found.append((Hca(dev.name, int(ports[0].name)), layer))
    return found


def probe(sku_name: str, sysfs: Path, devices: Sequence[str] = ()) -> Probe:
    """This host's HCAs for the pair measurement, or the reason it is skipped."""
    if shutil.which(BINARY) is None:
        return Probe((), f"{BINARY} is not installed (perftest): the pair's RDMA bandwidth is not measured")
    kind = None
    try:
        kind = get_sku(sku_name).fabric.kind if sku_name else None
    except UnknownSkuError:
        kind = None  # a SKU the catalog does not know: every RDMA device counts
    if kind is not None and kind not in LINK_LAYER:
        return Probe(
            (), f"{sku_name}'s fabric ({kind}) is not an InfiniBand or RoCE fabric ib_write_bw pairs measure"
        )
    present = rdma_devices(sysfs)
    if devices:
        by_name = {h.device: h for h, _ in present}
        missing = [d for d in devices if _named(d).device not in by_name]
        if missing:
            return Probe((), f"RDMA device(s) named for the pairs are not on this host: {', '.join(missing)}")
        # "mlx5_0:2" picks port 2; a bare name takes the device's first port.
        return Probe(tuple(_named(d) if ":" in d else by_name[d] for d in devices), None)
    layer = LINK_LAYER.get(kind or "")
    chosen = tuple(h for h, link in present if layer is None or link == layer)
    if not chosen:
        what = f"with link layer {layer}" if layer else "at all"
        return Probe((), f"no RDMA device {what} under {sysfs}/class/infiniband: no RDMA fabric to measure")
    return Probe(chosen, None)


def _named(text: str) -> Hca:
    name, _, port = text.partition(":")
    return Hca(name, int(port) if port.isdigit() else 1)


def peer_probe(text: str, peer: str) -> Probe:
    """The partner's --probe answer as the role passed it on."""
    try:
        data = json.loads(text) if text else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return Probe((), f"no usable probe answer from the partner {peer or '?'}")
    skip = data.get("skip")
    if skip:
        return Probe((), f"partner {peer}: {skip}")
    devices: list[Hca] = []
    for d in data.get("devices") or []:
        devices.append(_named(str(d)))
    if not devices:
        return Probe((), f"partner {peer}: no RDMA device to measure with")
    return Probe(tuple(devices), None)


# ---------------------------------------------------------------------- measuring


@dataclass
class HcaRun:
    """One HCA pair from this side: what ran, its exit, its output, and the figure if any."""

    local: Hca
    remote: Hca
    rc: int | None  # None: killed at the limit
    output: str
    gbitps: float | None = None
    problem: str | None = None

    @property
    def label(self) -> str:
        return f"{self.local.device}->{self.remote.device}"


def ib_argv(hca: Hca, port: int, seconds: float, server_addr: str | None) -> list[str]:
    argv = [
        BINARY, "-d", hca.device, "-i", str(hca.port), "-F", "--report_gbits",
        "-D", str(max(1, round(seconds))), "-p", str(port),
    ]  # fmt: skip
    return argv if server_addr is None else [*argv, server_addr]


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        # Its own session: at the limit the whole group goes, whatever perftest started.
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, start_new_session=True)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def _read(log: Path) -> str:
    try:
        return log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _judge(run: HcaRun, limit_s: float) -> HcaRun:
    if run.problem is not None:
        return run
    if run.rc is None:
        run.problem = f"{run.label}: no result within {limit_s:g} s (killed)"
        return run
    if run.rc != 0:
        tail = " ".join(run.output.split())[-200:]
        run.problem = f"{run.label}: {BINARY} exited with code {run.rc}" + (f": {tail}" if tail else "")
        return run
    try:
        run.gbitps = bw_average_gbitps(run.output)
    except ValueError as exc:
        run.problem = f"{run.label}: {exc}"
    return run


def serve(pairs: Sequence[tuple[Hca, Hca]], args: argparse.Namespace, logs: Path) -> list[HcaRun]:
    """Every HCA's server at once; each waits for its client until the side's limit."""
    limit = args.timeout + SERVER_GRACE_S
    deadline = time.monotonic() + limit
    procs = []
    for i, (local, _) in enumerate(pairs):
        log = logs / f"server-{local.device}.log"
        procs.append((log, _start(ib_argv(local, args.port + i, args.seconds, None), log)))
    runs: list[HcaRun] = []
    for (log, proc), (local, remote) in zip(procs, pairs, strict=True):
        try:
            rc: int | None = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill(proc)
            rc = None
        runs.append(_judge(HcaRun(local, remote, rc, _read(log)), limit))
    return runs


def connect(
    pairs: Sequence[tuple[Hca, Hca]],
    args: argparse.Namespace,
    logs: Path,
    clock: Callable[[], float] = time.monotonic,
) -> list[HcaRun]:
    """The HCA pairs one after the other, each within its share of the side's limit."""
    deadline = clock() + args.timeout
    runs: list[HcaRun] = []
    for i, (local, remote) in enumerate(pairs):
        share = min(args.seconds + PER_HCA_SLACK_S + CONNECT_WINDOW_S, max(0.0, deadline - clock()))
        if share <= 0:
            spent = f"not run: the client's {args.timeout:g} s went to the HCA pairs before it"
            runs.append(HcaRun(local, remote, None, "", problem=f"{local.device}->{remote.device}: {spent}"))
            continue
        log = logs / f"client-{local.device}.log"
        argv = ib_argv(local, args.port + i, args.seconds, args.peer_addr)
        runs.append(_judge(_connect_one(argv, log, share, local, remote, clock), share))
    return runs


def _connect_one(
    argv: list[str], log: Path, share: float, local: Hca, remote: Hca, clock: Callable[[], float]
) -> HcaRun:
    start = clock()
    while True:
        left = share - (clock() - start)
        if left <= 0:
            return HcaRun(local, remote, None, _read(log))
        proc = _start(argv, log)
        try:
            rc: int | None = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            _kill(proc)
            rc = None
        output = _read(log)
        refused = rc not in (0, None) and "BW average" not in output
        # A refused connection while the server's listener comes up is retried; anything after a
        # report, or past the window, is the pair's result.
        if refused and clock() - start + CONNECT_RETRY_S < min(CONNECT_WINDOW_S, share):
            time.sleep(CONNECT_RETRY_S)
            continue
        return HcaRun(local, remote, rc, output)


def measure_pair(args: argparse.Namespace, run: RunRecord) -> CheckRecord:
    started, t0 = utc_now(), time.perf_counter()
    mine = probe(run.sku, args.sysfs, _listed(args.devices))
    theirs = peer_probe(args.peer_probe, args.peer)
    skip = mine.skip or theirs.skip
    if skip is not None:
        return _record(run, "skip", started, t0, reason=skip)
    count = min(len(mine.devices), len(theirs.devices))
    pairs = list(zip(mine.devices[:count], theirs.devices[:count], strict=True))
    notes = []
    if len(mine.devices) != len(theirs.devices):
        notes.append(
            f"{args.me} has {len(mine.devices)} HCA(s), {args.peer} {len(theirs.devices)}: "
            f"the first {count} measured, HCA i against HCA i"
        )
    logs = args.results.parent / f"{run.node}.raw" / FABRIC_IB_CHECK
    logs.mkdir(parents=True, exist_ok=True)
    runs = serve(pairs, args, logs) if args.role == "server" else connect(pairs, args, logs)
    findings = notes + [
        f"{r.label}: {r.gbitps:.4g} Gb/s" if r.gbitps is not None else str(r.problem) for r in runs
    ]
    side = f"{args.role} of {args.me}-{args.peer}"
    failed = [r.problem for r in runs if r.problem]
    if failed:
        why = f"{side}: {len(failed)} of {len(runs)} HCA pair(s) failed: " + "; ".join(str(f) for f in failed)
        return _record(run, "error", started, t0, reason=why[:500], error=why, findings=findings)
    values = [r.gbitps for r in runs if r.gbitps is not None]
    return _record(
        run,
        "pass",
        started,
        t0,
        metrics={FABRIC_IB_METRIC: min(values)},
        per_device={FABRIC_IB_METRIC: values},
        findings=[f"{side}: slowest of {len(values)} HCA pair(s)", *findings],
        backend="perftest-ib_write_bw",
    )


# ---------------------------------------------------------------------- records


def latest_run(path: Path) -> RunRecord | None:
    if not path.is_file():
        return None
    runs = read_results(path).runs
    return runs[-1] if runs else None


def _record(run: RunRecord, status: str, started: str, t0: float, **fields: Any) -> CheckRecord:
    return CheckRecord.model_validate(
        {
            "run_id": run.run_id,
            "node": run.node,
            "sku": run.sku,
            "level": run.level,
            "check": FABRIC_IB_CHECK,
            "started": started,
            "duration_s": round(time.perf_counter() - t0, 3),
            "status": status,
            **fields,
        }
    )


def _append(path: Path, record: CheckRecord) -> None:
    with ResultsWriter(path) as writer:
        writer.append(record)


if __name__ == "__main__":
    sys.exit(main())

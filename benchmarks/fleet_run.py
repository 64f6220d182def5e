"""Fleet-run wall time for 1, 2 and 4 hosts, measured in one run (the target: 4 hosts within
1.5x one host).

    sudo .venv/bin/python benchmarks/fleet_run.py [--repeat N] [--level quick]

Starts 4 local test hosts (tests/hosts: network namespaces + sshd in Debian chroots, real SSH),
installs fleetforge on all of them once (the first run, reported apart), then runs
`fleetforge fleet burnin`'s engine (validation.fleetrun.run_fleet: ansible-runner, the burnin
role, fetch, then the gate as the command line does) on 1, 2 and 4 of them, every host measuring
at once (no throttle, default 5 s polling), one BLAS thread per host. Printed per size: the whole run, the playbook,
and the burn-in phase (first host started to last host done), and each as a ratio to one host.

Read the figures for what they are: all hosts share this machine's CPUs. Each burn-in check runs
for a fixed time (quick: 1 s GEMM, 1 s copy, 5 s stress, ...), so the wall time of the burn-in
phase stays close to one host's while the per-host measurements drop as hosts share cores; what
grows with the host count is the CPU-bound part (Python and Ansible start-up per task and host).
On real nodes, each with its own CPUs, only the controller's share grows (Ansible forks, SSH).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleet.results import read_results  # noqa: E402
from tests.hosts.harness import HostsUnsupported, TestHosts, check_supported  # noqa: E402
from validation.fleetrun.run import FleetRun, FleetRunOptions, run_fleet  # noqa: E402
from validation.gate import decide  # noqa: E402

SIZES = (1, 2, 4)


def machine_busy_s() -> float:
    """CPU seconds this machine has spent busy since boot, all CPUs together (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def controller_cpu_s() -> float:
    """CPU seconds of this process's finished children: ansible-playbook, its forks, ssh, pip."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(
    hosts: TestHosts, names: list[str], work: Path, level: str, tag: str
) -> tuple[FleetRun, float, float, float]:
    inventory = work / f"inventory-{tag}.yml"
    doc = {"all": {"hosts": {h.name: hosts.connection_vars(h) for h in hosts if h.name in names}}}
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    opts = FleetRunOptions(
        inventory=inventory,
        out_dir=work / f"out-{tag}",
        sku="cpu",
        level=level,
        forks=10,
        extravars={"burnin_blas_threads": 1},
    )
    t0, busy0, ctl0 = time.perf_counter(), machine_busy_s(), controller_cpu_s()
    run = run_fleet(opts)
    result = decide([read_results(p) for p in run.fetched], expected=run.expected, host_reasons=run.reasons())
    wall = time.perf_counter() - t0
    busy, controller = machine_busy_s() - busy0, controller_cpu_s() - ctl0
    failed = {h: r.as_dict() for h, r in run.hosts.items() if not r.ok}
    if failed or run.problem or len(run.fetched) != len(names):
        raise SystemExit(f"run on {names} did not complete: {run.problem or failed}")
    rejected = [v.node for v in result.nodes if not v.accepted]
    if rejected:
        print(f"  note: the gate rejected {rejected} (shared CPUs); the timing stands", file=sys.stderr)
    return run, wall, busy, controller


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per size; the median is reported")
    parser.add_argument("--level", default="quick", choices=("quick", "standard", "extended"))
    args = parser.parse_args()
    try:
        check_supported()
    except HostsUnsupported as exc:
        print(f"fleet_run: local test hosts unavailable here: {exc}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="fleet-run-bench-") as tmp, TestHosts(max(SIZES)) as hosts:
        work = Path(tmp)
        names = [h.name for h in hosts]
        print(f"{len(names)} test hosts up; first run installs fleetforge on all of them")
        first, first_wall, _, _ = one_run(hosts, names, work, args.level, "install")
        print(
            f"first run, {len(names)} hosts (install + burn-in): {first_wall:.1f} s, "
            f"burn-in phase {first.timings['burnin']:.1f} s"
        )
        rows: dict[int, list[tuple[float, ...]]] = {n: [] for n in SIZES}
        for rep in range(args.repeat):
            for n in SIZES:
                run, wall, busy, controller = one_run(hosts, names[:n], work, args.level, f"{n}-{rep}")
                rows[n].append((wall, run.timings["burnin"], busy, controller))
        med = {n: tuple(statistics.median(col) for col in zip(*rows[n], strict=True)) for n in SIZES}
        base = med[1]
        cpus = os.cpu_count() or 1
        print(f"\nfleet run, {args.level} level, installed hosts, median of {args.repeat} run(s) per size")
        print(
            f"{'hosts':>5}  {'total s':>8}  {'x 1 host':>8}  {'burn-in s':>9}  {'x 1 host':>8}  "
            f"{'machine CPU s':>13}  {'controller CPU s':>16}  {'CPU floor s':>11}"
        )
        for n in SIZES:
            total, burn, busy, controller = med[n]
            print(
                f"{n:>5}  {total:>8.1f}  {total / base[0]:>8.2f}  {burn:>9.1f}  {burn / base[1]:>8.2f}  "
                f"{busy:>13.1f}  {controller:>16.1f}  {busy / cpus:>11.1f}"
            )
        print(
            f"machine CPU: busy time of all {cpus} CPUs during the run (other work on this machine "
            f"included); CPU floor = machine CPU / {cpus}: no run is shorter on {cpus} CPUs"
        )
        ratio = med[4][0] / base[0]
        verdict = "within" if ratio <= 1.5 else "over"
        print(f"\n4 hosts / 1 host, whole run: {ratio:.2f} ({verdict} the 1.5x target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

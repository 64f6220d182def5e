"""Fleet-run wall time for 1, 2 and 4 hosts, measured in one run (the target: 4 hosts within
1.5x one host).

    sudo .venv/bin/python benchmarks/fleet_run.py [--repeat N] [--level quick]

Starts 4 local test hosts (tests/hosts: network namespaces + sshd in Debian chroots, real SSH),
installs fleetforge on all of them once (the first run, reported apart), then runs
`fleetforge fleet burnin`'s engine (validation.fleetrun.run_fleet: ansible-runner, the burnin
role, fetch, then the gate as the command line does) on 1, 2 and 4 of them, every host measuring
at once (no throttle, default 5 s polling), one BLAS thread per host. The hosts are started with
`TestHosts(take_turns=False)`: the harness's measuring turns (one host of the whole machine
burning in at a time, shared with every test process) would otherwise make the 4-host run four
1-host burn-ins in a row, waiting on other people's test runs too. Run it on a machine no test
suite is using: another test process's host in its turn still outweighs these hosts for the CPU.

Each size runs --repeat times (3 by default), the sizes in alternating order (1, 2, 4 then 4, 2,
1), so drift in the machine's load falls on every size alike. Printed per size: min / median /
max of the whole run, the burn-in phase (first host started to last host done), machine CPU and
controller CPU; the ratios to one host are the medians' ratio and the spread of the per-repeat
ratios (each n-host run against the 1-host run of the same repeat).

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
from fleetforge import install  # noqa: E402
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
    """CPU seconds of this process's children: the finished ones (ansible-playbook, its forks and
    their ssh clients, pip) and the live SSH masters the harness keeps per host, which carry every
    Ansible connection (tests/hosts/harness.py, ControlPath) and so do the encryption."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime + live_children_cpu_s("ssh")


def live_children_cpu_s(comm: str) -> float:
    """CPU seconds so far of this process's live children named comm (from /proc/<pid>/stat)."""
    me, total = os.getpid(), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # ended meanwhile
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        # rest[1] is the parent pid, rest[11] and rest[12] utime and stime (fields 4, 14, 15).
        if name == comm and int(rest[1]) == me:
            total += int(rest[11]) + int(rest[12])
    return total / os.sysconf("SC_CLK_TCK")


def spread(values: list[float], fmt: str = ".1f") -> str:
    """min / median / max."""
    return "/".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def one_run(
    hosts: TestHosts, names: list[str], work: Path, level: str, tag: str
) -> tuple[FleetRun, float, float, float]:
    inventory = work / f"inventory-{tag}.yml"
    doc = {"all": {"hosts": {h.name: hosts.connection_vars(h) for h in hosts if h.name in names}}}
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    opts = FleetRunOptions(
        # As the CLI passes them (fleetforge/run_options.py): the run never finds them itself.
        source=install.source_root(),
        ansible_root=install.ansible_root(),
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
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per size; min / median / max are reported"
    )
    parser.add_argument("--level", default="quick", choices=("quick", "standard", "extended"))
    args = parser.parse_args()
    try:
        check_supported()
    except HostsUnsupported as exc:
        print(f"fleet_run: local test hosts unavailable here: {exc}", file=sys.stderr)
        return 1
    with (
        tempfile.TemporaryDirectory(prefix="fleet-run-bench-") as tmp,
        TestHosts(max(SIZES), take_turns=False) as hosts,
    ):
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
            # Alternating order, so neither end of the size range always runs first.
            for n in SIZES if rep % 2 == 0 else SIZES[::-1]:
                run, wall, busy, controller = one_run(hosts, names[:n], work, args.level, f"{n}-{rep}")
                rows[n].append((wall, run.timings["burnin"], busy, controller))
        cols = {n: [list(col) for col in zip(*rows[n], strict=True)] for n in SIZES}
        med = {n: [statistics.median(col) for col in cols[n]] for n in SIZES}
        cpus = os.cpu_count() or 1
        print(
            f"\nfleet run, {args.level} level, installed hosts, {args.repeat} run(s) per size, "
            "min/median/max; ratios: median's ratio [min-max of the per-repeat ratios]"
        )
        print(
            f"{'hosts':>5}  {'total s':>16}  {'x 1 host':>16}  {'burn-in s':>16}  {'x 1 host':>16}  "
            f"{'machine CPU s':>17}  {'controller CPU s':>17}  {'CPU floor s':>11}"
        )
        for n in SIZES:
            total_s, burn_s, busy_s, controller_s = cols[n]
            ratios = []
            for i in (0, 1):
                per_rep = [a / b for a, b in zip(cols[n][i], cols[1][i], strict=True)]
                ratios.append(f"{med[n][i] / med[1][i]:.2f} [{min(per_rep):.2f}-{max(per_rep):.2f}]")
            print(
                f"{n:>5}  {spread(total_s):>16}  {ratios[0]:>16}  {spread(burn_s):>16}  {ratios[1]:>16}  "
                f"{spread(busy_s):>17}  {spread(controller_s):>17}  {med[n][2] / cpus:>11.1f}"
            )
        print(
            f"machine CPU: busy time of all {cpus} CPUs during the run (other work on this machine "
            f"included); CPU floor = median machine CPU / {cpus}: no run is shorter on {cpus} CPUs; "
            "controller CPU: ansible-playbook, its forks, ssh clients and the harness's SSH masters"
        )
        ratio = med[4][0] / med[1][0]
        verdict = "within" if ratio <= 1.5 else "over"
        per_rep = [a / b for a, b in zip(cols[4][0], cols[1][0], strict=True)]
        print(
            f"\n4 hosts / 1 host, whole run: {ratio:.2f} (per repeat {min(per_rep):.2f}-{max(per_rep):.2f}; "
            f"{verdict} the 1.5x target)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

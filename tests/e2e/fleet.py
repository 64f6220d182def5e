"""Helpers for the end-to-end fleet runs: the test bed's spec, the CLI, the hosts' CPU accounting."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import BIN, ROOT
from tests.hosts.harness import MEASURING_COMMAND, TestHost
from validation.fleetrun.bundle import Bundle

FLEETFORGE = BIN / "fleetforge"

# The test bed: 4 hosts share this machine's 2 cores with whatever else runs here, so the cpu SKU's
# catalog floors (measured on an idle machine) would reject healthy hosts whenever the machine is
# busy. The spec sets floors that only a broken host misses and leaves the slow host to the
# fleet-relative rule: with 4 hosts the MAD comes from the two middle deviations, hence k = 2, and
# a host must be more than 60 % below the median. One host measures at a time on the whole machine
# (in a run: --throttle 1; across the test processes that each run a module of fleet runs: the
# harness's turns, tests/hosts/harness.py MeasuringTurns, which a host capped at SLOW_CPU does not
# wait for: a fifth of a core beside a measuring host), and the harness gives the measuring host
# CPU priority over the rest of the machine (HOSTS_CPU_SHARES, TURN_CPU_SHARES): without
# it a healthy host whose turn came while other processes kept both cores busy measured its
# all-reduce 66-75 % below the others and was rejected. With it, and two busy loops running beside
# the tests, healthy hosts stayed within 8 % of each other on GEMM and memory copy and within 40 %
# of the median on the all-reduce (the noisiest metric); a host capped at a fifth of a core measured
# 81-91 % below them (GEMM 91, memory copy 81, all-reduce 87), the quota caps it whatever its priority.
VALIDATION: dict[str, Any] = {
    "level": "quick",
    "mad_k": 2,
    "min_relative_margin": 0.6,
    "thresholds": {
        "gemm_fp32_tflops": {"floor": 0.001},
        "mem_copy_gbps": {"floor": 0.2},
        "allreduce_busbw_gbps": {"floor": 0.01},
        # The 4 hosts write to this machine's one disk: a storage figure measures the disk's
        # writeback state when the host's turn came (seen: 75 % below the median on a healthy host
        # under load), not the host, so only the floor applies to it, as for a shared file system.
        "storage_read_mbps": {"floor": 2, "fleet_relative": False},
        "storage_write_mbps": {"floor": 2, "fleet_relative": False},
    },
    # Shorter than the quick level's, measuring the same way: every host's burn-in is on the
    # critical path (one host measures at a time), and the judgement reads GEMM, memory copy and the
    # all-reduce, which keep their quick durations. 2 s of load in 0.25 s windows still gives the
    # stress check its throughput ratio; 32 MiB still reads and writes far past the floors. The copy
    # buffers are a quarter of the CPU default (256 MiB), still past any L3: the copy's second is the
    # same, but filling and faulting in the buffers before it took most of the check: 3.4 s -> 1.4 s
    # on a healthy host, 20.8 s -> 3.4 s on one capped at SLOW_CPU (same machine and hour).
    "checks": {
        "stress": {"seconds": 2, "interval_s": 0.25},
        "storage": {"bytes": 32 * 2**20},
        "memory": {"bytes": 64 * 2**20},
    },
}
# A slow host's CPU quota, in cores, from the moment its burn-in starts (tests/hosts/harness.py,
# cpu_limit's once_running; it installs at full speed, as a node that slows under load): at least
# 80 % below the others on every CPU-bound figure, far past the spec's 60 % margin.
SLOW_CPU = 0.2
# What the role runs to burn a host in: the harness takes turns on it across test processes.
BURNIN_COMMAND = MEASURING_COMMAND
# One host at a time measures (--throttle 1), one BLAS thread each, Ansible polls every 2 s.
MEASURE = ["--throttle", "1", "--var", "burnin_blas_threads=1", "--var", "burnin_poll_s=2"]


def write_spec(path: Path, hosts: Sequence[TestHost], nodes: int, spares: int) -> Path:
    spec = {
        "name": "e2e-cpu",
        "cloud": "onprem",
        "sku": "cpu",
        "nodes": nodes,
        "spares": spares,
        "hosts": [{"name": h.name, "address": h.address, "user": h.user} for h in hosts],
        "tags": {"owner": "fleetforge-tests", "dataset": "none"},
        "validation": VALIDATION,
    }
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@dataclass
class CliRun:
    rc: int
    doc: dict[str, Any]
    stderr: str

    def verdict(self, node: str) -> dict[str, Any]:
        return next(n for n in self.doc["nodes"] if n["node"] == node)

    def rejected(self) -> list[str]:
        return [n["node"] for n in self.doc["nodes"] if n["verdict"] == "reject"]

    def explain(self) -> str:
        """What a failing assertion shows: every verdict with its reasons, and the run's progress."""
        lines = [f"exit {self.rc}"]
        for n in self.doc.get("nodes", []):
            lines.append(f"{n['node']}: {n['verdict']} {n.get('metrics')}")
            lines += [f"    {r['rule']}: {r['message']}" for r in n["reasons"]]
        return "\n".join(lines) + "\n--- stderr ---\n" + self.stderr[-4000:]


def fleet_burnin(inventory: Path, out: Path, *args: str, timeout: float = 900) -> CliRun:
    """`fleetforge fleet burnin ... --json` as a user runs it; the JSON document parsed."""
    done = subprocess.run(
        [str(FLEETFORGE), "fleet", "burnin", "-i", str(inventory), "--out", str(out), "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"fleet burnin exited {done.returncode} without a JSON document:\n{done.stdout[-2000:]}\n"
            f"{done.stderr[-4000:]}"
        ) from None
    return CliRun(done.returncode, doc, done.stderr)


def wheelhouse_of(bundle: Bundle, house: Path) -> Path:
    """The bundle's wheel and its dependency wheels in one folder, for --wheelhouse (the air-gapped
    path): every run given it installs the same bytes, whatever changes in the tree meanwhile."""
    house.mkdir()
    with tarfile.open(bundle.deps_tar) as tf:
        tf.extractall(house, filter="data")
    (house / "MANIFEST").unlink()
    shutil.copy2(bundle.wheel, house / bundle.wheel.name)
    return house


def throttled_periods(host: TestHost) -> int:
    """How often the kernel throttled the host's cgroup: proof that a CPU cap bit."""
    stat = dict(line.split() for line in (host.cgroup / "cpu.stat").read_text().splitlines())
    return int(stat["nr_throttled"])

"""End to end: the fabric stage of `fleetforge fleet burnin` on 4 local test hosts, for real: after
the burn-in, 3 rounds of 2 pairs each (torchrun, gloo over the test network, PyTorch installed from
the controller's bundle), attributed, and judged by the gate.

Every host's link is shaped with a token bucket (`tc qdisc ... tbf`) on its bridge-side veth, so the
network, not the 2 shared cores, sets each pair's figure: unshaped, a pair over veth runs as fast as
the CPU moves bytes, which swings with whatever else runs here. The healthy rate (800 Mbit/s,
100 MB/s) is far below what gloo moves over veth even on a busy machine, so healthy pairs agree;
the slow host gets a tenth of it. The pair payload is pinned (4 MiB, 5 timed iterations) so a slow
pair still finishes in seconds.

In order, on the same hosts: (a) all 4 at the healthy rate: none rejected, every host has its pair
figure; (b) h2 at a tenth: h2, and only h2, rejected with a reason naming the pairs it was slow in;
(c) h3 killed (sshd and all under it) once round 2 has started: h3 rejected as unreachable, its
failed pairs attributed to it, the others accepted on the pairs that completed.

The healthy run (a) also proves the whole-fleet all-reduce before the rounds: torchrun's c10d
rendezvous over the test network across the 4 hosts, gloo on CPUs, PyTorch installed on the hosts
from the controller's bundle (`--extra-package torch==2.13.0`: the hosts have no index). Where pip
cannot get that exact version of PyTorch this module skips and says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from fleet.metrics import FABRIC_METRIC, MULTINODE_CHECK, MULTINODE_METRIC
from fleet.results import read_results
from fleetforge import exitcodes
from tests.conftest import ROOT
from tests.e2e.fleet import FLEETFORGE, MEASURE, CliRun, fleet_burnin, write_spec
from tests.hosts.fixtures import HostPool
from tests.hosts.harness import TestHosts

pytestmark = pytest.mark.hosts

TORCH = "torch==2.13.0"
HEALTHY = "800mbit"
SLOW = "80mbit"
PAIR = ["--var", "burnin_fabric_bytes=4194304", "--var", "burnin_fabric_iters=5"]


def _torch_missing() -> str | None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
            TORCH,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return None if done.returncode == 0 else f"pip cannot get {TORCH} here: {done.stderr.strip()[-300:]}"


@pytest.fixture(scope="module")
def hosts(host_pool: HostPool) -> TestHosts:
    why = _torch_missing()
    if why is not None:
        pytest.skip(why)
    return host_pool.fresh(4)


@pytest.fixture(scope="module")
def bed(hosts: TestHosts, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("fabric")
    return {
        "base": base,
        "inventory": hosts.write_inventory(base / "inventory.yml"),
        "spec": write_spec(base / "fleet.yaml", list(hosts), nodes=3, spares=1),
    }


@contextmanager
def shaped(hosts: TestHosts, rates: Mapping[str, str]) -> Iterator[None]:
    """Each named host's inbound link (its bridge-side veth's egress) limited to its rate."""
    done: list[str] = []
    try:
        for host in hosts:
            rate = rates[host.name]
            burst = "512kb" if rate == HEALTHY else "64kb"
            subprocess.run(
                [
                    "tc",
                    "qdisc",
                    "replace",
                    "dev",
                    host.veth,
                    "root",
                    "tbf",
                    "rate",
                    rate,
                    "burst",
                    burst,
                    "latency",
                    "100ms",
                ],
                check=True,
                capture_output=True,
            )
            done.append(host.veth)
        yield
    finally:
        for veth in done:
            subprocess.run(["tc", "qdisc", "del", "dev", veth, "root"], capture_output=True)


def run(bed: dict[str, Path], name: str, *args: str) -> tuple[CliRun, float]:
    t0 = time.monotonic()
    result = fleet_burnin(
        bed["inventory"],
        bed["base"] / name,
        "--sku",
        "cpu",
        "--level",
        "quick",
        "--spec",
        str(bed["spec"]),
        "--extra-package",
        TORCH,
        "--collectives-timeout",
        "240",
        *PAIR,
        *MEASURE,
        *args,
        timeout=1800,
    )
    return result, time.monotonic() - t0


def figures(result: CliRun) -> dict[str, float]:
    return {n["node"]: n["metrics"].get(FABRIC_METRIC) for n in result.doc["nodes"]}


@pytest.fixture(scope="module")
def healthy(hosts: TestHosts, bed: dict[str, Path]) -> tuple[CliRun, float]:
    with shaped(hosts, {h.name: HEALTHY for h in hosts}):
        return run(bed, "healthy")


def test_the_whole_fleet_all_reduces_through_torchrun_before_the_rounds(
    healthy: tuple[CliRun, float],
) -> None:
    result, _ = healthy
    assert result.rc == exitcodes.OK, result.explain()
    summary = result.doc["fleet_run"]
    assert any(w.startswith("torch-2.13.0") for w in summary["bundle"]["deps_wheels"])
    busbw = {}
    for name in ("h0", "h1", "h2", "h3"):
        assert summary["hosts"][name]["collectives_rc"] == 0, summary["hosts"][name]
        checks = read_results(Path(summary["results_dir"]) / f"{name}.jsonl").checks
        (record,) = [c for c in checks if c.check == MULTINODE_CHECK]
        assert record.status == "pass" and record.backend == "torch-gloo", record
        assert record.versions["torch"].startswith("2.13.0")
        assert "4 nodes, 4 ranks" in record.findings[0]
        busbw[name] = record.metrics[MULTINODE_METRIC]
        # With PyTorch there, the intra-node all-reduce goes through gloo as well.
        (intra,) = [c for c in checks if c.check == "collectives"]
        assert intra.status == "pass"
    # One collective, one answer: every node records the same (slowest rank's) bandwidth.
    assert len(set(busbw.values())) == 1 and busbw["h0"] > 0
    assert result.verdict("h0")["metrics"][MULTINODE_METRIC] == busbw["h0"]


def test_a_healthy_fleet_has_every_pair_measured_and_no_host_rejected(
    healthy: tuple[CliRun, float],
) -> None:
    result, wall = healthy
    fabric = result.doc["fleet_run"]["fabric"]
    print(f"\nhealthy: {wall:.0f} s, fabric {fabric['seconds']:.0f} s, figures {figures(result)}")
    assert result.rejected() == [], result.explain()
    assert fabric["status"] == "measured", fabric
    assert len(fabric["rounds"]) == 3 and len(fabric["pairs"]) == 6
    assert all(p["busbw_gbps"] for p in fabric["pairs"]), fabric["pairs"]
    assert fabric["attribution"]["guilty"] == [] and fabric["attribution"]["suspect_links"] == []
    assert all(v and v > 0 for v in figures(result).values()), result.explain()


def test_the_host_with_a_slowed_link_alone_is_rejected_naming_its_pairs(
    hosts: TestHosts, bed: dict[str, Path]
) -> None:
    rates = {h.name: HEALTHY for h in hosts} | {"h2": SLOW}
    with shaped(hosts, rates):
        # Installed with PyTorch by the run before.
        result, wall = run(bed, "slow", "--var", "burnin_install=false", "--strict")
    fabric = result.doc["fleet_run"]["fabric"]
    print(f"\nslow h2: {wall:.0f} s, fabric {fabric['seconds']:.0f} s, figures {figures(result)}")
    print("pairs:", [(p["hosts"], p["busbw_gbps"]) for p in fabric["pairs"]])
    assert result.rejected() == ["h2"], result.explain()
    assert [g["host"] for g in fabric["attribution"]["guilty"]] == ["h2"], fabric["attribution"]
    reasons = [r["message"] for r in result.verdict("h2")["reasons"] if r["message"].startswith("fabric: ")]
    assert reasons, result.explain()
    assert all(p in reasons[0] for p in ("h0", "h1", "h3")), reasons
    got = figures(result)
    healthy = [got[h] for h in ("h0", "h1", "h3")]
    assert max(healthy) < 0.2 and got["h2"] < min(healthy) / 3, got


def test_a_host_lost_mid_stage_is_rejected_as_unreachable_and_the_others_judged_on_their_pairs(
    hosts: TestHosts, bed: dict[str, Path]
) -> None:
    out = bed["base"] / "lost"
    argv = [
        str(FLEETFORGE), "fleet", "burnin", "-i", str(bed["inventory"]), "--out", str(out), "--json",
        "--sku", "cpu", "--level", "quick", "--spec", str(bed["spec"]), "--extra-package", TORCH,
        "--collectives-timeout", "240", "--fabric-timeout", "60", *PAIR, *MEASURE,
        "--var", "burnin_install=false",  # installed with PyTorch by the healthy run
    ]  # fmt: skip
    artifacts = out / "ansible" / "artifacts"
    with shaped(hosts, {h.name: HEALTHY for h in hosts}):
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        try:
            # The burn-in play, then one play per round: the third play is round 2.
            deadline = time.monotonic() + 1500
            while proc.poll() is None and time.monotonic() < deadline:
                if artifacts.is_dir() and len(list(artifacts.iterdir())) >= 3:
                    break
                time.sleep(1)
            assert proc.poll() is None, "the run ended before its second round"
            time.sleep(5)  # the pairs are started
            hosts.stop(hosts.by_name("h3"))
            stdout, stderr = proc.communicate(timeout=1500)
        finally:
            if proc.poll() is None:
                proc.kill()
    result = CliRun(proc.returncode, json.loads(stdout), stderr)
    fabric = result.doc["fleet_run"]["fabric"]
    print(f"\nlost h3: figures {figures(result)}, unreachable {fabric['unreachable']}")
    print("pairs:", [(p["hosts"], p["busbw_gbps"], p["reason"]) for p in fabric["pairs"]])
    assert result.rejected() == ["h3"], result.explain()
    messages = [r["message"] for r in result.verdict("h3")["reasons"]]
    assert any(m.startswith("unreachable during the fabric rounds: ") for m in messages), messages
    failed = [p for p in fabric["pairs"] if p["busbw_gbps"] is None]
    assert failed and all("h3" in p["hosts"] for p in failed), fabric["pairs"]
    for h in ("h0", "h1", "h2"):
        assert (figures(result)[h] or 0) > 0, result.explain()
    assert result.doc["fleet"]["ready"] is True  # the spare covers h3

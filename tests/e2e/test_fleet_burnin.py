"""End to end: `fleetforge fleet burnin` over real SSH to 4 local test hosts (tests/hosts), through
ansible-runner, the burnin role, the fabric stage and the gate. The CPU burn-in (`--sku cpu --level
quick`) runs on each host from the fleetforge the role installed there from the controller's bundle,
without any package index.

One module, one set of hosts, in order:
  check mode    the role in --check on a fresh host fails nothing and creates nothing
  down, slow    h3's sshd and everything under it killed, h2 capped at a fifth of a core for real
                (cgroup CPU quota) once its burn-in starts: h3 rejected as unreachable with Ansible's
                message, h2 on what it measured, naming the metric; h0 and h1 installed (without
                PyTorch), burned in and accepted; the all-reduce across nodes is a skip that says
                PyTorch is missing; two hosts cannot field the job of three, the gate fails
  healthy       all 4, PyTorch installed from the bundle (`--extra-package torch==2.13.0`:
                the hosts have no index): every host accepted, results fetched, the whole fleet
                all-reduces (one rank per host: rendezvous over the test network, gloo), then 3
                rounds of 2 pairs each measure every pair, and no host is rejected
  slow link     h2's link at a tenth of the others': h2, and only h2, rejected naming its pairs; the
                whole fleet's all-reduce ran again with h2 in it before the rounds; reinstalling
                changed nothing
  lost          h3 killed once round 2 of 2 has started: h3 rejected as unreachable, its failed pair
                attributed to it, the others accepted on the pairs that completed
The last two rerun only the host they are about (`--limit`) on a copy of the healthy run's results,
as an operator reruns a host after a fix; the fabric rounds still pair all four.

Every host's link is shaped with a token bucket (`tc qdisc ... tbf`) on its bridge-side veth for the
fabric rounds, so the network, not the 2 shared cores, sets each pair's figure: unshaped, a pair over
veth runs as fast as the CPU moves bytes, which swings with whatever else runs here. The healthy rate
(800 Mbit/s, 100 MB/s) is far below what gloo moves over veth even on a busy machine, so healthy pairs
agree; the slow link gets a tenth of it. The pair payload is pinned (4 MiB, 5 timed iterations) so a
slow pair still finishes in seconds. Where pip cannot get that exact PyTorch the tests that need it
skip and say so.

Why the hosts measure one at a time and what the spec's rules are: tests/e2e/fleet.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from fleet.metrics import FABRIC_METRIC, MULTINODE_CHECK, MULTINODE_METRIC
from fleet.results import read_results
from fleetforge import exitcodes
from tests.conftest import BIN, ROOT
from tests.e2e.fleet import (
    BURNIN_COMMAND,
    FLEETFORGE,
    MEASURE,
    SLOW_CPU,
    CliRun,
    fleet_burnin,
    throttled_periods,
    wheelhouse_of,
    write_spec,
)
from tests.hosts.fixtures import HostPool
from tests.hosts.harness import TestHosts
from validation.fleetrun.bundle import Bundle
from validation.fleetrun.events import BURNIN_TASK, COLLECTIVES_TASK, FETCH_TASK

pytestmark = [pytest.mark.hosts, pytest.mark.measures]

CPU_METRICS = {
    "gemm_fp32_tflops",
    "mem_copy_gbps",
    "allreduce_busbw_gbps",
    "storage_read_mbps",
    "storage_write_mbps",
}
# Tasks that change something on every run; everything else (the installation) must not change twice.
EVERY_RUN = {BURNIN_TASK, "Start the all-reduce across nodes", FETCH_TASK}
TORCH = "torch==2.13.0"
HEALTHY = "800mbit"
SLOW = "80mbit"
PAIR = ["--var", "burnin_fabric_bytes=4194304", "--var", "burnin_fabric_iters=5"]


@pytest.fixture(scope="module")
def hosts(host_pool: HostPool) -> TestHosts:
    return host_pool.fresh(4)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    """The tree's bundle, built once for the module (the check-mode run and the wheelhouse)."""
    from fleetforge.install import source_root
    from validation.fleetrun.bundle import build_bundle
    from validation.fleetrun.run import default_cache

    return build_bundle(tmp_path_factory.mktemp("bundle"), default_cache(), source=source_root())


@pytest.fixture(scope="module")
def bed(hosts: TestHosts, bundle: Bundle, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("fleet")
    return {
        "base": base,
        "inventory": hosts.write_inventory(base / "inventory.yml"),
        "spec": write_spec(base / "fleet.yaml", list(hosts), nodes=3, spares=1),
        "wheelhouse": wheelhouse_of(bundle, base / "wheelhouse"),
    }


def fleet_args(bed: dict[str, Path], *args: str) -> list[str]:
    """The options every run here shares: the bed's spec, one host measuring at a time, the pairs."""
    return [
        "--sku", "cpu", "--level", "quick", "--spec", str(bed["spec"]), "--collectives-timeout", "240",
        *PAIR, *MEASURE, *args,
    ]  # fmt: skip


def run(bed: dict[str, Path], name: str, *args: str) -> tuple[CliRun, float]:
    t0 = time.monotonic()
    result = fleet_burnin(bed["inventory"], bed["base"] / name, *fleet_args(bed, *args), timeout=1800)
    return result, time.monotonic() - t0


def rerun_out(bed: dict[str, Path], name: str) -> Path:
    """A new --out holding the healthy run's results: a --limit rerun judges the hosts it does not
    burn in again on them."""
    out = bed["base"] / name
    shutil.copytree(bed["base"] / "healthy" / "results", out / "results")
    return out


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


def figures(result: CliRun) -> dict[str, float]:
    return {n["node"]: n["metrics"].get(FABRIC_METRIC) for n in result.doc["nodes"]}


def test_check_mode_on_fresh_hosts_fails_nothing_and_creates_nothing(
    hosts: TestHosts, bed: dict[str, Path], bundle: Bundle
) -> None:
    import ansible_runner

    from fleetforge.install import ansible_root
    from validation.fleetrun.run import FleetRunOptions, ansible_env, playbook_paths, role_vars

    playbook, roles = playbook_paths(ansible_root())
    opts = FleetRunOptions(
        inventory=bed["inventory"], out_dir=bed["base"] / "check", sku="cpu", level="quick"
    )
    (bed["base"] / "check" / "ansible").mkdir(parents=True)
    runner = ansible_runner.run(
        private_data_dir=str(bed["base"] / "check" / "ansible"),
        project_dir=str(playbook.parent),
        playbook=playbook.name,
        inventory=str(bed["inventory"]),
        roles_path=[str(roles)],
        extravars=role_vars(opts, bundle, bed["base"] / "check" / "results"),
        envvars={**ansible_env(), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
        cmdline="--check",
        limit="h0",
        quiet=True,
    )
    stats = runner.stats
    assert runner.status == "successful", runner.stdout.read()[-3000:]
    assert not stats["failures"] and not stats["dark"]
    assert stats["changed"].get("h0", 0) > 0  # it would install, and says so
    assert (
        hosts.ssh(hosts[0], "test -e /opt/fleetforge || test -e /var/lib/fleetforge", check=False).returncode
        == 1
    )


def test_an_unreachable_host_and_a_slow_one_are_each_rejected_for_what_they_are(
    hosts: TestHosts, bed: dict[str, Path]
) -> None:
    down, slow = hosts.by_name("h3"), hosts.by_name("h2")
    hosts.stop(down)
    before = throttled_periods(slow)
    try:
        with hosts.cpu_limit(slow, SLOW_CPU, once_running=BURNIN_COMMAND):
            result, _ = run(bed, "down", "--wheelhouse", str(bed["wheelhouse"]))
    finally:
        hosts.reset(down)
    assert throttled_periods(slow) > before  # the cap really bit
    assert result.rejected() == ["h2", "h3"], result.explain()
    # h3: unreachable, with Ansible's message, and nothing else.
    reasons = result.verdict("h3")["reasons"]
    assert len(reasons) == 1, result.explain()
    assert reasons[0]["rule"] == "missing"
    assert reasons[0]["message"].startswith("unreachable: ") and "ssh" in reasons[0]["message"].lower()
    summary = result.doc["fleet_run"]
    assert summary["hosts"]["h3"]["unreachable"] and not (Path(summary["results_dir"]) / "h3.jsonl").exists()
    # h2: on what it measured, naming the metric.
    measured = [
        r
        for r in result.verdict("h2")["reasons"]
        if r["rule"] in ("outlier", "floor") and r["metric"] in CPU_METRICS
    ]
    assert measured, result.explain()
    for r in measured:
        assert r["metric"] in r["message"] and isinstance(r["measured"], float)
    # Two healthy hosts cannot field a job of three: the gate fails.
    assert result.doc["fleet"]["ready"] is False and result.rc == exitcodes.REJECTED, result.explain()
    for name in ("h0", "h1", "h2"):
        host = summary["hosts"][name]
        assert host["ok"] and host["burnin_rc"] == 0 and host["collectives_rc"] == 0, host
        # What the gate judged came from that host: its own run, at the level asked for.
        results = read_results(Path(summary["results_dir"]) / f"{name}.jsonl")
        (run_record,) = results.runs
        assert (run_record.node, run_record.sku, run_record.level) == (name, "cpu", "quick")
        assert set(result.verdict(name)["metrics"]) >= CPU_METRICS
        # Without PyTorch on the hosts the all-reduce across nodes is a skip that says why.
        multinode = [c for c in results.checks if c.check == MULTINODE_CHECK]
        assert [c.status for c in multinode] == ["skip"] and "PyTorch is not installed" in (
            multinode[0].reason or ""
        )
    installed = hosts.ssh(hosts[1], "/opt/fleetforge/venv/bin/fleetforge --version").stdout.strip()
    assert installed.startswith("fleetforge ")


@pytest.fixture(scope="module")
def healthy(hosts: TestHosts, bed: dict[str, Path]) -> tuple[CliRun, float]:
    why = _torch_missing()
    if why is not None:
        pytest.skip(why)
    junit, accepted = bed["base"] / "gate.xml", bed["base"] / "accepted.yml"
    with shaped(hosts, {h.name: HEALTHY for h in hosts}):
        return run(
            bed, "healthy", "--extra-package", TORCH, "--junit", str(junit), "--inventory-out", str(accepted)
        )


def test_a_healthy_fleet_is_burned_in_and_every_host_accepted(
    hosts: TestHosts, bed: dict[str, Path], healthy: tuple[CliRun, float]
) -> None:
    result, _ = healthy
    assert result.rc == exitcodes.OK, result.explain()
    assert result.rejected() == [], result.explain()
    fleet = result.doc["fleet"]
    assert fleet["ready"] is True and len(fleet["job"]) == 3 and len(fleet["spare"]) == 1
    summary = result.doc["fleet_run"]
    assert summary["expected"] == ["h0", "h1", "h2", "h3"] and summary["problem"] is None
    for name in summary["expected"]:
        host = summary["hosts"][name]
        assert host["burnin_rc"] == 0 and host["collectives_rc"] == 0 and host["ok"], host
        (run_record,) = read_results(Path(summary["results_dir"]) / f"{name}.jsonl").runs
        assert (run_record.node, run_record.sku, run_record.level) == (name, "cpu", "quick")
        assert set(result.verdict(name)["metrics"]) >= CPU_METRICS
    junit = (bed["base"] / "gate.xml").read_text()
    assert 'failures="0"' in junit and 'errors="0"' in junit
    accepted = yaml.safe_load((bed["base"] / "accepted.yml").read_text())
    groups = accepted["all"]["children"]["fleetforge_accepted"]["children"]
    assert len(groups["fleetforge_job"]["hosts"]) == 3 and len(groups["fleetforge_spare"]["hosts"]) == 1


def test_the_whole_fleet_all_reduces_before_the_rounds(
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
    # The cpu SKU's fabric has no RDMA NICs: no pair probed for ib_write_bw, and the record says why.
    ib = fabric["ib_write_bw"]
    assert ib["pairs"] == [] and ib["skipped"] == [] and "no RDMA NICs" in ib["off"], ib


def test_the_host_with_a_slowed_link_alone_is_rejected_naming_its_pairs(
    hosts: TestHosts, bed: dict[str, Path], healthy: tuple[CliRun, float]
) -> None:
    rates = {h.name: HEALTHY for h in hosts} | {"h2": SLOW}
    out = rerun_out(bed, "slow-link")
    with shaped(hosts, rates):
        result, wall = run(bed, "slow-link", "--limit", "h2", "--extra-package", TORCH, "--strict")
    fabric = result.doc["fleet_run"]["fabric"]
    print(f"\nslow h2: {wall:.0f} s, fabric {fabric['seconds']:.0f} s, figures {figures(result)}")
    print("pairs:", [(p["hosts"], p["busbw_gbps"]) for p in fabric["pairs"]])
    assert result.rejected() == ["h2"], result.explain()
    assert result.rc == exitcodes.REJECTED, result.explain()
    # The rounds paired all four: the rerun host with partners proven healthy.
    assert len(fabric["rounds"]) == 3 and len(fabric["pairs"]) == 6, fabric
    assert [g["host"] for g in fabric["attribution"]["guilty"]] == ["h2"], fabric["attribution"]
    reasons = [r["message"] for r in result.verdict("h2")["reasons"] if r["message"].startswith("fabric: ")]
    assert reasons, result.explain()
    assert all(p in reasons[0] for p in ("h0", "h1", "h3")), reasons
    got = figures(result)
    healthy_figures = [got[h] for h in ("h0", "h1", "h3")]
    assert max(healthy_figures) < 0.2 and got["h2"] < min(healthy_figures) / 3, got
    # Before the rounds, the whole fleet's all-reduce ran again with h2 in it, not h2 alone: every
    # host's latest record of it spans the four (validation/fleetrun/rerun.py).
    collective = result.doc["fleet_run"]["fleet_collective"]
    assert collective["status"] == "measured" and collective["written"] == ["h0", "h1", "h2", "h3"], (
        collective
    )
    for name in ("h0", "h1", "h2", "h3"):
        checks = read_results(out / "results" / f"{name}.jsonl").checks
        latest = [c for c in checks if c.check == MULTINODE_CHECK][-1]
        assert latest.status == "pass" and "4 nodes, 4 ranks" in latest.findings[0], latest
    assert not [r for r in result.verdict("h2")["reasons"] if r["metric"] == MULTINODE_METRIC], (
        result.explain()
    )
    # The installation ran again, with the healthy run's bundle, and changed nothing.
    host = result.doc["fleet_run"]["hosts"]["h2"]
    assert host["ok"] and host["burnin_rc"] == 0, host
    assert set(host["changed"]) <= EVERY_RUN, host["changed"]
    assert COLLECTIVES_TASK not in host["changed"]


def test_a_host_lost_mid_stage_is_rejected_as_unreachable_and_the_others_judged_on_their_pairs(
    hosts: TestHosts, bed: dict[str, Path], healthy: tuple[CliRun, float]
) -> None:
    out = rerun_out(bed, "lost")
    argv = [
        str(FLEETFORGE), "fleet", "burnin", "-i", str(bed["inventory"]), "--out", str(out), "--json",
        # The all-reduce across the fleet is off: the rounds are what this run is about.
        *fleet_args(
            bed, "--limit", "h3", "--no-collectives", "--fabric-rounds", "2", "--fabric-timeout", "45",
            "--var", "burnin_install=false",
        ),
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

"""End to end: `fleetforge fleet burnin` over real SSH to 4 local test hosts (tests/hosts), through
ansible-runner, the burnin role and the gate; the CPU burn-in (`--sku cpu --level quick`) runs on
each host from the fleetforge the role installed there from a wheelhouse, without any package index.

In order, on the same 4 hosts (fresh from the session's pool for this module):
  check mode    the role in --check on fresh hosts fails nothing and creates nothing
  (a) healthy   all 4 accepted; results fetched; fleet ready (3 nodes + 1 spare)
  (b) slow      h2 capped at a tenth of a core for real (cgroup CPU quota): exactly h2 rejected,
                with a reason naming the metric; the others accepted
  (c) down      h3's sshd and everything under it killed: h3 rejected as unreachable with Ansible's
                message, the others accepted, the spare covers it; the installation is idempotent

Why the hosts measure one at a time and what the spec's rules are: tests/e2e/fleet.py.
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from fleet.results import read_results
from fleetforge import exitcodes
from tests.e2e.fleet import MEASURE, CliRun, fleet_burnin, throttled_periods, write_spec
from tests.hosts.fixtures import HostPool
from tests.hosts.harness import TestHosts
from validation.fleetrun.bundle import Bundle
from validation.fleetrun.events import BURNIN_TASK, COLLECTIVES_TASK, FETCH_TASK

pytestmark = pytest.mark.hosts

CPU_METRICS = {
    "gemm_fp32_tflops",
    "mem_copy_gbps",
    "allreduce_busbw_gbps",
    "storage_read_mbps",
    "storage_write_mbps",
}
# Tasks that change something on every run; everything else (the installation) must not change twice.
EVERY_RUN = {BURNIN_TASK, "Start the all-reduce across nodes", FETCH_TASK}


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


def wheelhouse_of(bundle: Bundle, house: Path) -> Path:
    """The bundle's wheel and its dependency wheels in one folder, made once: every run installs from
    it with --wheelhouse (the air-gapped path), so the runs install the same bytes whatever else
    changes in the working tree meanwhile, and the last run can show that reinstalling changes nothing."""
    house.mkdir()
    with tarfile.open(bundle.deps_tar) as tf:
        tf.extractall(house, filter="data")
    (house / "MANIFEST").unlink()
    shutil.copy2(bundle.wheel, house / bundle.wheel.name)
    return house


def run(bed: dict[str, Path], name: str, *args: str) -> CliRun:
    return fleet_burnin(
        bed["inventory"],
        bed["base"] / name,
        "--sku",
        "cpu",
        "--level",
        "quick",
        "--spec",
        str(bed["spec"]),
        "--wheelhouse",
        str(bed["wheelhouse"]),
        *MEASURE,
        *args,
    )


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
        envvars={**ansible_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"},
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


def test_a_healthy_fleet_is_burned_in_and_every_host_accepted(hosts: TestHosts, bed: dict[str, Path]) -> None:
    junit = bed["base"] / "gate.xml"
    accepted = bed["base"] / "accepted.yml"
    result = run(bed, "healthy", "--junit", str(junit), "--inventory-out", str(accepted))
    assert result.rc == exitcodes.OK, result.explain()
    assert result.rejected() == [], result.explain()
    fleet = result.doc["fleet"]
    assert fleet["ready"] is True and len(fleet["job"]) == 3 and len(fleet["spare"]) == 1
    summary = result.doc["fleet_run"]
    assert summary["expected"] == ["h0", "h1", "h2", "h3"] and summary["problem"] is None
    for name in summary["expected"]:
        host = summary["hosts"][name]
        assert host["burnin_rc"] == 0 and host["collectives_rc"] == 0 and host["ok"], host
        # What the gate judged came from that host: its own run, at the level asked for.
        results = read_results(Path(summary["results_dir"]) / f"{name}.jsonl")
        (run_record,) = results.runs
        assert (run_record.node, run_record.sku, run_record.level) == (name, "cpu", "quick")
        verdict = result.verdict(name)
        assert set(verdict["metrics"]) >= CPU_METRICS
        # Without PyTorch on the hosts the all-reduce across nodes is a skip that says why.
        multinode = [c for c in results.checks if c.check == "multinode_collectives"]
        assert [c.status for c in multinode] == ["skip"] and "PyTorch is not installed" in (
            multinode[0].reason or ""
        )
    installed = hosts.ssh(hosts[1], "/opt/fleetforge/venv/bin/fleetforge --version").stdout.strip()
    assert installed.startswith("fleetforge ")
    assert 'failures="0"' in junit.read_text() and 'errors="0"' in junit.read_text()
    groups = yaml.safe_load(accepted.read_text())["all"]["children"]["fleetforge_accepted"]["children"]
    assert len(groups["fleetforge_job"]["hosts"]) == 3 and len(groups["fleetforge_spare"]["hosts"]) == 1


def test_a_host_slowed_for_real_is_the_one_rejected_naming_the_metric(
    hosts: TestHosts, bed: dict[str, Path]
) -> None:
    slow = hosts.by_name("h2")
    before = throttled_periods(slow)
    with hosts.cpu_limit(slow, 0.1):
        # Installed by the run before; --strict: a reject fails even though the spare covers it.
        result = run(bed, "slow", "--var", "burnin_install=false", "--strict")
    assert throttled_periods(slow) > before  # the cap really bit
    assert result.rejected() == ["h2"], result.explain()
    assert result.rc == exitcodes.REJECTED, result.explain()
    reasons = result.verdict("h2")["reasons"]
    measured = [r for r in reasons if r["rule"] in ("outlier", "floor") and r["metric"] in CPU_METRICS]
    assert measured, result.explain()
    for r in measured:
        assert r["metric"] in r["message"] and isinstance(r["measured"], float)
    assert result.doc["fleet"]["ready"] is True  # three healthy hosts still field the job


def test_an_unreachable_host_is_rejected_as_unreachable_and_the_rest_accepted(
    hosts: TestHosts, bed: dict[str, Path]
) -> None:
    down = hosts.by_name("h3")
    hosts.stop(down)
    result = run(bed, "down")
    assert result.rejected() == ["h3"], result.explain()
    reasons = result.verdict("h3")["reasons"]
    assert len(reasons) == 1, result.explain()
    assert reasons[0]["rule"] == "missing"
    assert reasons[0]["message"].startswith("unreachable: ") and "ssh" in reasons[0]["message"].lower()
    # The spare covers it: the fleet can field its 3 nodes, so the gate passes without --strict.
    assert result.rc == exitcodes.OK and result.doc["fleet"]["ready"] is True, result.explain()
    summary = result.doc["fleet_run"]
    assert summary["hosts"]["h3"]["unreachable"] and not (Path(summary["results_dir"]) / "h3.jsonl").exists()
    # The installation ran again and changed nothing: only measuring and fetching did.
    for name in ("h0", "h1", "h2"):
        host = summary["hosts"][name]
        assert host["ok"] and host["burnin_rc"] == 0, host
        assert set(host["changed"]) <= EVERY_RUN, host["changed"]
        assert COLLECTIVES_TASK not in host["changed"]

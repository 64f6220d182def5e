"""End to end: the all-reduce across nodes for real, torchrun's c10d rendezvous over the test
network between 2 hosts, gloo on CPUs, with PyTorch installed on the hosts from the controller's
bundle (`--extra-package torch==2.13.0`: the hosts have no index).

PyTorch comes from the machine's pip source (about 190 MB, the CPU build); where pip cannot get
that exact version this module skips and says so. About 2 minutes on 2 shared cores.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fleet.results import read_results
from fleetforge import exitcodes
from tests.e2e.fleet import MEASURE, fleet_burnin, write_spec
from tests.hosts.fixtures import HostPool
from tests.hosts.harness import TestHosts
from validation.burnin.multinode import CHECK, METRIC

pytestmark = pytest.mark.hosts

TORCH = "torch==2.13.0"


def _torch_obtainable() -> str | None:
    """None when pip can get TORCH as a wheel here (a dry run resolves it), else why not."""
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
    why = _torch_obtainable()
    if why is not None:
        pytest.skip(why)
    return host_pool.fresh(2)


def test_all_reduce_across_two_hosts_through_torchrun(hosts: TestHosts, tmp_path: Path) -> None:
    inventory = hosts.write_inventory(tmp_path / "inventory.yml")
    # Two hosts are too few for fleet statistics: the gate applies the spec's absolute rules only.
    spec = write_spec(tmp_path / "fleet.yaml", list(hosts), nodes=2, spares=0)
    result = fleet_burnin(
        inventory,
        tmp_path / "out",
        "--sku",
        "cpu",
        "--level",
        "quick",
        "--spec",
        str(spec),
        "--extra-package",
        TORCH,
        "--collectives-timeout",
        "240",
        *MEASURE,
    )
    assert result.rc == exitcodes.OK and result.rejected() == [], result.explain()
    summary = result.doc["fleet_run"]
    assert any(w.startswith("torch-2.13.0") for w in summary["bundle"]["deps_wheels"])
    busbw = {}
    for name in ("h0", "h1"):
        assert summary["hosts"][name]["collectives_rc"] == 0, summary["hosts"][name]
        checks = read_results(Path(summary["results_dir"]) / f"{name}.jsonl").checks
        (record,) = [c for c in checks if c.check == CHECK]
        assert record.status == "pass" and record.backend == "torch-gloo", record
        assert record.versions["torch"].startswith("2.13.0")
        assert "2 nodes, 2 ranks" in record.findings[0]
        busbw[name] = record.metrics[METRIC]
        # With PyTorch there, the intra-node all-reduce goes through gloo as well.
        (intra,) = [c for c in checks if c.check == "collectives"]
        assert intra.status == "pass"
    # One collective, one answer: every node records the same (slowest rank's) bandwidth.
    assert busbw["h0"] == busbw["h1"] > 0
    assert result.verdict("h0")["metrics"][METRIC] == busbw["h0"]

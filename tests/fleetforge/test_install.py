"""An installed fleetforge, as a node gets it.

The wheel is built the way `fleet burnin` builds the node's (validation/fleetrun/bundle.py: `pip
wheel --no-deps` from a copy of the tree) and must carry the Ansible content under
fleetforge/ansible/. A fresh virtual environment (no system site packages) then gets the wheel
without extras, its core dependencies from the package index through pip's cache, and burns the
node in: no Pulumi, Ansible, cloud SDK or PyTorch there, and none needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleet.results import read_results
from tests.conftest import ROOT
from tests.hosts.harness import measuring_turn
from validation.fleetrun import bundle
from validation.fleetrun.run import default_cache

# The module's node burns in this machine: scripts/test runs it before the test hosts start.
pytestmark = pytest.mark.measures_this_machine

ANSIBLE = "fleetforge/ansible/"
# Top-level modules of the extras (and of torch, which a fleet run adds with --extra-package).
NOT_ON_A_NODE = (
    "pulumi",
    "pulumi_aws",
    "pulumi_gcp",
    "pulumi_azure_native",
    "ansible",
    "ansible_runner",
    "boto3",
    "google.cloud.compute",
    "azure.mgmt.compute",
    "kubernetes",
    "pynvml",
    "matplotlib",
    "torch",
)
NODE_SPEC = {
    "name": "install-node",
    "cloud": "onprem",
    "sku": "cpu",
    "nodes": 1,
    "hosts": [{"name": "node-1", "address": "127.0.0.1"}],
    "tags": {"owner": "fleetforge-tests", "dataset": "none"},
    "validation": {"thresholds": {"storage_read_mbps": {"floor": 2}, "storage_write_mbps": {"floor": 2}}},
}
# What a node imports: the ground, the front door, and the node side of validation.
NODE_PACKAGES = ("fleet", "fleetforge", "validation.burnin")

# Runs inside the node's environment; prints one JSON object.
PROBE = """
import importlib, json, pkgutil, sys
from pathlib import Path
import fleetforge
from fleetforge import install
from validation.fleetrun.run import playbook_paths

present = []
for name in sys.argv[1].split(","):
    try:
        importlib.import_module(name)
    except ImportError:
        continue
    present.append(name)
broken = {}
for top in sys.argv[2].split(","):
    package = importlib.import_module(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        try:
            importlib.import_module(info.name)
        except BaseException as exc:
            broken[info.name] = f"{type(exc).__name__}: {exc}"
root = install.ansible_root()
print(json.dumps({
    "package": str(Path(fleetforge.__file__).resolve().parent),
    "source_root": None if install.source_root() is None else str(install.source_root()),
    "ansible_root": None if root is None else str(root),
    "playbook": [str(p) for p in playbook_paths(root)],
    "present": present,
    "broken": broken,
}))
"""


@dataclass(frozen=True)
class Node:
    wheel: Path
    venv: Path
    work: Path  # the working folder of every command: not the checkout, so it is not on sys.path

    def run(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        return subprocess.run(
            args, cwd=self.work, env={**env, "NO_COLOR": "1"}, capture_output=True, text=True, timeout=timeout
        )


def _ok(done: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, (
        f"{what} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Node:
    tmp = tmp_path_factory.mktemp("node")
    # The shared cache, as `fleet burnin` uses it: the fleet runs' tests build the same tree's wheel.
    wheel = bundle.project_wheel(ROOT, tmp / "build", default_cache())
    work = tmp / "work"
    work.mkdir()
    made = Node(wheel, tmp / "venv", work)
    _ok(made.run([sys.executable, "-m", "venv", "--without-pip", str(made.venv)], 120), "python -m venv")
    # This pip installs into the new environment (--python): no ensurepip there, and its cache
    # serves the core dependencies. --no-compile, as the burnin role installs: what runs is compiled
    # when first imported (the install took 4.2 CPU-s so, 11.4 compiling every module).
    install = [sys.executable, "-m", "pip", "--python", str(made.venv / "bin" / "python"), "install"]
    options = ["--quiet", "--disable-pip-version-check", "--no-compile"]
    _ok(made.run([*install, *options, str(wheel)], 600), "pip install")
    return made


def test_the_wheel_carries_the_playbook_and_roles_fleet_burnin_runs(node: Node) -> None:
    with zipfile.ZipFile(node.wheel) as zf:
        names = set(zf.namelist())
        playbook = zf.read(ANSIBLE + "playbooks/burnin.yml")
    assert playbook == (ROOT / "playbooks" / "burnin.yml").read_bytes()
    role = ROOT / "roles" / "burnin"
    role_files = {p.relative_to(ROOT).as_posix() for p in role.rglob("*") if p.is_file()}
    assert "roles/burnin/tasks/main.yml" in role_files
    assert {ANSIBLE + f for f in role_files if "__pycache__" not in f} <= names
    for other in (ROOT / "roles").iterdir():
        if other.is_dir():
            assert f"{ANSIBLE}roles/{other.name}/tasks/main.yml" in names, other.name
    packed = [n for n in names if n.startswith(ANSIBLE)]
    assert not [n for n in packed if "/__pycache__/" in n or "/tests/" in n or n.endswith(".pyc")]
    # Inside the package only: top-level roles/ in site-packages would collide with anything.
    assert not [n for n in names if n.startswith(("roles/", "playbooks/", "tests/"))]


def test_a_node_install_has_the_core_dependencies_only_and_finds_the_packaged_content(node: Node) -> None:
    done = node.run(
        [str(node.venv / "bin" / "python"), "-c", PROBE, ",".join(NOT_ON_A_NODE), ",".join(NODE_PACKAGES)],
        300,
    )
    probe = json.loads(_ok(done, "the probe").stdout)
    assert probe["present"] == []
    assert probe["broken"] == {}  # every node-side module imports on the core dependencies
    package = Path(probe["package"])
    assert package.is_relative_to(node.venv) and not package.is_relative_to(ROOT)
    assert probe["source_root"] is None
    assert probe["ansible_root"] == str(package / "ansible")
    assert probe["playbook"] == [
        str(package / "ansible" / "playbooks" / "burnin.yml"),
        str(package / "ansible" / "roles"),
    ]


def test_the_installed_command_burns_the_node_in_on_core_dependencies(node: Node) -> None:
    out = node.work / "results"
    # What this test is about is the install: the storage figure measures whatever else writes to
    # this machine's one disk (under a whole suite, the test hosts' installs of hundreds of MB), so
    # only a broken disk may miss the storage floors here. The other floors are the catalog's.
    spec = node.work / "node.yaml"
    spec.write_text(json.dumps(NODE_SPEC))
    args = ["burnin", "--sku", "cpu", "--level", "quick", "--out", str(out), "--node", "node-1", "-q"]
    args += ["--spec", str(spec)]
    # It measures in the turn the test hosts take, as they do.
    with measuring_turn():
        done = _ok(node.run([str(node.venv / "bin" / "fleetforge"), *args], 600), "fleetforge burnin")
    assert "node-1.jsonl: ok" in done.stdout
    results = read_results(out / "node-1.jsonl")
    assert not results.bad_lines and len(results.runs) == 1
    assert [c.check for c in results.checks] == list(results.runs[0].checks)  # every check recorded
    assert {c.status for c in results.checks} <= {"pass", "skip"}
    assert any(c.status == "pass" for c in results.checks)

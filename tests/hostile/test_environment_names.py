"""Environment variable names a task runs with are never shell.

Ansible writes a task's `environment:` in front of the module's command, the names unquoted
(`A=1;touch x;B='v' /usr/bin/python3 ...`), and a shell runs it. The variables that become one
(burnin_environment, burnin_fabric_environment, nccl_profile_environment; nccl_environment and
nccl_env_extra, which also become /etc/nccl.conf lines) take environment variable names only:
`fleetforge fleet burnin --var` refuses others (exit 64) before anything runs, and the roles refuse
them before the first task that uses them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetforge import exitcodes
from fleetforge.cli import main
from fleetforge.run_options import parse_vars
from tests.conftest import ROOT
from tests.hostile.conftest import tree
from tests.local_play import local_hosts, play_results

BURNIN = ROOT / "roles" / "burnin"
NCCL = ROOT / "roles" / "nccl"


def _payload(canary: Path) -> str:
    return f"A=1;touch {canary};B"


@pytest.mark.parametrize(
    ("var", "name"),
    [
        ("burnin_environment", "A=1;touch {canary};B"),
        ("burnin_fabric_environment", "$(touch {canary})"),
        ("nccl_env_extra", "X Y"),
        ("nccl_environment", "1ABC"),
        ("nccl_profile_environment", "A\nB"),
        ("my_site_environment", "A-B"),  # any variable named like one
        ("burnin_environment", 7),
    ],
)
def test_fleet_burnin_refuses_a_var_with_a_name_that_is_not_a_variable_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], var: str, name: Any
) -> None:
    canary = tmp_path / "PWNED"
    if isinstance(name, str):
        name = name.format(canary=canary)
    inv = tmp_path / "inv.ini"
    inv.write_text("node1\n")
    out = tmp_path / "out"
    before = tree(tmp_path)
    code = main(
        ["fleet", "burnin", "-i", str(inv), "--out", str(out), "--var", f"{var}={json.dumps({name: 'v'})}"]
    )
    err = capsys.readouterr().err
    assert code == exitcodes.USAGE, err
    assert f"--var {var}:" in err and repr(name) in err and "environment variable name" in err, err
    assert tree(tmp_path) == before and not canary.exists()


@pytest.mark.parametrize("value", ["'A=1'", "[A]", "''"])
def test_fleet_burnin_refuses_an_environment_var_that_is_not_a_mapping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text("node1\n")
    code = main(
        [
            "fleet",
            "burnin",
            "-i",
            str(inv),
            "--out",
            str(tmp_path / "out"),
            "--var",
            f"burnin_environment={value}",
        ]
    )
    err = capsys.readouterr().err
    assert code == exitcodes.USAGE and "--var burnin_environment:" in err and "mapping" in err, err


def test_environment_vars_with_variable_names_are_taken() -> None:
    got = parse_vars(
        [
            'burnin_environment={"NCCL_SOCKET_IFNAME": "=eth0", "_X1": "a b;c", "nccl_debug": "$(x)"}',
            "nccl_env_extra={}",
            "burnin_blas_threads=1",
        ]
    )
    assert got == {
        "burnin_environment": {"NCCL_SOCKET_IFNAME": "=eth0", "_X1": "a b;c", "nccl_debug": "$(x)"},
        "nccl_env_extra": {},
        "burnin_blas_threads": 1,
    }


def _tasks(path: Path) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = yaml.safe_load(path.read_text()) if path.exists() else []
    return [{k: v for k, v in t.items() if k != "tags"} for t in tasks]


def _imports(path: Path, target: str) -> bool:
    return any(t.get("ansible.builtin.import_tasks") == target for t in yaml.safe_load(path.read_text()))


def _use(variable: str, marker: Path) -> dict[str, Any]:
    """A task run as burnin and nccl run theirs: with the variable as its environment."""
    return {
        "name": "Use the environment",
        "ansible.builtin.command": {"argv": ["touch", f"{marker}/{{{{ inventory_hostname }}}}"]},
        "environment": f"{{{{ {variable} }}}}",
    }


def _failed(doc: dict[str, Any]) -> dict[str, str]:
    out = {}
    for task in doc["plays"][0]["tasks"]:
        for host, result in task["hosts"].items():
            if result.get("failed"):
                out[host] = " ".join(r.get("msg", "") for r in result.get("results", [])) or result.get(
                    "msg", ""
                )
    return out


def test_the_burnin_role_refuses_environment_names_before_using_them(tmp_path: Path) -> None:
    canary = tmp_path / "PWNED"
    ran = tmp_path / "ran"
    ran.mkdir()
    defaults = yaml.safe_load((BURNIN / "defaults" / "main.yml").read_text())
    cases: dict[str, dict[str, Any]] = {
        "good": {"burnin_environment": {"NCCL_DEBUG": "INFO", "X": "a'b;$(c)"}},
        "review": {"burnin_environment": {_payload(canary): "v"}},
        "fabric": {"burnin_fabric_environment": {f"$(touch {canary})": "v"}},
        "newline": {"burnin_environment": {"A\nB": "v"}},
        "not_a_map": {"burnin_environment": "A=1"},
    }
    hosts = local_hosts({name: {**defaults, **given} for name, given in cases.items()})
    checks = _tasks(BURNIN / "tasks" / "check_environment.yml")
    use = _use("burnin_fabric_environment | combine(burnin_environment)", ran)
    doc = play_results(tmp_path, {"all": {"hosts": hosts}}, [*checks, use])
    assert not canary.exists(), "an environment variable name ran as shell"
    failed = _failed(doc)
    assert set(failed) == {"review", "fabric", "newline", "not_a_map"}, json.dumps(doc)[-3000:]
    assert sorted(p.name for p in ran.iterdir()) == ["good"]
    assert "burnin_environment" in failed["review"] and json.dumps(_payload(canary)) in failed["review"]
    assert "burnin_fabric_environment" in failed["fabric"] and "$(touch" in failed["fabric"]
    assert '"A\\nB"' in failed["newline"]
    # Both ways into the role check first: the burn-in play (main.yml) and the fabric rounds.
    for entry in ("main.yml", "fabric_round.yml"):
        assert _imports(BURNIN / "tasks" / entry, "check_environment.yml"), entry
        names = [t.get("name") for t in yaml.safe_load((BURNIN / "tasks" / entry).read_text())]
        assert names.index("Environment checks") <= 1, (entry, names)


def test_the_nccl_role_refuses_environment_names_and_multiline_values(tmp_path: Path) -> None:
    canary = tmp_path / "PWNED"
    ran = tmp_path / "ran"
    ran.mkdir()
    defaults = yaml.safe_load((NCCL / "defaults" / "main.yml").read_text())
    cases: dict[str, dict[str, Any]] = {
        "good": {
            "nccl_environment": {"NCCL_NET": "FasTrak", "FI_PROVIDER": "efa"},
            "nccl_env_extra": {"NCCL_DEBUG": "WARN"},
        },
        "profile": {"nccl_profile_environment": {_payload(canary): "v"}},
        "extra": {"nccl_env_extra": {"NCCL_DEBUG=INFO\nLD_PRELOAD": "x"}},
        "value_line": {"nccl_environment": {"NCCL_NET": "x\nLD_PRELOAD=/tmp/evil.so"}},
    }
    hosts = local_hosts({name: {**defaults, **given} for name, given in cases.items()})
    main_tasks = _tasks(NCCL / "tasks" / "main.yml")
    checks = [t for t in main_tasks if t.get("name") == "Check the environment's variable names"]
    doc = play_results(tmp_path, {"all": {"hosts": hosts}}, [*checks, _use("nccl_profile_environment", ran)])
    assert not canary.exists(), "an environment variable name ran as shell"
    failed = _failed(doc)
    assert set(failed) == {"profile", "extra", "value_line"}, json.dumps(doc)[-3000:]
    assert sorted(p.name for p in ran.iterdir()) == ["good"]
    assert (
        "nccl_profile_environment" in failed["profile"] and json.dumps(_payload(canary)) in failed["profile"]
    )
    assert "nccl_env_extra" in failed["extra"]
    assert "nccl_environment" in failed["value_line"] and '"NCCL_NET"' in failed["value_line"]
    # Before the profile script runs with its environment and before /etc/nccl.conf is written.
    names = [t.get("name") for t in yaml.safe_load((NCCL / "tasks" / "main.yml").read_text())]
    assert names.index("Check the environment's variable names") < names.index(
        "Install NCCL and its environment"
    )

"""node_tuning refuses kernel arguments, sysctl names and values, limits and tuned profile names
outside their grammar before it writes anything, and passes the ones it runs commands with as one
argument each.

Kernel arguments land in /etc/default/grub.d/90-fleetforge.cfg, which update-grub sources as shell
as root, and in grubby's --args; sysctl names in `sysctl -e -n NAME` (procps sets any argument with
an =) and in sysctl.d, where a newline in a value is another setting; the tuned profile's name in a
path. The role's check tasks (and the GRUB drop-in task, writing into the test's folder) run under
ansible-playbook on this machine, one inventory host per case.
"""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.local_play import local_hosts, play_results

ROLE = ROOT / "roles" / "node_tuning"
CHECKS = (
    "Check the kernel arguments",
    "Check the sysctls' names and values",
    "Check the limits and the tuned profile",
)
DROPIN = "Write kernel arguments as a GRUB drop-in"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())

REAL_ARGS = [
    "iommu=pt",
    "intel_iommu=on",
    "amd_iommu=on",
    "hugepagesz=1G",
    "default_hugepagesz=1G",
    "hugepages=16",
    "isolcpus=2-7,10-15",
    "nohz_full=2-7,10-15",
    "rcu_nocbs=2-7",
    "pci=realloc=off",
    "transparent_hugepage=never",
    "nosmt",
    "console=ttyS0,115200n8",
    "root=/dev/nvme0n1p1",
    "init_on_alloc=0",
    "mitigations=off",
    "crashkernel=256M@16M",
    "netconsole=6665@10.0.0.1/eth0,6666@10.0.0.2/",
]


def _yaml(name: str) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = yaml.safe_load((ROLE / "tasks" / name).read_text())
    return tasks


def _task(name: str, file: str = "main.yml") -> dict[str, Any]:
    task = next(t for t in _yaml(file) if t.get("name") == name)
    return {k: v for k, v in copy.deepcopy(task).items() if k != "tags"}


def _checks() -> list[dict[str, Any]]:
    """The role's check tasks (those it has: a role without them lets every case through)."""
    names = {t.get("name") for t in _yaml("main.yml")}
    return [_task(name) for name in CHECKS if name in names]


def _run(tmp_path: Path, cases: dict[str, dict[str, Any]], tasks: list[dict[str, Any]]) -> dict[str, Any]:
    hosts = local_hosts({name: {**DEFAULTS, **given} for name, given in cases.items()})
    return play_results(tmp_path, {"all": {"hosts": hosts}}, tasks)


def _failures(doc: dict[str, Any]) -> dict[str, str]:
    """host -> the message of the task that failed it."""
    out = {}
    for task in doc["plays"][0]["tasks"]:
        for host, result in task["hosts"].items():
            if result.get("failed"):
                msgs = [r.get("msg", "") for r in result.get("results", [])] or [result.get("msg", "")]
                out[host] = " ".join(m for m in msgs if m)
    failed = {host for host, stats in doc["stats"].items() if stats["failures"]}
    assert set(out) == failed, json.dumps(doc)[-3000:]
    return out


# name: (host vars over the role's defaults, what the message must name, or None: accepted)
CASES: dict[str, tuple[dict[str, Any], tuple[str, ...] | None]] = {
    "defaults": ({}, None),
    "real_args": ({"node_tuning_kernel_args": REAL_ARGS}, None),
    "no_args": ({"node_tuning_kernel_args": []}, None),
    "vlan_sysctl": (
        {
            "node_tuning_sysctls_extra": {
                "net.ipv4.conf.eth0/100.rp_filter": 2,
                "net.ipv4.conf.br-data.arp_ignore": 1,
            }
        },
        None,
    ),
    "memlock_kib": ({"node_tuning_memlock": "67108864"}, None),
    "memlock_int": ({"node_tuning_memlock": 67108864}, None),
    "profile_named": (
        {"node_tuning_tuned_profile": "fleetforge-h100_v2", "node_tuning_tuned_parent": "a,b.c"},
        None,
    ),
    # The review's GRUB drop-in payload: update-grub sources the file as root.
    "arg_subshell": (
        {"node_tuning_kernel_args": ["iommu=pt", "$(touch /tmp/x)"]},
        ("node_tuning_kernel_args", '"$(touch /tmp/x)"'),
    ),
    "arg_backtick": ({"node_tuning_kernel_args": ["`id`"]}, ("node_tuning_kernel_args", '"`id`"')),
    "arg_quote": ({"node_tuning_kernel_args": ['x" --remove-args="iommu']}, ("node_tuning_kernel_args",)),
    "arg_space": ({"node_tuning_kernel_args": ["a b"]}, ("node_tuning_kernel_args", '"a b"')),
    "arg_newline": (
        {"node_tuning_kernel_args": ["iommu=pt\n"]},
        ("node_tuning_kernel_args", '"iommu=pt\\n"'),
    ),
    "arg_semicolon": ({"node_tuning_kernel_args": ["a;reboot"]}, ("node_tuning_kernel_args", '"a;reboot"')),
    "arg_empty": ({"node_tuning_kernel_args": [""]}, ("node_tuning_kernel_args",)),
    "arg_number": ({"node_tuning_kernel_args": [7]}, ("node_tuning_kernel_args", "7")),
    "args_string": ({"node_tuning_kernel_args": "iommu=pt"}, ("node_tuning_kernel_args", '"iommu=pt"')),
    # procps' sysctl sets a name=value argument: verify's read would write the kernel.
    "sysctl_equals": (
        {"node_tuning_sysctls_extra": {"kernel.core_pattern=|/tmp/x": 1}},
        ("node_tuning_sysctls_extra", '"kernel.core_pattern=|/tmp/x"'),
    ),
    "sysctl_option": ({"node_tuning_sysctls_extra": {"-w": 1}}, ("node_tuning_sysctls_extra", '"-w"')),
    "sysctl_space": (
        {"node_tuning_sysctls": {**DEFAULTS["node_tuning_sysctls"], "vm.a -w vm.b=1": 1}},
        ("node_tuning_sysctls", '"vm.a -w vm.b=1"'),
    ),
    "sysctl_dotdot": (
        {"node_tuning_sysctls_extra": {"net/../../etc": 1}},
        ("node_tuning_sysctls_extra", "net/../../etc"),
    ),
    "sysctl_newline_value": (
        {"node_tuning_sysctls_extra": {"vm.swappiness": "1\nkernel.core_pattern = |/tmp/x"}},
        ("node_tuning_sysctls_extra", '"vm.swappiness"'),
    ),
    "sysctls_not_a_map": ({"node_tuning_sysctls_extra": ["vm.swappiness=1"]}, ("node_tuning_sysctls_extra",)),
    "memlock_line": ({"node_tuning_memlock": "unlimited\n* hard core unlimited"}, ("node_tuning_memlock",)),
    "profile_path": ({"node_tuning_tuned_profile": "../../etc/cron.d"}, ("node_tuning_tuned_profile",)),
    "parent_line": ({"node_tuning_tuned_parent": "balanced\n[script]"}, ("node_tuning_tuned_parent",)),
}


def test_bad_input_is_refused_naming_the_variable_and_the_value(tmp_path: Path) -> None:
    doc = _run(tmp_path, {name: given for name, (given, _) in CASES.items()}, _checks())
    failures = _failures(doc)
    assert set(failures) == {name for name, (_, want) in CASES.items() if want is not None}
    for name, (_, want) in CASES.items():
        for fragment in want or ():
            assert fragment in failures[name], (name, failures[name])


def test_a_refused_kernel_argument_writes_no_grub_drop_in(tmp_path: Path) -> None:
    """The drop-in, sourced by a shell as update-grub does, runs nothing; a refused argument
    writes no drop-in at all."""
    out = tmp_path / "written"
    out.mkdir()
    canary = tmp_path / "PWNED"
    write = _task(DROPIN, "kernel_args_Debian.yml")
    args = write["ansible.builtin.template"]
    args |= {"src": str(ROLE / "templates" / args["src"]), "dest": f"{out}/{{{{ inventory_hostname }}}}.cfg"}
    for key in ("owner", "group"):
        args.pop(key, None)
    cases = {
        "real": {"node_tuning_kernel_args": REAL_ARGS},
        "subshell": {"node_tuning_kernel_args": ["iommu=pt", f"$(touch {canary})"]},
        "quote": {"node_tuning_kernel_args": [f'x"; touch {canary}; "']},
    }
    doc = _run(tmp_path, cases, [*_checks(), write])
    for written in out.iterdir():  # as update-grub reads its drop-ins
        subprocess.run(["sh", "-c", f". {written}"], capture_output=True, check=False)
    assert not canary.exists(), "a kernel argument ran as shell when GRUB's drop-in was sourced"
    assert set(_failures(doc)) == {"subshell", "quote"}
    assert sorted(p.name for p in out.iterdir()) == ["real.cfg"]
    done = subprocess.run(
        [
            "sh",
            "-c",
            f'GRUB_CMDLINE_LINUX_DEFAULT="quiet"; . {out / "real.cfg"}; echo "$GRUB_CMDLINE_LINUX_DEFAULT"',
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["quiet", *REAL_ARGS]
    assert not canary.exists()


def _recorder(folder: Path, name: str) -> Path:
    """A stand-in for a command that appends its arguments, as JSON, to folder/NAME.argv."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"open({str(folder / (name + '.argv'))!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _argv(folder: Path, name: str) -> list[list[str]]:
    return [json.loads(line) for line in (folder / f"{name}.argv").read_text().splitlines()]


def test_grubby_gets_the_missing_arguments_as_one_argument(tmp_path: Path) -> None:
    """Even an argument the checks would refuse reaches grubby as --args's value, never as
    grubby's own options."""
    bin_dir = _recorder(tmp_path, "grubby")
    task = _task("Add missing kernel arguments to every kernel", "kernel_args_RedHat.yml")
    task["environment"] = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    odd = 'x" --remove-args="iommu'
    cases = {
        "h": {"node_tuning_kernel_args": ["iommu=pt", odd], "node_tuning_grubby": {"stdout": 'args="ro"\n'}}
    }
    doc = _run(tmp_path, cases, [task])
    assert not _failures(doc)
    assert _argv(tmp_path, "grubby") == [["--update-kernel=ALL", f"--args=iommu=pt {odd}"]]


def test_verify_reads_each_sysctl_as_one_argument(tmp_path: Path) -> None:
    bin_dir = _recorder(tmp_path, "sysctl")
    task = _task("Verify | running kernel values match (runtime applied)", "verify.yml")
    task["environment"] = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    odd = "vm.swappiness -w kernel.sysrq=1"
    cases = {
        "h": {"node_tuning_apply_runtime": True, "node_tuning_all_sysctls": {"vm.max_map_count": 1, odd: 2}}
    }
    doc = _run(tmp_path, cases, [task])
    assert not _failures(doc)
    assert sorted(_argv(tmp_path, "sysctl")) == sorted([["-e", "-n", "vm.max_map_count"], ["-e", "-n", odd]])


@pytest.mark.parametrize(
    ("file", "name"),
    [
        ("kernel_args_RedHat.yml", "Read the default kernel's arguments"),
        ("kernel_args_RedHat.yml", "Add missing kernel arguments to every kernel"),
        ("verify.yml", "Verify | running kernel values match (runtime applied)"),
    ],
)
def test_commands_with_role_input_run_as_argv(file: str, name: str) -> None:
    command = _task(name, file)["ansible.builtin.command"]
    assert "argv" in command and "cmd" not in command, command


def test_the_checks_come_before_anything_is_written() -> None:
    names = [t.get("name") for t in _yaml("main.yml")]
    assert set(CHECKS) <= set(names)
    first_write = min(
        i
        for i, t in enumerate(_yaml("main.yml"))
        if {"ansible.builtin.template", "ansible.builtin.include_tasks"} & set(t)
    )
    assert all(names.index(check) < first_write for check in CHECKS)

"""CPU per Ansible task on a local test host, with and without the hosts' bytecode cache for zip
imports (tests/hosts/zipimport_bytecode.py), measured in one run.

    sudo .venv/bin/python benchmarks/ansible_task_cost.py [--tasks 40] [--repeat 3]

Starts one test host (tests/hosts: network namespace + sshd in a Debian chroot, real SSH through
the harness's master), then runs a playbook of --tasks trivial `command: /bin/true` tasks, taking
turns with and without the cache (alternating which goes first). Printed per side: the machine's
busy CPU seconds per task (all processes: ansible-playbook and its workers here, ssh, the module's
Python on the host), the median of the repeats, and the ratio. Run it on an otherwise idle
machine: the busy time counts every process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fleet_run import machine_busy_s  # noqa: E402
from tests.hosts.harness import PYTHON_SITE, HostsUnsupported, TestHosts, check_supported  # noqa: E402


def cpu_per_task(inventory: Path, playbook: Path, tasks: int) -> float:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "null"}
    busy = machine_busy_s()
    subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=600,
    )
    return (machine_busy_s() - busy) / tasks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    try:
        check_supported()
    except HostsUnsupported as exc:
        print(f"cannot start test hosts here: {exc}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp, TestHosts(1, background=True) as hosts:
        inventory = hosts.write_inventory(Path(tmp) / "inventory.yml")
        playbook = Path(tmp) / "playbook.yml"
        task = "    - ansible.builtin.command: /bin/true\n"
        playbook.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n" + task * args.tasks)
        pth = hosts[0].root / PYTHON_SITE / "zipimport_bytecode.pth"
        installed = pth.read_text()
        figures: dict[str, list[float]] = {"cache": [], "no cache": []}
        for i in range(args.repeat):
            # Sides alternate which goes first, so neither always runs on a machine the other warmed.
            for side in list(figures)[:: 1 if i % 2 == 0 else -1]:
                if side == "cache":
                    pth.write_text(installed)
                else:
                    pth.unlink(missing_ok=True)
                figures[side].append(cpu_per_task(inventory, playbook, args.tasks))
        medians = {side: statistics.median(values) for side, values in figures.items()}
        for side, values in figures.items():
            runs = ", ".join(f"{v * 1000:.0f}" for v in values)
            print(f"{side:>8}: {medians[side] * 1000:.0f} ms CPU per task (runs: {runs})")
        print(f"   ratio: {medians['cache'] / medians['no cache']:.2f} (cache / no cache)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

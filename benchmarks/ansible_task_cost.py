"""CPU per Ansible task on a local test host, with and without the hosts' bytecode cache for zip
imports (tests/hosts/zipimport_bytecode.py), measured in one run.

    sudo .venv/bin/python benchmarks/ansible_task_cost.py [--tasks 40] [--repeat 3]

Starts one test host (tests/hosts: network namespace + sshd in a Debian chroot, real SSH through
the harness's master), then runs playbooks of --tasks and 2 x --tasks trivial `command: /bin/true`
tasks, taking turns with and without the cache (alternating which goes first, and which length).
A task's cost is the difference of the two lengths' busy CPU over --tasks: what ansible-playbook
spends once per run (start-up, inventory, the play, interpreter discovery; about 0.65 CPU-s for
an empty playbook) cancels out instead of being spread over the tasks. Printed per side: the
machine's busy CPU seconds per task (all processes: ansible-playbook and its workers here, ssh,
the module's Python on the host), min / median / max of the repeats, the once-per-run cost, and
the ratio of the medians. Run it on an otherwise idle machine: the busy time counts every process.
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


def busy_cpu(inventory: Path, playbook: Path) -> float:
    """The machine's busy CPU seconds over one ansible-playbook run."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "null"}
    busy = machine_busy_s()
    subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=600,
    )
    return machine_busy_s() - busy


def cpu_per_task(inventory: Path, playbooks: dict[int, Path], tasks: int, first: int) -> tuple[float, float]:
    """(CPU s per task, CPU s once per run): N and 2N tasks, the longer one first when first is 1."""
    lengths = [tasks, 2 * tasks][:: 1 if first == 0 else -1]
    busy = {n: busy_cpu(inventory, playbooks[n]) for n in lengths}
    per_task = (busy[2 * tasks] - busy[tasks]) / tasks
    return per_task, busy[tasks] - tasks * per_task


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
        task = "    - ansible.builtin.command: /bin/true\n"
        playbooks = {}
        for n in (args.tasks, 2 * args.tasks):
            playbooks[n] = Path(tmp) / f"playbook-{n}.yml"
            playbooks[n].write_text("- hosts: all\n  gather_facts: false\n  tasks:\n" + task * n)
        pth = hosts[0].root / PYTHON_SITE / "zipimport_bytecode.pth"
        installed = pth.read_text()
        figures: dict[str, list[float]] = {"cache": [], "no cache": []}
        once: dict[str, list[float]] = {"cache": [], "no cache": []}
        for i in range(args.repeat):
            # Sides alternate which goes first, so neither always runs on a machine the other warmed.
            for side in list(figures)[:: 1 if i % 2 == 0 else -1]:
                if side == "cache":
                    pth.write_text(installed)
                else:
                    pth.unlink(missing_ok=True)
                per_task, per_run = cpu_per_task(inventory, playbooks, args.tasks, (i // 2) % 2)
                figures[side].append(per_task)
                once[side].append(per_run)
        medians = {side: statistics.median(values) for side, values in figures.items()}
        for side, values in figures.items():
            runs = ", ".join(f"{v * 1000:.0f}" for v in values)
            print(
                f"{side:>8}: {min(values) * 1000:.0f} / {medians[side] * 1000:.0f} / {max(values) * 1000:.0f} ms "
                f"CPU per task, min / median / max of {args.repeat} (runs: {runs}); once per run "
                f"{statistics.median(once[side]):.2f} CPU-s (median)"
            )
        ratios = [c / n for c, n in zip(figures["cache"], figures["no cache"], strict=True)]
        print(
            f"   ratio: {medians['cache'] / medians['no cache']:.2f} of the medians (cache / no cache), "
            f"{min(ratios):.2f}-{max(ratios):.2f} per repeat"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a fleet run costs before and around the measuring, as CPU seconds and ratios taken in one run.

    .venv/bin/python benchmarks/fleet_run_setup.py [--repeat N]

1. The node wheel (validation/fleetrun/bundle.py): `pip wheel` of the tree (an isolated build
   environment, then setuptools) against the wheel cached by the files it is built from.
2. The all-reduce launcher on a node without a GPU (validation/burnin/multinode.py, `_nproc`):
   counting ranks from sysfs and /dev against asking PyTorch, which the launcher imported before.
   Needs PyTorch installed (the gpu extra); skipped without it.

CPU seconds are this process's and its children's (getrusage), so what else runs on the machine
does not count; wall seconds are printed beside them for reading only.
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from validation.fleetrun import bundle  # noqa: E402

LAUNCHER = "from validation.burnin import multinode; {patch}; print(multinode._nproc(0))"


def cpu_s() -> float:
    """CPU seconds of this process and its finished children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measured(step: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    cpu, wall = cpu_s(), time.monotonic()
    step()
    return cpu_s() - cpu, time.monotonic() - wall


def wheel(repeat: int) -> None:
    cold, warm = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            build = partial(bundle.project_wheel, ROOT, Path(tmp) / "work", Path(tmp) / "cache", log=print)
            cold.append(measured(build))
            warm.append(measured(build))
    report("node wheel", "pip wheel", cold, "cached", warm)


def launcher(repeat: int) -> None:
    if importlib.util.find_spec("torch") is None:
        print("launcher: skipped, PyTorch is not installed here (the gpu extra)")
        return

    def run(patch: str) -> None:
        code = LAUNCHER.format(patch=patch)
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)

    asked = [measured(lambda: run("multinode.torch_gpu_evidence = lambda: True")) for _ in range(repeat)]
    counted = [measured(lambda: run("pass")) for _ in range(repeat)]
    report("launcher ranks", "asking PyTorch", asked, "sysfs and /dev", counted)


def report(
    what: str,
    before_name: str,
    before: list[tuple[float, float]],
    after_name: str,
    after: list[tuple[float, float]],
) -> None:
    b_cpu = statistics.median(c for c, _ in before)
    a_cpu = statistics.median(c for c, _ in after)
    b_wall = statistics.median(w for _, w in before)
    a_wall = statistics.median(w for _, w in after)
    print(
        f"{what}: {before_name} {b_cpu:.2f} CPU-s ({b_wall:.2f} s), {after_name} {a_cpu:.2f} CPU-s "
        f"({a_wall:.2f} s): {after_name} costs {a_cpu / b_cpu:.2f} x the CPU"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    wheel(args.repeat)
    launcher(args.repeat)


if __name__ == "__main__":
    main()

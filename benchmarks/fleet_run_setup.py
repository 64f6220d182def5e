"""What a fleet run costs before and around the measuring, as CPU seconds and ratios taken in one run.

    .venv/bin/python benchmarks/fleet_run_setup.py [--repeat N]

1. The node wheel (validation/fleetrun/bundle.py): `pip wheel` of the tree (an isolated build
   environment, then setuptools) against the wheel cached by the files it is built from.
2. The all-reduce launcher on a node without a GPU (validation/burnin/multinode.py, `_nproc`):
   counting ranks from sysfs and /dev against asking PyTorch, which the launcher imported before.
   Needs PyTorch installed (the gpu extra); skipped without it.

CPU seconds are this process's and its children's (getrusage), so what else runs on the machine
does not count; wall seconds are printed beside them for reading only. Each side runs --repeat
times (the launcher's two sides interleaved, alternating which goes first); printed: min / median
/ max per side, and the ratio of the medians with the range of the per-repeat ratios.
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

    sides: dict[str, list[tuple[float, float]]] = {"asked": [], "counted": []}
    patches = {"asked": "multinode.torch_gpu_evidence = lambda: True", "counted": "pass"}
    for i in range(repeat):
        for side in list(sides)[:: 1 if i % 2 == 0 else -1]:
            sides[side].append(measured(partial(run, patches[side])))
    report("launcher ranks", "asking PyTorch", sides["asked"], "sysfs and /dev", sides["counted"])


def report(
    what: str,
    before_name: str,
    before: list[tuple[float, float]],
    after_name: str,
    after: list[tuple[float, float]],
) -> None:
    def spread(values: list[float]) -> str:
        return "/".join(f"{v:.2f}" for v in (min(values), statistics.median(values), max(values)))

    b_cpu, a_cpu = [c for c, _ in before], [c for c, _ in after]
    b_wall, a_wall = [w for _, w in before], [w for _, w in after]
    per_rep = [a / b for a, b in zip(a_cpu, b_cpu, strict=True)]
    print(
        f"{what} (min/median/max of {len(before)}): {before_name} {spread(b_cpu)} CPU-s ({spread(b_wall)} s), "
        f"{after_name} {spread(a_cpu)} CPU-s ({spread(a_wall)} s): {after_name} costs "
        f"{statistics.median(a_cpu) / statistics.median(b_cpu):.2f} x the CPU "
        f"(per repeat {min(per_rep):.2f}-{max(per_rep):.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    wheel(args.repeat)
    launcher(args.repeat)


if __name__ == "__main__":
    main()

"""Cloud TPU slice shapes: which topologies each generation offers, in chips, and their hosts.

Sources (Google's current pages, "Configurations" sections):
  v5e  https://cloud.google.com/tpu/docs/v5e  2D slices 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16
       (1 to 256 chips, a 256-chip pod); 8 chips per host, slices of 8 chips or fewer on one host.
  v6e  https://cloud.google.com/tpu/docs/v6e  a 256-chip pod on a 2D torus like v5e, 8 chips per host;
       the same 2D shapes.
  v5p  https://cloud.google.com/tpu/docs/v5p  3D topologies AxBxC counted in chips (the accelerator
       type counts TensorCores, two per chip: v5p-8 is 4 chips); 4 chips per host; the pod has
       8,960 chips but the largest slice is 16x16x24 (6,144 chips); shapes of more than one 4x4x4
       cube have every side a multiple of 4; smaller ones are 2x2x1, 2x2x2, 2x2x4, 2x4x4;
       Multislice reaches 18,432 chips.
  Multislice (several identical slices over the data-center network):
       https://cloud.google.com/tpu/docs/multislice-introduction
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

SOURCES = {
    "v5e": "https://cloud.google.com/tpu/docs/v5e",
    "v6e": "https://cloud.google.com/tpu/docs/v6e",
    "v5p": "https://cloud.google.com/tpu/docs/v5p",
}
CHIPS_PER_HOST = {"v5e": 8, "v6e": 8, "v5p": 4}
TWO_D_SHAPES = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
# v5p shapes within one 4x4x4 cube (sides sorted), and the largest schedulable shape.
V5P_SMALL_SHAPES = frozenset({(1, 2, 2), (2, 2, 2), (2, 2, 4), (2, 4, 4), (4, 4, 4)})
V5P_LARGEST = (16, 16, 24)
V5P_POD_CHIPS = 8960
# Multislice training on v5p reaches 18,432 chips (the v5p page, "Configurations").
MULTISLICE_MAX_CHIPS = {"v5p": 18_432}
_TOPOLOGY = re.compile(r"[1-9][0-9]{0,2}(x[1-9][0-9]{0,2}){1,2}")


@dataclass(frozen=True)
class Slice:
    generation: str
    topology: str
    chips: int
    hosts: int

    @property
    def accelerator_type(self) -> str:
        """The TPU API's acceleratorType: v5e and v6e count chips, v5p TensorCores (two a chip)."""
        if self.generation == "v5p":
            return f"v5p-{self.chips * 2}"
        if self.generation == "v5e":
            return f"v5litepod-{self.chips}"
        return f"{self.generation}-{self.chips}"


class ShapeError(ValueError):
    """A topology the generation does not offer; the message says what it does."""


def hosts_for(generation: str, chips: int) -> int:
    """TPU VMs of a slice of `chips` chips: a slice smaller than a host still takes one."""
    return max(1, math.ceil(chips / CHIPS_PER_HOST[generation]))


def slice_of(generation: str, topology: str) -> Slice:
    """The slice a topology names, or ShapeError saying which topologies exist."""
    if generation not in SOURCES:
        raise ShapeError(f"no TPU slice shapes known for generation {generation!r}")
    source = SOURCES[generation]
    if not _TOPOLOGY.fullmatch(topology):
        raise ShapeError(f"{topology!r} is not a topology (AxB or AxBxC chips); see {source}")
    sides = tuple(int(n) for n in topology.split("x"))
    chips = math.prod(sides)
    if generation in {"v5e", "v6e"}:
        if topology not in TWO_D_SHAPES:
            raise ShapeError(
                f"{topology} is no {generation} slice; allowed (2D, chips): {', '.join(TWO_D_SHAPES)} ({source})"
            )
    else:
        problem = _v5p_problem(sides, chips)
        if problem:
            raise ShapeError(f"{topology} is no v5p slice: {problem} ({source})")
    return Slice(generation, topology, chips, hosts_for(generation, chips))


def _v5p_problem(sides: tuple[int, ...], chips: int) -> str | None:
    if len(sides) != 3:
        return "v5p topologies are 3D, AxBxC chips (count chips, not cores)"
    ordered = tuple(sorted(sides))
    if ordered in V5P_SMALL_SHAPES:
        return None
    if any(side % 4 for side in sides):
        return (
            "beyond one 4x4x4 cube every side is a multiple of 4; within it the shapes are "
            "2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4"
        )
    largest = math.prod(V5P_LARGEST)
    if chips > largest or any(a > b for a, b in zip(ordered, V5P_LARGEST, strict=True)):
        return (
            f"{chips} chips; the largest slice is 16x16x24 ({largest:,} chips), smaller than the "
            f"{V5P_POD_CHIPS:,}-chip pod: use several slices (tpu.slices) beyond it"
        )
    return None

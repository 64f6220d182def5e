"""Cloud TPU slice shapes: which topologies each generation offers, in chips, their TPU VMs, and
the chips each VM has.

Sources (Google's current pages, "Configurations" sections):
  v5e  https://cloud.google.com/tpu/docs/v5e  2D slices 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16
       (1 to 256 chips, a 256-chip pod). Each TPU VM has 1, 4 or 8 chips (ct5lp-hightpu-1t, -4t,
       -8t): a slice of 8 chips or fewer is one VM holding all of them (1x1, 2x2, 2x4); a larger
       slice is made of 4-chip VMs (4x4 = 4 VMs, 8x8 = 16, 16x16 = 64). The 8-chip VM is
       single-host only. Older copies of the page have a "Number of hosts" column (4x4 = 2) and
       "Chips per host: 8": those count 8-chip physical hosts, not TPU VMs; fleetforge's node is
       the VM, so it counts VMs.
  v6e  https://cloud.google.com/tpu/docs/v6e  a 256-chip pod on a 2D torus like v5e, the same 2D
       shapes and the same VMs (ct6e-standard-1t, -4t, -8t): 1x1 = 1 VM of 1 chip, 2x2 = 1 VM of
       4, 2x4 = 1 VM of 8; 4x4 = 4 VMs of 4 chips, 4x8 = 8, 8x8 = 16, 8x16 = 32, 16x16 = 64.
  v5p  https://cloud.google.com/tpu/docs/v5p  3D topologies AxBxC counted in chips (the accelerator
       type counts TensorCores, two per chip: v5p-8 is 4 chips); 4 chips per VM always (the
       smallest slice, 2x2x1, is one VM); the pod has 8,960 chips but the largest slice is
       16x16x24 (6,144 chips); shapes of more than one 4x4x4 cube have every side a multiple of 4;
       smaller ones are 2x2x1, 2x2x2, 2x2x4, 2x4x4; Multislice reaches 18,432 chips.
  Multislice (several identical slices over the data-center network):
       https://cloud.google.com/tpu/docs/multislice-introduction
  The same rule (v5e/v6e: the chip count up to 8, 4 beyond; others 4) is Ray's
  get_chips_per_host (ray-project/ray, python/ray/util/tpu.py, PR #62526).
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
# Chips a TPU VM of each generation can have. A slice that fits the largest is one VM with all of
# the slice's chips; a larger slice is made of multi-host VMs (MULTI_HOST_CHIPS_PER_VM each).
VM_CHIPS: dict[str, tuple[int, ...]] = {"v5e": (1, 4, 8), "v6e": (1, 4, 8), "v5p": (4,)}
MULTI_HOST_CHIPS_PER_VM: dict[str, int] = {"v5e": 4, "v6e": 4, "v5p": 4}
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
    def chips_per_vm(self) -> int:
        """Chips each TPU VM of the slice has: what the burn-in on one of them must find."""
        return chips_per_vm(self.generation, self.chips)

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


def chips_per_vm(generation: str, chips: int) -> int:
    """Chips on each TPU VM of a `chips`-chip slice: the whole slice when one VM of the generation
    holds that many (v5e/v6e 1, 4 or 8), else the multi-host VM's 4."""
    if chips in VM_CHIPS[generation]:
        return chips
    return MULTI_HOST_CHIPS_PER_VM[generation]


def hosts_for(generation: str, chips: int) -> int:
    """TPU VMs of a slice of `chips` chips: a slice smaller than a VM still takes one."""
    return max(1, math.ceil(chips / chips_per_vm(generation, chips)))


def chips_for_hosts(generation: str, hosts: int) -> int:
    """Chips of a slice of `hosts` TPU VMs when no topology names it: one VM is the generation's
    largest (v5e/v6e 8 chips: 2x4; name 1x1 or 2x2 for the smaller ones), several are multi-host
    VMs of 4. hosts_for(generation, result) != hosts: no slice has that many VMs (v5e/v6e 2)."""
    if hosts == 1:
        return max(VM_CHIPS[generation])
    return hosts * MULTI_HOST_CHIPS_PER_VM[generation]


def two_d_shape(chips: int) -> str | None:
    """The v5e/v6e topology of `chips` chips, or None when no 2D slice has that many."""
    return next((t for t in TWO_D_SHAPES if math.prod(int(n) for n in t.split("x")) == chips), None)


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

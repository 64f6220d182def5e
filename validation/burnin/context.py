"""What a check knows about the run it belongs to: SKU, level, thresholds, paths, options.

The runner builds one context per check and ships it to the worker process as JSON, so every
field here must survive a JSON round trip (`to_json` / `from_json`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from fleet.catalog import Sku
from fleet.results import Level
from fleet.spec import ThresholdOverride


@dataclass(frozen=True)
class CheckContext:
    sku: Sku
    level: Level
    node: str = "localhost"
    # Spec overrides of the catalog floors (fleet spec `validation.thresholds`), by metric name.
    thresholds: Mapping[str, ThresholdOverride] = field(default_factory=dict)
    # Where the storage check writes its test file.
    storage_path: Path = Path(".")
    # Root of sysfs; tests point it at a captured tree.
    sysfs_root: Path = Path("/sys")
    # Where a check's raw collection is kept beside the results (None: not kept).
    raw_dir: Path | None = None
    # Per-check parameter overrides on top of the level's defaults: {"compute": {"n": 256}}.
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Seed for the random inputs of measurements (GEMM operands, all-reduce payloads).
    seed: int = 20261129
    # Accelerators this node must have when the fleet says (a TPU VM's chips follow its slice: the
    # fleet spec's tpu_chips_per_vm); None: whatever a node of the SKU can have.
    expected_accelerators: int | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "sku": self.sku.model_dump(mode="json"),
                "level": self.level,
                "node": self.node,
                "thresholds": {k: v.model_dump(mode="json") for k, v in self.thresholds.items()},
                "storage_path": str(self.storage_path),
                "sysfs_root": str(self.sysfs_root),
                "raw_dir": None if self.raw_dir is None else str(self.raw_dir),
                "options": {k: dict(v) for k, v in self.options.items()},
                "seed": self.seed,
                "expected_accelerators": self.expected_accelerators,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> CheckContext:
        data = json.loads(text)
        raw_dir = data.get("raw_dir")
        expected = data.get("expected_accelerators")
        return cls(
            sku=Sku.model_validate(data["sku"]),
            level=cast(Level, data["level"]),
            node=data["node"],
            thresholds={k: ThresholdOverride.model_validate(v) for k, v in data["thresholds"].items()},
            storage_path=Path(data["storage_path"]),
            sysfs_root=Path(data["sysfs_root"]),
            raw_dir=None if raw_dir is None else Path(raw_dir),
            options=data["options"],
            seed=int(data["seed"]),
            expected_accelerators=None if expected is None else int(expected),
        )

"""Shared helpers for the burn-in tests: fixtures, contexts, captured sysfs trees."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fleet.catalog import get_sku
from fleet.spec import ThresholdOverride
from validation.burnin.context import CheckContext
from validation.burnin.runner import RunOptions

FIXTURES = Path(__file__).parent / "fixtures"
FAKE_REGISTRY = "tests.validation.burnin.fake_checks:TEST_REGISTRY"


def run_options(tmp_path: Path, only: list[str] | None = None, **kw: Any) -> RunOptions:
    """A quick cpu run of node t1 into tmp_path/out, with the fake checks unless told otherwise."""
    settings: dict[str, Any] = {"registry": FAKE_REGISTRY, **kw}
    return RunOptions(
        sku=get_sku("cpu"), level="quick", out_dir=tmp_path / "out", node="t1", only=only, **settings
    )


def fixture_json(rel: str) -> Any:
    return json.loads((FIXTURES / rel).read_text())


def fixture_text(rel: str) -> str:
    return (FIXTURES / rel).read_text()


def ctx(sku: str = "cpu", level: str = "quick", **kw: Any) -> CheckContext:
    thresholds = {k: ThresholdOverride.model_validate(v) for k, v in kw.pop("thresholds", {}).items()}
    return CheckContext(sku=get_sku(sku), level=level, thresholds=thresholds, **kw)  # type: ignore[arg-type]


def materialize(tree: dict[str, Any], root: Path) -> Path:
    """Write a captured sysfs tree ({path: content | {"->": link target}}) under `root`."""
    for rel, content in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict):
            target = root / content["->"]
            target.mkdir(parents=True, exist_ok=True)
            os.symlink(target, path)
        else:
            path.write_text(content + "\n")
    return root

"""benchmarks/fabric_rounds.py on small fleets: the fabric stage finds every fault in constant
rounds, and bisection's rounds grow with the fleet."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "fabric_rounds.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fabric_rounds", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fabric_rounds"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_fabric_constant_rounds_bisection_logarithmic() -> None:
    rows = load().measure([8, 64, 256], seed=1)
    assert all(r.fabric_found_all and r.fabric_false_rejects == 0 for r in rows)
    assert {r.fabric_rounds for r in rows} == {4}
    single = {r.hosts: r.bisection_rounds for r in rows if r.scenario == "1 bad host"}
    assert single == {8: 4, 64: 7, 256: 9}  # 1 + log2(n): the whole fleet, then halves down to one host
    assert not any(r.bisection_found_all for r in rows if r.scenario == "1 bad link")

"""`dcgmi diag -r N -j`: DCGM's diagnostic verdicts, one per test (and per GPU where it says so).

    {"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [
            {"name": "Denylist", "results": [{"status": "Pass"}]}, ...]},
        {"category": "Stress", "tests": [
            {"name": "Memory Bandwidth", "results": [{"gpu_ids": "0", "status": "Pass"}]}]}]}}

A test's verdict is the worst of its results: Fail, then Warn, then Skip, then Pass. A test that
passed on some GPUs and skipped the others did not test those: it is a skip naming them, not a
pass. Any other status word is reported as a failure: a verdict this reader does not know must not
read as healthy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

_ORDER = {"fail": 0, "warn": 1, "skip": 2, "pass": 3}


@dataclass(frozen=True)
class TestVerdict:
    category: str
    name: str
    status: str  # "fail" | "warn" | "pass" | "skip"
    gpus: str  # the GPU ids the failing / warning / skipped results name, "" when not per GPU
    detail: str  # DCGM's warning / info text, when it gave one


@dataclass(frozen=True)
class DiagReport:
    tests: list[TestVerdict] = field(default_factory=list)

    def with_status(self, status: str) -> list[TestVerdict]:
        return [t for t in self.tests if t.status == status]


def parse_diag(text: str) -> DiagReport:
    start = text.find("{")
    if start < 0:
        raise ValueError("dcgmi diag: no JSON document in the output")
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise ValueError(f"dcgmi diag: JSON not readable: {exc}") from None
    body = _diagnostic(data)
    categories = body.get("test_categories")
    if not isinstance(categories, list) or not categories:
        raise ValueError("dcgmi diag: no test_categories list in the JSON")
    tests: list[TestVerdict] = []
    for category in categories:
        if not isinstance(category, dict) or not isinstance(category.get("tests"), list):
            raise ValueError("dcgmi diag: a test category without a tests list")
        for test in category["tests"]:
            tests.append(_verdict(str(category.get("category", "")), test))
    return DiagReport(tests)


def _diagnostic(data: Any) -> dict[str, Any]:
    if isinstance(data, dict):
        for key, value in data.items():
            # "DCGM GPU Diagnostic" (DCGM 2.x, 3.x); matched loosely for renamed wrappers.
            if "Diagnostic" in key and isinstance(value, dict):
                return value
    raise ValueError("dcgmi diag: JSON has no 'DCGM GPU Diagnostic' object")


def _verdict(category: str, test: Any) -> TestVerdict:
    if not isinstance(test, dict) or not isinstance(test.get("results"), list) or not test["results"]:
        raise ValueError(f"dcgmi diag: test in {category!r} without results")
    name = str(test.get("name", "?"))
    statuses: list[tuple[str, dict[str, Any]]] = []
    for result in test["results"]:
        word = str(result.get("status", "")).strip().lower() if isinstance(result, dict) else ""
        statuses.append((word if word in _ORDER else "fail", result if isinstance(result, dict) else {}))
    worst = min(statuses, key=lambda s: _ORDER[s[0]])[0]
    flagged = [r for s, r in statuses if s == worst and s != "pass"]
    gpus = ",".join(str(r["gpu_ids"]) for r in flagged if r.get("gpu_ids") not in (None, ""))
    detail = "; ".join(_text(r.get("warnings")) or _text(r.get("info")) for r in flagged).strip("; ")
    return TestVerdict(category, name, worst, gpus, detail)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "; ".join(_text(v) for v in value if _text(v))
    if isinstance(value, dict):
        return str(value.get("warning") or value.get("message") or "")
    return str(value) if value else ""

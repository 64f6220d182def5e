"""The JSON document `fleetforge gate --json` prints: the GateResult's own dict, plus the outcome."""

from __future__ import annotations

import json

from validation.gate import GateResult


def to_document(result: GateResult, strict: bool = False) -> dict[str, object]:
    doc = result.as_dict()
    doc["outcome"] = result.outcome(strict)
    return doc


def render_json(result: GateResult, strict: bool = False) -> str:
    return json.dumps(to_document(result, strict), indent=2, allow_nan=False) + "\n"

"""Hostile input to the GCP surfaces: stack outputs for `inventory --stack-outputs` (group fields
that land in the gcp_compute plugin's filters and compose) and specs read by `spec check --json`.

Each case runs the real CLI, asserts the exact exit code and that nothing but the inputs exists
afterwards; the canary proves no value was templated or run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetforge import exitcodes
from tests.conftest import EXAMPLES
from tests.hostile.conftest import Canary, tree


def gcp_outputs() -> dict[str, Any]:
    return {
        "fleet": {"name": "a3mega", "cloud": "gcp", "sku": "a3-megagpu-8g", "region": "us-central1"},
        "group": {
            "kind": "gcp-managed-instance-group",
            "name": "a3mega-nodes",
            "project": "ml-research-1",
            "region": "us-central1",
            "zone": "us-central1-a",
            "node_filter": {"labels.fleetforge-group": "a3mega-nodes"},
        },
        "fabric": None,
        "storage": None,
        "checkpoints": None,
        "tags": {},
    }


PAYLOADS = ["pipe", "block", "quote", "newline", "filter"]


def payload(kind: str, canary: Canary) -> str:
    return {
        "pipe": canary.pipe,
        "block": canary.block,
        "quote": "a3mega' OR 'x",  # would close the compose literal
        "newline": "a3mega\n- status = TERMINATED",  # would add a filter line
        "filter": 'x" OR labels.fleet = "other',  # would widen the API filter
    }[kind]


@pytest.mark.parametrize("kind", PAYLOADS)
@pytest.mark.parametrize(
    ("where", "field"),
    [
        (("group", "project"), "group.project"),
        (("group", "name"), "group.name"),
        (("group", "zone"), "group.zone"),
        (("group", "region"), "group.region"),
        (("group", "node_filter", "labels.fleetforge-group"), "group.node_filter.labels.fleetforge-group"),
    ],
)
def test_gcp_outputs_that_could_template_or_widen_exit_65_and_write_nothing(
    cli: Any, tmp_path: Path, canary: Canary, kind: str, where: tuple[str, ...], field: str
) -> None:
    outputs = gcp_outputs()
    node = outputs
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = payload(kind, canary)
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    run = cli("inventory", "--stack-outputs", "outputs.json", "-o", "x.gcp_compute.yml")
    assert run.code == exitcodes.DATA
    assert f"{field}:" in run.err and run.err.count("\n") == 1
    assert run.out == ""
    assert tree(tmp_path) == {"outputs.json"}


def test_a_hostile_label_key_exits_65(cli: Any, tmp_path: Path, canary: Canary) -> None:
    outputs = gcp_outputs()
    outputs["group"]["node_filter"] = {f"labels.{canary.pipe}": "x"}
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    run = cli("inventory", "--stack-outputs", "outputs.json")
    assert run.code == exitcodes.DATA and "group.node_filter:" in run.err and run.out == ""
    assert tree(tmp_path) == {"outputs.json"}


@pytest.mark.parametrize("kind", ["pipe", "block", "newline"])
def test_spec_check_json_carries_hostile_values_as_data(
    cli: Any, tmp_path: Path, canary: Canary, kind: str
) -> None:
    doc = yaml.safe_load((EXAMPLES / "gcp-tpu-v5e-slice.yaml").read_text())
    doc["tpu"] = {"topology": payload(kind, canary), "runtime_version": payload(kind, canary)}
    doc[payload(kind, canary)] = 1
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    run = cli("spec", "check", "--json", "spec.yaml")
    assert run.code == exitcodes.DATA and run.err == ""
    (entry,) = json.loads(run.out)
    assert entry["valid"] is False
    fields = {p["field"] for p in entry["problems"]}
    assert {"tpu.topology", "tpu.runtime_version", payload(kind, canary)} <= fields
    assert tree(tmp_path) == {"spec.yaml"}

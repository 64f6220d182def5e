"""Hostile input to the Azure surfaces: stack outputs for `inventory --stack-outputs` (group fields
that land in the azure_rm plugin's filters, compose and keyed groups), what Azure itself reports
about instances (tags and names the plugin hands to those expressions), and Azure spec fields read
by `spec check --json`.

Each case runs the real CLI (or the installed plugin), asserts the exact exit code and that nothing
but the inputs (and the one output asked for) exists afterwards; the canary proves no value was
templated or run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetforge import exitcodes
from stacks.ansible_inventory import InventoryConfigError, from_stack_outputs, render
from tests.conftest import EXAMPLES
from tests.hostile.conftest import Canary, tree
from tests.stacks.test_ansible_inventory import azure_host, azure_outputs, azure_plugin_inventory

PAYLOADS = ["pipe", "block", "quote", "bracket", "newline"]


def payload(kind: str, canary: Canary) -> str:
    return {
        "pipe": canary.pipe,
        "block": canary.block,
        "quote": "ndh100-ib0', 'other-ib0",  # would widen the scale set list of the include filter
        "bracket": "ndh100] or true or [x",  # would make the include filter always true
        "newline": "ML-Fleet_rg\n- '*'",  # would add every resource group
    }[kind]


@pytest.mark.parametrize("kind", PAYLOADS)
@pytest.mark.parametrize(
    ("where", "field"),
    [
        (("group", "subscription_id"), "group.subscription_id"),
        (("group", "resource_group"), "group.resource_group"),
        (("group", "scale_sets", 0, "name"), "group.scale_sets[0].name"),
        (("tags", "fleet"), "tags.fleet"),
        (("fleet", "name"), "fleet.name"),
    ],
)
def test_azure_outputs_that_could_template_or_widen_exit_65_and_write_nothing(
    cli: Any, tmp_path: Path, canary: Canary, kind: str, where: tuple[Any, ...], field: str
) -> None:
    outputs = azure_outputs()
    node: Any = outputs
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = payload(kind, canary)
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    run = cli("inventory", "--stack-outputs", "outputs.json", "-o", "x.azure_rm.yml")
    assert run.code == exitcodes.DATA
    assert f"{field}:" in run.err and run.err.count("\n") == 1
    assert run.out == ""
    assert tree(tmp_path) == {"outputs.json"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(min_size=1, max_size=70))
def test_any_scale_set_name_either_fits_the_grammar_or_names_the_field(name: str) -> None:
    """Whatever the name, the reader either writes it into expressions only when no quote, brace or
    bracket is in it, or refuses it naming the field; it never raises anything else."""
    outputs = azure_outputs()
    outputs["group"]["scale_sets"][0]["name"] = name
    try:
        doc = from_stack_outputs(outputs)
    except InventoryConfigError as exc:
        assert exc.field == "group.scale_sets[0].name"
        return
    assert not set(name) & set("'\"{}[]%#\\\n")
    assert f"'{name}'" in doc["include_host_filters"][0]


def test_what_azure_reports_about_instances_is_never_templated(tmp_path: Path, canary: Canary) -> None:
    """Tags and names come from the Azure API: whoever can tag a VM must not run code on the
    controller. The plugin's filters and compose read them as values only."""
    target = tmp_path / "ndh100.azure_rm.yml"
    target.write_text(render(from_stack_outputs(azure_outputs()), "outputs.json"))  # as the CLI writes it
    good = azure_host("ndh100-ib0", 0, ip="10.0.0.4")
    good["hostvars"]["tags"] = {"fleet": "ndh100", "note": canary.pipe}
    good["hostvars"]["computer_name"] = canary.block
    tagged = azure_host("ndh100-ib1", 1, ip="10.0.1.4", fleet=canary.pipe)
    renamed = azure_host("ndh100-ib1", 2, ip="10.0.1.5")
    renamed["hostvars"]["vmss"]["name"] = canary.pipe
    hosts, _ = azure_plugin_inventory(target, [good, tagged, renamed])
    assert set(hosts) == {"ndh100-ib0_0"}, "another fleet's tag and a foreign scale set are dropped"
    assert hosts["ndh100-ib0_0"]["vars"]["azure_vmss_name"] == "ndh100-ib0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts.json", "ndh100.azure_rm.yml"]


@pytest.mark.parametrize("kind", ["pipe", "block", "newline"])
def test_azure_spec_fields_carry_hostile_values_as_data(
    cli: Any, tmp_path: Path, canary: Canary, kind: str
) -> None:
    doc = yaml.safe_load((EXAMPLES / "azure-ndh100-fleet.yaml").read_text())
    value = payload(kind, canary)
    doc["azure"] = {"resource_group": value, "ssh_public_key": value}
    doc["image"] = "microsoft-dsvm:ubuntu-hpc:2204:" + value
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    run = cli("spec", "check", "--json", "spec.yaml")
    assert run.code == exitcodes.DATA and run.err == ""
    (entry,) = json.loads(run.out)
    assert entry["valid"] is False
    fields = {p["field"] for p in entry["problems"]}
    assert {"azure.resource_group", "azure.ssh_public_key", "image"} <= fields
    assert tree(tmp_path) == {"spec.yaml"}


@pytest.mark.parametrize("size", [101, 10**9, -1, True])
def test_an_ib_domain_size_out_of_range_exits_65(cli: Any, tmp_path: Path, size: Any) -> None:
    doc = yaml.safe_load((EXAMPLES / "azure-ndh100-fleet.yaml").read_text())
    doc["network"]["ib_domain_size"] = size
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    run = cli("spec", "check", "spec.yaml")
    assert run.code == exitcodes.DATA
    assert "network.ib_domain_size" in run.err + run.out
    assert tree(tmp_path) == {"spec.yaml"}

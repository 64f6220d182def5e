"""`spec check` names every problem of a spec in one run: type errors and cross-field rules together."""

from __future__ import annotations

import pytest

from fleet.spec import SpecError, spec_from_mapping
from tests.fleet.test_spec import AWS, GCP, with_


def problems(doc: dict[str, object]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        spec_from_mapping(doc)
    return info.value.problems


def test_a_four_mistake_spec_reports_four_problems() -> None:
    doc = with_(AWS, "spares", "two")  # type error
    doc = with_(doc, "validation.level", "fast")  # type error
    doc = with_(doc, "capacity", {"type": "reservation"})  # cross-field: the reservation's id
    doc = with_(doc, "storage.checkpoints", {"retention_days": 3, "noncurrent_retention_days": 9})  # cross
    found = problems(doc)
    assert [p for p, _ in found] == [
        "spares",
        "validation.level",
        "capacity.reservation_id",
        "storage.checkpoints.noncurrent_retention_days",
    ]


def test_an_unknown_key_and_a_cross_field_rule_are_reported_together() -> None:
    doc = with_(with_(GCP, "colour", "blue"), "capacity.reservation_id", None)
    assert {p for p, _ in problems(doc)} == {"colour", "capacity.reservation_id"}


def test_a_removed_field_does_not_make_up_problems_of_its_own() -> None:
    # capacity.type is wrong; its default (on-demand) beside the reservation id must not be blamed.
    doc = with_(GCP, "capacity.type", "cheap")
    assert [p for p, _ in problems(doc)] == ["capacity.type"]
    # An SSH source refused by its own validator: the network's defaults add nothing.
    doc = with_(GCP, "network.ssh_cidr", "0.0.0.0/0")
    assert [p for p, _ in problems(doc)] == ["network.ssh_cidr"]


def test_a_missing_required_field_still_reports_its_type_errors() -> None:
    doc = with_(with_(AWS, "nodes", "many"), "spares", 999)
    # nodes cannot be judged, so the spares-vs-nodes rule cannot run; the type error stands alone.
    assert [p for p, _ in problems(doc)] == ["nodes"]

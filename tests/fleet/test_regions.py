"""A region is one of its cloud's regions and a zone one of that region's zones; the list's source is named."""

from __future__ import annotations

import pytest

from fleet.regions import regions, source, zones
from fleet.spec import SpecError, spec_from_mapping
from tests.fleet.test_spec import AWS, AZURE, GCP, with_


@pytest.mark.parametrize(
    ("doc", "field", "fragment"),
    [
        (with_(AWS, "region", "us-east-9"), "region", "is not a region of aws"),
        (with_(AWS, "zone", "us-east-1-evil"), "zone", "us-east-1a"),
        (with_(AWS, "zone", "us-east-1z"), "zone", "is not a zone of aws region us-east-1"),
        (with_(AWS, "zone", "us-east-1"), "zone", "is not a zone"),
        (with_(GCP, "region", "us-central9"), "region", "cloud.google.com"),
        (
            with_(GCP, "zone", "us-central1-d"),
            "zone",
            "us-central1-a, us-central1-b, us-central1-c, us-central1-f",
        ),
        (with_(GCP, "zone", "us-central1-abc"), "zone", "is not a zone"),
        (with_(AZURE, "region", "east-us"), "region", "learn.microsoft.com"),
        (with_(AZURE, "zone", "4"), "zone", "1, 2, 3"),
        (with_(AZURE, "region", "westus"), "zone", "westus has no availability zones"),
    ],
)
def test_unknown_regions_and_zones_are_refused_with_the_source(
    doc: dict[str, object], field: str, fragment: str
) -> None:
    with pytest.raises(SpecError) as info:
        spec_from_mapping(doc)
    found = dict(info.value.problems)
    assert field in found, found
    assert fragment in found[field], found[field]


@pytest.mark.parametrize(
    ("doc", "region", "zone"),
    [
        (AWS, "eu-west-1", "eu-west-1c"),
        (AWS, "ap-southeast-5", "ap-southeast-5a"),
        (GCP, "europe-west4", "europe-west4-a"),
        (GCP, "us-east1", "us-east1-d"),
        (AZURE, "swedencentral", "3"),
    ],
)
def test_real_regions_and_zones_are_accepted(doc: dict[str, object], region: str, zone: str) -> None:
    spec = spec_from_mapping(with_(with_(doc, "region", region), "zone", zone))
    assert (spec.region, spec.zone) == (region, zone)


def test_every_list_has_a_public_source_and_is_plausible() -> None:
    for cloud in ("aws", "gcp", "azure"):
        assert source(cloud).startswith("https://")
        assert len(regions(cloud)) >= 30
        assert len(set(regions(cloud))) == len(regions(cloud))
    assert zones("gcp", "us-central1") == ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f")
    assert zones("aws", "nowhere-1") == ()

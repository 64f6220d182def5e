"""The Azure image pinned at deploy time: the real ComputeManagementClient over a canned azure-core
transport answering "Virtual Machine Images - List" in the shape Azure's REST reference documents
(learn.microsoft.com/rest/api/compute/virtual-machine-images/list: a JSON array of
{location, name, id}), and the newest version chosen as numbers, never as text."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from azure.core.rest import HttpRequest
from azure.mgmt.compute import ComputeManagementClient

from stacks.azure_image import DEFAULT_IMAGE, MarketplaceImage, list_versions, newest_version
from tests.validation.actions.fakes import CannedTransport, TokenCredential

SUB = "00000000-0000-4000-8000-00000000f1ee"
LOCATION = "southcentralus"


def _listing(*names: str) -> list[dict[str, Any]]:
    base = (
        f"/Subscriptions/{SUB}/Providers/Microsoft.Compute/Locations/{LOCATION}/Publishers/microsoft-dsvm"
        "/ArtifactTypes/VMImage/Offers/ubuntu-hpc/Skus/2204/Versions"
    )
    return [{"location": LOCATION, "name": n, "id": f"{base}/{n}"} for n in names]


def _client(body: Any, status: int = 200) -> tuple[ComputeManagementClient, CannedTransport]:
    def answer(request: HttpRequest) -> tuple[int, dict[str, str], Any]:
        return status, {"Content-Type": "application/json"}, body

    transport = CannedTransport(answer)
    return ComputeManagementClient(TokenCredential(), SUB, transport=transport), transport


def test_the_sdk_lists_the_published_versions_and_the_newest_wins_as_a_number() -> None:
    # Text order would pick 22.04.999; as numbers the 2025 build is the newest.
    client, transport = _client(_listing("22.04.2024102301", "22.04.999", "22.04.2025030701"))
    versions = list_versions(client, LOCATION, DEFAULT_IMAGE)
    assert versions == ["22.04.2024102301", "22.04.999", "22.04.2025030701"]
    assert newest_version(versions, DEFAULT_IMAGE, LOCATION) == "22.04.2025030701"
    ((method, url, _),) = transport.sent
    assert method == "GET"
    assert url.split("?")[0] == (
        f"https://management.azure.com/subscriptions/{SUB}/providers/Microsoft.Compute/locations/{LOCATION}"
        "/publishers/microsoft-dsvm/artifacttypes/vmimage/offers/ubuntu-hpc/skus/2204/versions"
    )


def test_what_is_not_a_version_is_never_chosen() -> None:
    hostile = ["latest", "99.99.99; rm -rf /", "{{ lookup('pipe', 'id') }}", "22.04.2024102301"]
    assert newest_version(hostile, DEFAULT_IMAGE, LOCATION) == "22.04.2024102301"


def test_no_published_version_is_a_clear_error_naming_the_image_and_location() -> None:
    client, _ = _client([])
    image = MarketplaceImage("microsoft-dsvm", "ubuntu-hpc", "2204")
    with pytest.raises(
        pulumi.RunError, match=r"no version of microsoft-dsvm:ubuntu-hpc:2204 in southcentralus"
    ):
        newest_version(list_versions(client, LOCATION, image), image, LOCATION)


def test_an_error_from_azure_surfaces_instead_of_a_guess() -> None:
    from azure.core.exceptions import HttpResponseError

    client, _ = _client(
        {"error": {"code": "AuthorizationFailed", "message": "no read on images"}}, status=403
    )
    with pytest.raises(HttpResponseError, match="AuthorizationFailed"):
        list_versions(client, LOCATION, DEFAULT_IMAGE)

"""The marketplace image an Azure fleet boots, pinned at deploy time like the AWS AMI.

With no `image` in the spec, `pulumi up` reads the versions Azure publishes of the Gen2 Ubuntu 22.04
HPC image (microsoft-dsvm:ubuntu-hpc:2204) in the fleet's location and writes the newest into the
scale set's model as an exact version, never "latest": every node the group creates, now or as a
replacement, boots what the fleet was burnt in on, and a newer image is a visible diff in the next
preview. A spec `image` (URN with a pinned version, or an image resource id) skips the lookup.

azure-native has no marketplace image-version function, so the lookup goes through the Azure SDK
(`ComputeManagementClient.virtual_machine_images.list`, REST "Virtual Machine Images - List",
learn.microsoft.com/rest/api/compute/virtual-machine-images/list). `fleetforge plan` answers it from
its mocks through `LOOKUP`, a context variable its isolated run sets.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import pulumi


@dataclass(frozen=True)
class MarketplaceImage:
    publisher: str
    offer: str
    sku: str

    def __str__(self) -> str:
        return f"{self.publisher}:{self.offer}:{self.sku}"


DEFAULT_IMAGE = MarketplaceImage("microsoft-dsvm", "ubuntu-hpc", "2204")
# Azure image versions are Major.Minor.Build, each a whole number (22.04.2024102301).
_VERSION = re.compile(r"\d{1,10}\.\d{1,10}\.\d{1,12}")

# (subscription id, location, image) -> the versions Azure publishes there.
VersionLister = Callable[[str, str, MarketplaceImage], Sequence[str]]


def newest_version(versions: Iterable[str], image: MarketplaceImage, location: str) -> str:
    """The highest version, compared as numbers; what is not a version is ignored (it is data)."""
    valid = [v for v in versions if isinstance(v, str) and _VERSION.fullmatch(v)]
    if not valid:
        raise pulumi.RunError(
            f"image: Azure lists no version of {image} in {location}; set `image` in the spec to a "
            "publisher:offer:sku:version URN or an image resource id available there"
        )
    return max(valid, key=lambda v: tuple(int(part) for part in v.split(".")))


def list_versions(client: Any, location: str, image: MarketplaceImage) -> list[str]:
    """Version names through a ComputeManagementClient (the SDK pages and parses the answer)."""
    found = client.virtual_machine_images.list(location, image.publisher, image.offer, image.sku)
    return [str(item.name) for item in found]


def list_versions_with_sdk(subscription_id: str, location: str, image: MarketplaceImage) -> list[str]:
    try:
        from azure.identity import DefaultAzureCredential
        from azure.mgmt.compute import ComputeManagementClient
    except ImportError:
        raise pulumi.RunError(
            "image: pinning the Azure image at deploy time needs the Azure SDK: install the cloud extra "
            "(pip install 'fleetforge[cloud]') or set `image` in the spec"
        ) from None
    client = ComputeManagementClient(DefaultAzureCredential(), subscription_id)
    return list_versions(client, location, image)


LOOKUP: ContextVar[VersionLister] = ContextVar(
    "fleetforge_azure_image_versions", default=list_versions_with_sdk
)


def pinned_version(
    subscription_id: pulumi.Output[str], location: str, image: MarketplaceImage = DEFAULT_IMAGE
) -> pulumi.Output[str]:
    """The newest published version of `image` in `location`, read when the program runs."""
    lister = LOOKUP.get()  # taken now: the callbacks below may run in another task's context
    return subscription_id.apply(lambda sub: newest_version(lister(sub, location, image), image, location))

"""NIC attach layouts derived from the catalog's facts, so stacks never hard-code them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fleet.catalog.model import Sku


@dataclass(frozen=True)
class NetworkInterfaceSlot:
    network_card_index: int
    device_index: int
    interface_type: Literal["interface", "efa", "efa-only"]


def aws_network_interfaces(sku: Sku) -> list[NetworkInterfaceSlot]:
    """Interfaces for an EFA SKU, one EFA per network card.

    Current EC2 guidance: an EFA-only interface cannot be primary, so card 0 carries an ENA
    interface at device 0 and an efa-only interface at device 1; every other card carries an
    efa-only interface at device 0. IP traffic rides the ENA alone, the EFAs carry the fabric.
    """
    if sku.fabric.kind != "efa":
        raise ValueError(f"{sku.sku}: fabric {sku.fabric.kind!r} has no EFA interfaces")
    if sku.fabric.attach != "ena-primary-efa-only":
        raise ValueError(f"{sku.sku}: unsupported EFA attach layout {sku.fabric.attach!r}")
    slots = [
        NetworkInterfaceSlot(0, 0, "interface"),
        NetworkInterfaceSlot(0, 1, "efa-only"),
    ]
    slots += [NetworkInterfaceSlot(card, 0, "efa-only") for card in range(1, sku.fabric.nics)]
    return slots

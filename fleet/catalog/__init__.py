"""The accelerator catalog: SKU facts as data (skus.yaml), loaded and validated once."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml

from fleet.catalog.model import (
    NIC_KINDS_BY_FABRIC,
    Accelerator,
    Catalog,
    Fabric,
    FabricEnvironment,
    Placement,
    ReferenceFigure,
    Sku,
)

__all__ = [
    "NIC_KINDS_BY_FABRIC",
    "Accelerator",
    "Catalog",
    "Fabric",
    "FabricEnvironment",
    "Placement",
    "ReferenceFigure",
    "Sku",
    "UnknownSkuError",
    "all_skus",
    "fabric_environment",
    "get_sku",
    "load_catalog",
]


class UnknownSkuError(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown SKU {self.name!r}; known: {', '.join(sorted(_by_name()))}"


@cache
def load_catalog() -> Catalog:
    text = resources.files(__package__).joinpath("skus.yaml").read_text(encoding="utf-8")
    catalog = Catalog.model_validate(yaml.safe_load(text))
    names = [s.sku for s in catalog.skus]
    duplicated = {n for n in names if names.count(n) > 1}
    if duplicated:
        raise ValueError(f"skus.yaml: duplicate SKU names {sorted(duplicated)}")
    return catalog


@cache
def _by_name() -> dict[str, Sku]:
    return {s.sku: s for s in load_catalog().skus}


def all_skus() -> tuple[Sku, ...]:
    return load_catalog().skus


def get_sku(name: str) -> Sku:
    try:
        return _by_name()[name]
    except KeyError:
        raise UnknownSkuError(name) from None


def fabric_environment(sku: Sku) -> FabricEnvironment:
    """The NCCL/libfabric environment of the SKU's fabric (skus.yaml `fabrics`)."""
    return load_catalog().fabric_environment(sku)

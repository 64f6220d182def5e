"""`fleetforge catalog`: the accelerator SKUs fleetforge knows, with their facts."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from fleet.catalog import all_skus
from fleetforge.console import out, print_json


def catalog(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, one object per SKU.")] = False,
    cloud: Annotated[
        str | None, typer.Option(help="Only SKUs of this cloud (aws, gcp, azure, onprem).")
    ] = None,
) -> None:
    """List the accelerator catalog."""
    skus = [s for s in all_skus() if cloud is None or s.cloud == cloud]
    if cloud is not None and not skus:
        from fleetforge.console import fail
        from fleetforge.exitcodes import USAGE

        fail(f"--cloud: {cloud!r} has no SKUs; allowed: aws, gcp, azure, onprem", USAGE)
    if as_json:
        print_json([s.summary() for s in skus])
        return
    table = Table(title="fleetforge catalog")
    for col in (
        "sku",
        "cloud",
        "accelerator",
        "per node",
        "memory GiB",
        "fabric",
        "NICs x Gb/s",
        "placement",
    ):
        table.add_column(col)
    for s in skus:
        table.add_row(
            s.sku,
            s.cloud,
            s.accelerator.model,
            str(s.accelerators_per_node),
            f"{s.accelerator.memory_gib:g}",
            s.fabric.kind,
            f"{s.fabric.nics} x {s.fabric.gbps_per_nic:g}" if s.fabric.nics else "-",
            s.placement.strategy,
        )
    out.print(table)


def register(app: typer.Typer) -> None:
    app.command("catalog")(catalog)

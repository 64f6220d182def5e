"""`fleetforge catalog`: the accelerator SKUs fleetforge knows, with their facts."""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table

from fleet.catalog import Sku, all_skus
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
    out.print(catalog_table(skus))


def catalog_table(skus: list[Sku]) -> Table:
    """The SKU is what users type: it is never cut or wrapped, however narrow the terminal; the
    other columns fold onto more lines instead."""
    table = Table(
        title="fleetforge catalog",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        collapse_padding=True,
    )
    table.add_column(
        "sku", no_wrap=True, overflow="ignore", min_width=max((len(s.sku) for s in skus), default=3)
    )
    # Short headers leave the values room; the long values (accelerator, placement) get the most.
    for col, ratio in (("cloud", 1), ("accelerator", 3), ("per node", 1), ("GiB", 1), ("fabric", 2)):
        table.add_column(col, overflow="fold", ratio=ratio)
    table.add_column("NICs x Gb/s", overflow="fold", ratio=1)
    table.add_column("placement", overflow="fold", ratio=3)
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
    return table


def register(app: typer.Typer) -> None:
    app.command("catalog")(catalog)

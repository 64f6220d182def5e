"""`fleetforge demo`: the main job on the embedded default, with no cloud account.

It validates the embedded local spec and every example shipped beside it, then shows the
catalog entry the fleet runs on. Later stages (plan, burn-in, gate) join here as they land.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from fleet.spec import SpecError, load_spec
from fleetforge import exitcodes
from fleetforge.console import err, out
from fleetforge.defaults import default_spec_path


def demo(
    spec: Annotated[
        Path | None, typer.Option(help="Fleet spec to run on instead of the embedded local CPU fleet.")
    ] = None,
    examples: Annotated[
        Path | None, typer.Option(help="Also validate every *.yaml under this folder (e.g. examples/).")
    ] = None,
) -> None:
    """Run the main job on the embedded default: validate the fleet, show its SKU."""
    path = spec or default_spec_path()
    try:
        fleet = load_spec(path)
    except SpecError as exc:
        err.print(Text(exc.render(), style="red"))
        raise typer.Exit(exitcodes.DATA) from None
    sku = fleet.catalog_sku
    out.print(
        Text(f"fleet {fleet.name}: {fleet.size} x {sku.sku} on {fleet.cloud} (spec {path})", style="bold")
    )
    out.print(
        Text(
            f"  accelerators: {sku.accelerators_per_node} x {sku.accelerator.model}; fabric: {sku.fabric.kind}; "
            f"reference metrics: {', '.join(sorted(sku.reference))}"
        )
    )
    if examples is not None:
        bad = 0
        for example in sorted(examples.glob("**/*.yaml")):
            try:
                ok = load_spec(example)
                out.print(Text(f"  example {example}: ok ({ok.cloud}, {ok.sku})"))
            except SpecError as exc:
                bad += 1
                err.print(Text(exc.render(), style="red"))
        if bad:
            raise typer.Exit(exitcodes.DATA)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)

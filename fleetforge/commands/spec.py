"""`fleetforge spec check|schema`: validate fleet specs offline; publish their JSON Schema."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from fleet.spec import SpecError, json_schema, load_spec
from fleetforge import exitcodes
from fleetforge.console import err, out, print_json, spec_exit_code

spec_app = typer.Typer(help="Validate fleet specs and print their schema.", no_args_is_help=True)


@spec_app.command("check")
def check(
    files: Annotated[list[Path], typer.Argument(help="Fleet spec YAML files.", show_default=False)],
) -> None:
    """Validate fleet specs offline: types, catalog facts and cross-field rules."""
    worst = exitcodes.OK
    for path in files:
        try:
            spec = load_spec(path)
        except SpecError as exc:
            worst = max(worst, spec_exit_code(exc))
            err.print(Text(exc.render(), style="red"))
            continue
        sku = spec.catalog_sku
        out.print(
            Text(
                f"{path}: ok - {spec.name}: {spec.nodes} + {spec.spares} spare x {sku.sku} "
                f"({sku.accelerators_per_node} x {sku.accelerator.model}, {sku.fabric.kind}) on {spec.cloud}"
            )
        )
    if worst:
        raise typer.Exit(worst)


@spec_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of a fleet spec (for editors and CI linters)."""
    print_json(json_schema())


def register(app: typer.Typer) -> None:
    app.add_typer(spec_app, name="spec")

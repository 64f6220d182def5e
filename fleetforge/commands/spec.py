"""`fleetforge spec check|schema`: validate fleet specs offline; publish their JSON Schema.

`spec check` names every problem of each file in one run (type errors and cross-field rules
together); `--json` prints one JSON document for editors and CI: a list of
{file, valid, problems: [{field, message}]}, one entry per file in the order given. Exit codes
are the same either way (docs/exit-codes.md): 0 all valid, 65 a spec is invalid, 66 a file
cannot be read (the worst of the files wins).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from fleet.spec import FleetSpec, SpecError, json_schema
from fleetforge import exitcodes
from fleetforge.console import checked_spec, err, out, print_json, spec_exit_code

spec_app = typer.Typer(help="Validate fleet specs and print their schema.", no_args_is_help=True)


@spec_app.command("check")
def check(
    files: Annotated[
        list[Path], typer.Argument(help="Fleet spec YAML files.", show_default=False, metavar="FILE...")
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print a JSON list of {file, valid, problems: [{field, message}]} on stdout."
        ),
    ] = False,
) -> None:
    """Validate fleet specs offline: types, catalog facts, cross-field rules and the burn-in's check
    parameters, as every command that reads a spec checks them."""
    worst = exitcodes.OK
    report: list[dict[str, Any]] = []
    for path in files:
        try:
            spec = checked_spec(path)
        except SpecError as exc:
            worst = max(worst, spec_exit_code(exc))
            report.append(_entry(path, exc.problems))
            if not as_json:
                err.print(Text(exc.render(), style="red"))
            continue
        report.append(_entry(path, []))
        if not as_json:
            out.print(Text(_summary(path, spec)))
    if as_json:
        print_json(report)
    if worst:
        raise typer.Exit(worst)


def _entry(path: Path, problems: list[tuple[str, str]]) -> dict[str, Any]:
    # Data, not text for a terminal: values are left as read (JSON escapes what needs it).
    return {
        "file": str(path),
        "valid": not problems,
        "problems": [{"field": field, "message": message} for field, message in problems],
    }


def _summary(path: Path, spec: FleetSpec) -> str:
    sku = spec.catalog_sku
    # A TPU VM's chips follow its slice; the catalog's figure is the largest VM's.
    per_node = spec.tpu_chips_per_vm or sku.accelerators_per_node
    return (
        f"{path}: ok - {spec.name}: {spec.nodes} + {spec.spares} spare x {sku.sku} "
        f"({per_node} x {sku.accelerator.model}, {sku.fabric.kind}) on {spec.cloud}"
    )


@spec_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of a fleet spec (for editors and CI linters)."""
    print_json(json_schema())


def register(app: typer.Typer) -> None:
    app.add_typer(spec_app, name="spec")

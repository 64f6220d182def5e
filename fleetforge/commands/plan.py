"""`fleetforge plan SPEC`: the resources `pulumi up` would create, offline, judged by the policy rules."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from fleet.spec import SpecError
from fleetforge import exitcodes
from fleetforge.console import err, fail, out, print_json, spec_failed


def plan(
    spec: Annotated[Path, typer.Argument(metavar="FILE", help="Fleet spec YAML file.", show_default=False)],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='Print {"resources": [...], "outputs": {...}, "placeholders": [...], "violations": [...]}.',
        ),
    ] = False,
    as_markdown: Annotated[
        bool,
        typer.Option(
            "--markdown",
            help="Print a markdown summary (resources by type, policy verdicts, violations) "
            "for a pull-request comment or a CI job summary.",
        ),
    ] = False,
) -> None:
    """Run the stack program under Pulumi's mocks (no cloud, no Pulumi CLI) and show what it creates.

    Exit 1: a policy rule is violated; 65: the stack cannot provision the spec; 69: no Pulumi SDK.
    """
    # Imported here so `fleetforge --help` never loads the planner.
    from fleetforge.plan import PulumiUnavailableError, plan_file

    if as_json and as_markdown:
        fail("--json and --markdown are two formats of one output: choose one", exitcodes.USAGE)
    try:
        result = plan_file(spec)
    except SpecError as exc:
        spec_failed(exc)
    except PulumiUnavailableError as exc:
        fail(str(exc), exitcodes.UNAVAILABLE)

    for warning in result.warnings:
        err.print(Text(f"pulumi: {warning}", style="yellow"))
    resources = result.resources
    if as_json:
        print_json(result.as_json())
    elif as_markdown:
        from fleetforge.plan_markdown import render_markdown

        # Plain stdout, not rich: the text is redirected to a file and rendered by the forge.
        sys.stdout.write(render_markdown(result, str(spec), _summary(result.outputs)))
        sys.stdout.flush()
    else:
        table = Table(title=f"fleetforge plan: {spec}")
        for column in ("#", "type", "name"):
            table.add_column(column)
        for i, r in enumerate(resources, 1):
            table.add_row(str(i), r.type, r.name)
        out.print(table)
        for line in _summary(result.outputs):
            out.print(Text(line))
        if result.placeholders:
            out.print(
                Text(
                    "placeholders (made up by the mocks; the cloud assigns them at deploy time): "
                    + ", ".join(result.placeholders),
                    style="dim",
                )
            )
    if result.violations:
        for v in result.violations:
            err.print(Text(f"policy violation {v}", style="red"))
        err.print(Text(f"{len(result.violations)} policy violation(s); `pulumi up` would be refused"))
        raise typer.Exit(exitcodes.REJECTED)
    if not (as_json or as_markdown):
        out.print(Text(f"{len(resources)} resources, no policy violations"))


def _summary(outputs: dict[str, Any]) -> list[str]:
    fleet, group, fabric = outputs.get("fleet") or {}, outputs.get("group") or {}, outputs.get("fabric") or {}
    storage, ckpt = outputs.get("storage"), outputs.get("checkpoints")
    lines = [
        f"fleet: {fleet.get('name')}: {fleet.get('nodes')} + {fleet.get('spares')} spare x {fleet.get('sku')} "
        f"in {fleet.get('zone')} ({fleet.get('capacity')})",
        f"group: {group.get('kind')} {group.get('name')} min {group.get('min_size')} max {group.get('max_size')} "
        f"desired {group.get('desired')}; nodes: {json.dumps(group.get('node_filter'))}",
        f"fabric: {fabric.get('nics')} x {fabric.get('gbps_per_nic')} Gb/s {fabric.get('kind')}, placement "
        f"{(fabric.get('placement') or {}).get('strategy')}",
    ]
    if storage:
        lines.append(
            f"storage: {storage.get('kind')} {storage.get('mount_source')} on {storage.get('mount_point')}"
        )
    if ckpt:
        lines.append(f"checkpoints: {ckpt.get('uri')} (kept {ckpt.get('retention_days')} days)")
    return lines


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)

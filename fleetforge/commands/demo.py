"""`fleetforge demo`: the main job on the embedded default, with no cloud account.

This machine plays a one-node on-prem fleet of the `cpu` SKU: the spec is validated, the node is
burned in for real (quick level), and the gate judges it and writes its reports. With
`--examples DIR` every spec there is validated too, and each one a stack provisions is planned
under Pulumi's mocks, so a newcomer sees the whole path from spec to verdict in one command.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.rule import Rule
from rich.text import Text

from fleet.spec import FleetSpec, SpecError
from fleetforge import exitcodes
from fleetforge.console import QUIET_HELP, VERBOSE_HELP, checked_spec, err, load_spec_or_exit, out, verbosity
from fleetforge.defaults import default_spec_path


def demo(
    spec: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Fleet spec to run on instead of the embedded local CPU fleet."),
    ] = None,
    examples: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="Also validate every *.yaml under this folder and plan those a stack provisions.",
        ),
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for burn-in results and the gate's reports.")
    ] = Path("fleetforge-demo"),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=VERBOSE_HELP)] = False,
) -> None:
    """Run the main job on the embedded default: validate, plan, burn this node in, gate it."""
    verbosity(quiet, verbose)  # refuses both at once
    path = spec or default_spec_path()
    fleet = load_spec_or_exit(path)
    if fleet.cloud != "onprem" or not fleet.hosts or len(fleet.hosts) != 1:
        err.print(
            Text(
                f"{path}: the demo burns in this machine: an on-prem spec with exactly one host", style="red"
            )
        )
        raise typer.Exit(exitcodes.USAGE)
    sku = fleet.catalog_sku
    out.print(
        Text(f"fleet {fleet.name}: {fleet.size} x {sku.sku} on {fleet.cloud} (spec {path})", style="bold")
    )

    if examples is not None:
        _title("1. fleet specs and plans")
        _check_examples(examples)
    _title("2. burn-in of this machine")
    node = fleet.hosts[0].name
    from fleetforge.commands.burnin import burnin

    burn_code = _call(
        burnin, sku=sku.sku, level=None, out_dir=out_dir, spec=path, node=node, quiet=quiet, verbose=verbose
    )
    if burn_code not in (exitcodes.OK, exitcodes.REJECTED, exitcodes.INCOMPLETE):
        raise typer.Exit(burn_code)

    _title("3. gate")
    from fleetforge.commands.gate import gate

    reports = {"junit": out_dir / "gate.junit.xml", "prom": out_dir / "gate.prom"}
    if importlib.util.find_spec("matplotlib") is not None:
        reports["html"] = out_dir / "gate.html"
    code = _call(
        gate, results=[out_dir / f"{node}.jsonl"], spec=path, quiet=quiet, verbose=verbose, **reports
    )
    out.print(Text(f"reports: {', '.join(str(p) for p in reports.values())}"))
    raise typer.Exit(code)


def _check_examples(folder: Path) -> None:
    """Every example must validate; those the stack provisions are planned (with the cloud extra)."""
    bad = 0
    can_plan = importlib.util.find_spec("pulumi") is not None
    for example in sorted(folder.glob("**/*.yaml")):
        try:
            spec = checked_spec(example)
        except SpecError as exc:
            bad += 1
            err.print(Text(exc.render(), style="red"))
            continue
        line = f"  {example}: valid ({spec.cloud}, {spec.size} x {spec.sku})"
        line += (
            _plan_summary(spec, example) if can_plan else "; not planned: the 'cloud' extra is not installed"
        )
        out.print(Text(line))
    if bad:
        raise typer.Exit(exitcodes.DATA)


def _plan_summary(spec: FleetSpec, source: Path) -> str:
    from fleetforge.plan import plan_spec
    from stacks.prerequisites import spec_problems

    problems = spec_problems(spec)
    if problems:
        field, why = problems[0]
        return f"; not planned: {field}: {why}"
    plan = plan_spec(spec, source=str(source))
    verdict = f", {len(plan.violations)} policy violation(s)" if plan.violations else ", no policy violation"
    return f"; plan: {len(plan.resources)} resources{verdict}"


def _call(command: Callable[..., None], **kwargs: Any) -> int:
    """Run another command's function and return its exit code (commands end in typer.Exit)."""
    try:
        command(**kwargs)
    except typer.Exit as exc:
        return int(exc.exit_code)
    return exitcodes.OK


def _title(text: str) -> None:
    out.print(Rule(text, align="left"))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)

"""`fleetforge bringup --spec FILE (--inventory FILE | --stack-outputs FILE)`: from a deployed fleet
to a READY one. Burn in every node, gate, replace the rejects through the cloud's group, burn in
only the replacements, re-gate the whole fleet, until READY or the budget is spent; every round is
recorded in `<out>/bringup.json` (validation/bringup/).

Exit codes (docs/exit-codes.md): 0 READY; 3 the budget (rounds, wall time, replacements) is spent,
or every reject left is a pattern, before the fleet is READY; 75 a replace action failed, or
replacements asked for have not joined the inventory (--resume once they have); 2 the fleet run did
not finish (nothing judged or replaced; --resume redoes the round); 64 bad
options (or a record in --out without --resume); 65 an unreadable inventory, spec, stack outputs or
record, or results the gate cannot judge; 66 a missing input; 69 Ansible or the cloud SDK missing;
73 --out or a report cannot be written; 74 writing a report failed (disk full, I/O error).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from fleet.text import printable
from fleetforge import exitcodes
from fleetforge.console import QUIET, VERBOSE_HELP, err, fail, load_spec_or_exit, out, print_json, verbosity
from fleetforge.gating import (
    HtmlOption,
    InventoryOutOption,
    JsonOption,
    JunitOption,
    MinFleetOption,
    PromOption,
    StrictOption,
    choose_sku,
    print_verdict,
    report_outputs,
    write_reports,
)
from fleetforge.run_options import (
    BurninTimeoutOption,
    CollectivesOption,
    CollectivesTimeoutOption,
    ExtraPackageOption,
    FabricOption,
    FabricRoundsOption,
    FabricTimeoutOption,
    ForksOption,
    LevelOption,
    ThrottleOption,
    VarOption,
    WheelhouseOption,
    fleet_run_options,
)

if TYPE_CHECKING:
    from fleet.spec import FleetSpec
    from validation.bringup import FleetRunner, InventoryReader, Outcome, Replacer
    from validation.fleetrun.run import FleetRunOptions

# The cloud's replace action, by the spec's cloud.
DEFAULT_REPLACE = {"aws": "aws-unhealthy", "gcp": "gcp-recreate", "azure": "azure-replace"}
# The last gate's JUnit in --out, which CI reads, asked for with --junit or not.
DEFAULT_JUNIT = "gate.xml"


def bringup(
    spec: Annotated[
        Path,
        typer.Option(metavar="FILE", help="Fleet spec: nodes and spares for READY, the gate's thresholds."),
    ],
    inventory: Annotated[
        Path | None,
        typer.Option(
            "--inventory",
            "-i",
            metavar="FILE",
            help="Ansible inventory of the deployed fleet, re-read each round (a cloud plugin config "
            "re-reads the group).",
        ),
    ] = None,
    stack_outputs: Annotated[
        Path | None,
        typer.Option(
            "--stack-outputs",
            metavar="FILE",
            help="Stack outputs JSON (`pulumi stack output --json`): the inventory plugin config for the "
            "fleet's group is written to <out>/inventory/ and used as --inventory.",
        ),
    ] = None,
    replace: Annotated[
        str | None,
        typer.Option(
            metavar="ACTION",
            help="How a reject is replaced: aws-unhealthy | gcp-recreate | azure-replace "
            "(default: the spec's cloud's).",
        ),
    ] = None,
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Folder for bringup.json, each round's round-N/ and the last gate's JUnit (gate.xml).",
        ),
    ] = Path("bringup"),
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue from <out>/bringup.json after an interruption.")
    ] = False,
    max_rounds: Annotated[
        int, typer.Option(metavar="N", min=1, help="Most burn-in rounds (the first one included).")
    ] = 3,
    max_wall: Annotated[
        int,
        typer.Option(metavar="SECONDS", min=1, help="Most wall time, all rounds and waits together."),
    ] = 4 * 3600,
    max_replacements: Annotated[
        int | None,
        typer.Option(
            metavar="N", min=0, help="Most nodes replaced in all (default: as many as the fleet has hosts)."
        ),
    ] = None,
    max_replace: Annotated[
        int | None,
        typer.Option(
            "--max-replace",
            metavar="N",
            min=1,
            help="Most nodes replaced in one round (default: a quarter of the fleet, at least 1); "
            "more rejects than that replace none: a cause the fleet shares.",
        ),
    ] = None,
    replace_timeout: Annotated[
        int,
        typer.Option(
            metavar="SECONDS", min=1, help="Longest wait for one round's replacements to appear in the group."
        ),
    ] = 1200,
    poll: Annotated[
        int, typer.Option(metavar="SECONDS", min=1, help="Seconds between re-reads of the inventory.")
    ] = 30,
    level: LevelOption = None,
    forks: ForksOption = 10,
    timeout: BurninTimeoutOption = 1800,
    throttle: ThrottleOption = 0,
    wheelhouse: WheelhouseOption = None,
    extra_package: ExtraPackageOption = None,
    collectives: CollectivesOption = True,
    collectives_timeout: CollectivesTimeoutOption = 300,
    fabric: FabricOption = True,
    fabric_rounds: FabricRoundsOption = None,
    fabric_timeout: FabricTimeoutOption = None,
    var: VarOption = None,
    as_json: JsonOption = False,
    junit: JunitOption = None,
    html: HtmlOption = None,
    prom: PromOption = None,
    inventory_out: InventoryOutOption = None,
    strict: StrictOption = False,
    min_fleet: MinFleetOption = 3,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only the outcome, not each step.")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=VERBOSE_HELP)] = False,
) -> None:
    """Burn in a deployed fleet, replace the rejects and burn in their replacements until READY."""
    detail = verbosity(quiet, verbose)
    outputs = report_outputs(
        junit, html, prom, inventory_out, out_dir=out_dir, reserved=_own_files(out_dir, junit is None)
    )
    if (inventory is None) == (stack_outputs is None):
        fail("give --inventory FILE or --stack-outputs FILE (exactly one)", exitcodes.USAGE)
    if out_dir.exists() and not out_dir.is_dir():
        fail(f"--out {out_dir}: not a folder", exitcodes.USAGE)
    fleet_spec = load_spec_or_exit(spec)
    chosen, sku_from = choose_sku(None, fleet_spec)
    action = _replace_action(replace, fleet_spec)
    if inventory is not None and not inventory.exists():
        fail(f"--inventory {inventory}: no such file or folder", exitcodes.NO_INPUT)
    # Read and checked here, written only once every option has been checked: bad input changes nothing.
    inventory_path, rendered = (
        (inventory, None)
        if inventory is not None
        else _inventory_from_outputs(stack_outputs, fleet_spec, out_dir)
    )
    opts = fleet_run_options(
        inventory=inventory_path,
        out_dir=out_dir,
        sku=chosen,
        level=level,
        spec=spec,
        forks=forks,
        timeout=timeout,
        throttle=throttle,
        extra_package=extra_package,
        wheelhouse=wheelhouse,
        collectives=collectives,
        collectives_timeout=collectives_timeout,
        fabric=fabric,
        fabric_rounds=fabric_rounds,
        fabric_timeout=fabric_timeout,
        var=var,
        fleet_spec=fleet_spec,
    )
    if rendered is not None:
        _write_inventory(inventory_path, rendered, out_dir)

    from validation.bringup import BringupError, BringupSettings, Budget, RecordError, bring_up
    from validation.gate import FleetPlan, GateSettings

    say = (lambda line: None) if detail == QUIET else (lambda line: err.print(Text(line)))
    settings = BringupSettings(
        out_dir=out_dir,
        plan=FleetPlan.from_spec(fleet_spec),
        gate=GateSettings.from_spec(fleet_spec, min_fleet=min_fleet),
        sku=chosen,
        sku_from=sku_from,
        budget=Budget(
            max_rounds=max_rounds,
            max_wall_s=float(max_wall),
            max_replacements=max_replacements,
            max_per_round=max_replace,
        ),
        strict=strict,
        replace_timeout_s=float(replace_timeout),
        poll_s=float(poll),
        resume=resume,
    )
    replacer = _replacer(action, float(replace_timeout))
    try:
        outcome = bring_up(settings, _runner(opts, say), _inventory_reader(inventory_path), replacer, say=say)
    except (BringupError, RecordError) as exc:
        fail(printable(str(exc)), getattr(exitcodes, getattr(exc, "exit_name", "DATA")))
    except Exception as exc:
        _known_failure(exc)
        raise
    if outcome.result is not None:
        # CI reads the last gate's JUnit from the folder it keeps, asked for or not.
        outputs["--junit"] = outputs["--junit"] or out_dir / DEFAULT_JUNIT
        write_reports(outcome.result, outputs, fleet_spec, strict, spec, out_dir)
    if as_json:
        doc: dict[str, Any] = outcome.record.to_json()
        if outcome.result is not None:
            from validation.reports.document import to_document

            doc["gate"] = to_document(outcome.result, strict)
        print_json(doc)
    else:
        if outcome.result is not None and detail > QUIET:
            print_verdict(outcome.result, strict, detail)
        _print_outcome(outcome)
    raise typer.Exit(_exit_code(outcome))


def _own_files(out_dir: Path, default_junit: bool) -> dict[Path, str]:
    """The files bringup writes in --out itself, which no report may overwrite."""
    from validation.bringup.record import RECORD_NAME

    own = {out_dir / RECORD_NAME: f"the bring-up record {printable(str(out_dir / RECORD_NAME))}"}
    if default_junit:
        junit = out_dir / DEFAULT_JUNIT
        own[junit] = (
            f"the last gate's JUnit {printable(str(junit))} (written there when --junit is not given)"
        )
    return own


def _exit_code(outcome: Outcome) -> int:
    return {
        "ready": exitcodes.OK,
        "budget-spent": exitcodes.BUDGET_SPENT,
        "action-failed": exitcodes.ACTION_FAILED,
        "waiting": exitcodes.ACTION_FAILED,
    }[outcome.status]


def _print_outcome(outcome: Outcome) -> None:
    for r in outcome.record.rounds:
        replaced = ", ".join(f"{x['node']} ({', '.join(x['keys'])})" for x in r.get("replaced", []))
        line = (
            f"round {r['round']}: burned in {len(r.get('burned', []))}, kept {len(r.get('kept', []))}, "
            f"{len(r.get('accepted', []))} accepted, {len(r.get('rejected', []))} rejected"
            + (f"; replaced {replaced}" if replaced else "")
            + (f"; new {', '.join(r['new_hosts'])}" if r.get("new_hosts") else "")
            + (
                f"; left out {', '.join(x['node'] for x in r['left_out'])} (still the replaced instance)"
                if r.get("left_out")
                else ""
            )
            + f" ({r.get('timings_s', {}).get('total', 0.0):.0f} s)"
        )
        out.print(Text(printable(line)))
        for p in r.get("patterns", []):
            out.print(Text("PATTERN ", style="bold red") + Text(printable(p["message"])))
    n = len(outcome.record.rounds)
    if outcome.ready:
        out.print(Text(f"bringup: READY after {n} round(s)", style="bold green"))
    else:
        label = {"budget-spent": "BUDGET SPENT", "waiting": "WAITING"}.get(outcome.status, "ACTION FAILED")
        out.print(
            Text(f"bringup: {label} after {n} round(s): ", style="bold red")
            + Text(printable(outcome.reason or ""))
        )


def _replace_action(name: str | None, fleet_spec: FleetSpec) -> str:
    from validation.bringup.adapters import REPLACE_ACTIONS

    if name is None:
        default = DEFAULT_REPLACE.get(str(fleet_spec.cloud))
        if default is None:
            fail(
                f"--replace: the spec's cloud {fleet_spec.cloud!r} has no group that replaces a node; "
                f"allowed actions: {', '.join(REPLACE_ACTIONS)}",
                exitcodes.USAGE,
            )
        return default
    if name not in REPLACE_ACTIONS:
        fail(f"--replace {printable(name)!r}; allowed: {', '.join(REPLACE_ACTIONS)}", exitcodes.USAGE)
    return name


def _inventory_from_outputs(path: Path | None, fleet_spec: FleetSpec, out_dir: Path) -> tuple[Path, str]:
    """Where the stack's inventory goes under --out, and its text."""
    from fleetforge.commands.inventory import from_outputs, read_outputs
    from stacks.ansible_inventory import InventoryConfigError, default_output_name, render

    assert path is not None
    try:
        doc = from_outputs(read_outputs(path))
    except InventoryConfigError as exc:
        fail(f"--stack-outputs {path}: {exc}", exitcodes.DATA)
    return out_dir / "inventory" / default_output_name(doc, fleet_spec.name), render(doc, str(path))


def _write_inventory(target: Path, text: str, out_dir: Path) -> None:
    from fleet.atomic import write_atomic

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, text)
    except OSError as exc:
        fail(f"--out {out_dir}: cannot write the inventory ({exc.strerror or exc})", exitcodes.CANT_CREATE)


# The seams the tests replace with fakes behind the same interfaces.


def _runner(opts: FleetRunOptions, say: Any) -> FleetRunner:
    from validation.bringup.adapters import AnsibleFleetRunner

    return AnsibleFleetRunner(opts, say)


def _inventory_reader(path: Path) -> InventoryReader:
    from validation.bringup.adapters import AnsibleInventory

    return AnsibleInventory(path)


def _replacer(name: str, timeout_s: float) -> Replacer:
    from validation.actions import ActionError
    from validation.bringup.adapters import ActionReplacer

    try:
        # The cloud's operation is waited for as long as the replacement itself.
        return ActionReplacer.named(name, timeout_s=timeout_s)
    except ActionError as exc:
        fail(f"--replace: {exc}", getattr(exitcodes, exc.exit_name))


def _known_failure(exc: Exception) -> None:
    """The runner's, inventory's and actions' own errors: raised before they changed anything."""
    from validation.actions import ActionError
    from validation.fleetrun.hosts import HostListError, MissingAnsibleError
    from validation.fleetrun.run import FleetRunError

    if isinstance(exc, MissingAnsibleError):
        fail(str(exc), exitcodes.UNAVAILABLE)
    if isinstance(exc, HostListError):
        fail(printable(str(exc)), exitcodes.DATA)
    if isinstance(exc, FleetRunError | ActionError):
        fail(printable(str(exc)), getattr(exitcodes, exc.exit_name))


def register(app: typer.Typer) -> None:
    app.command("bringup")(bringup)

"""`fleetforge fleet burnin --inventory INV`: burn in every host through Ansible, then gate the fleet.

ansible-runner drives playbooks/burnin.yml and the burnin role on every inventory host (install
fleetforge from a controller-built bundle, burn in, all-reduce across nodes through torchrun,
fetch <host>.jsonl), then the fabric stage (2+ hosts): rounds of disjoint pairs measured at once
(playbooks/fabric-round.yml), attributed to guilty hosts and suspect links; then the gate judges the
fetched results with every inventory host expected: an unreachable host, a failed task or a guilty
host is a reject with that reason, never a silent omission.

Exit codes are the gate's (docs/exit-codes.md): without a spec 0 all accepted, 1 a host rejected
on what it measured, 2 a host's results missing, errored or unreadable (an unreachable host, a
failed task); with a spec 0 when the fleet can field `nodes` hosts, 1 when not; `--strict` makes
any reject fatal. 64 bad options, 65 an unreadable inventory or spec, 66 inventory, spec or
playbook missing, 69 Ansible / ansible-runner missing (the `onprem` extra) or the bundle could not
be built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from fleet.text import printable
from fleetforge import exitcodes
from fleetforge.console import (
    QUIET,
    VERBOSE_HELP,
    err,
    fail,
    load_spec_or_exit,
    out,
    print_json,
    verbosity,
)
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
    verdict_exit,
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

if TYPE_CHECKING:  # the run's modules load only when a run starts: `fleetforge --help` stays light
    from fleet.spec import FleetSpec
    from validation.fleetrun.run import FleetRun
    from validation.gate import GateResult

fleet_app = typer.Typer(help="Fleet-wide operations over an Ansible inventory.", no_args_is_help=True)


@fleet_app.command("burnin")
def burnin(
    inventory: Annotated[
        Path,
        typer.Option(
            "--inventory", "-i", metavar="FILE", help="Ansible inventory: every host in it is burned in."
        ),
    ],
    level: LevelOption = None,
    sku: Annotated[
        str,
        typer.Option(
            metavar="SKU", help="Catalog SKU the hosts are measured against, or auto (each host detects)."
        ),
    ] = "auto",
    spec: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Fleet spec: thresholds and level for the burn-in; nodes and spares for the verdict.",
        ),
    ] = None,
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out", metavar="DIR", help="Folder for results/, the Ansible artifacts and fleet-run.json."
        ),
    ] = Path("fleet-burnin"),
    forks: ForksOption = 10,
    timeout: BurninTimeoutOption = 1800,
    throttle: ThrottleOption = 0,
    extra_package: ExtraPackageOption = None,
    wheelhouse: WheelhouseOption = None,
    collectives: CollectivesOption = True,
    collectives_timeout: CollectivesTimeoutOption = 300,
    fabric: FabricOption = True,
    fabric_rounds: FabricRoundsOption = None,
    fabric_timeout: FabricTimeoutOption = None,
    var: VarOption = None,
    limit: Annotated[
        str | None,
        typer.Option(
            "--limit",
            "--hosts",
            metavar="HOST,...",
            help="Rerun only these inventory hosts (e.g. the suspects) into the same --out: their new "
            "results replace theirs, the others' stay, and the gate judges the whole inventory.",
        ),
    ] = None,
    as_json: JsonOption = False,
    junit: JunitOption = None,
    html: HtmlOption = None,
    prom: PromOption = None,
    inventory_out: InventoryOutOption = None,
    strict: StrictOption = False,
    min_fleet: MinFleetOption = 3,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Print only the verdict (and errors), not each host's progress."),
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=VERBOSE_HELP)] = False,
) -> None:
    """Burn in every inventory host through Ansible, fetch the results, and gate the fleet."""
    detail = verbosity(quiet, verbose)
    run_record = out_dir / "fleet-run.json"
    outputs = report_outputs(
        junit,
        html,
        prom,
        inventory_out,
        out_dir=out_dir,
        reserved={run_record: f"the fleet run's summary {printable(str(run_record))}"},
    )
    if not inventory.exists():
        fail(f"--inventory {inventory}: no such file or folder", exitcodes.NO_INPUT)
    fleet_spec = load_spec_or_exit(spec) if spec is not None else None
    chosen, sku_from = choose_sku(None if sku == "auto" else sku, fleet_spec)
    opts = fleet_run_options(
        inventory=inventory,
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
        limit=_parse_limit(limit),
    )

    from validation.fleetrun.hosts import HostListError, MissingAnsibleError
    from validation.fleetrun.run import FleetRunError, run_fleet

    try:
        run = run_fleet(
            opts, say=(lambda line: None) if detail == QUIET else lambda line: err.print(Text(line))
        )
    except MissingAnsibleError as exc:
        fail(str(exc), exitcodes.UNAVAILABLE)
    except HostListError as exc:
        fail(str(exc), exitcodes.DATA)
    except FleetRunError as exc:
        fail(str(exc), getattr(exitcodes, exc.exit_name))
    result = _judge(run, chosen, sku_from, fleet_spec, min_fleet)
    write_reports(result, outputs, fleet_spec, strict, spec, out_dir)
    if as_json:
        from validation.reports.document import to_document

        document = to_document(result, strict)
        document["fleet_run"] = run.as_dict()
        print_json(document)
    else:
        if detail > QUIET:
            _print_run(run)
        print_verdict(result, strict, detail)
    raise verdict_exit(result, strict)


def _judge(
    run: FleetRun, sku: str | None, sku_from: str, fleet_spec: FleetSpec | None, min_fleet: int
) -> GateResult:
    from fleet.results import read_results
    from validation.gate import FleetPlan, GateInputError, GateSettings, decide

    files = [read_results(p) for p in run.fetched]
    try:
        result = decide(
            files,
            sku=sku,
            sku_from=sku_from,
            settings=GateSettings.from_spec(fleet_spec, min_fleet=min_fleet),
            plan=FleetPlan.from_spec(fleet_spec) if fleet_spec is not None else None,
            expected=run.expected,
            host_reasons=run.reasons(),
        )
    except GateInputError as exc:
        fail(f"gate: {exc} (results in {run.results_dir})", exitcodes.DATA)
    if run.fabric is not None:
        # Suspect links and inconclusive hosts reject nobody; the report still names them.
        result.notes.extend(run.fabric.gate_notes())
    return result


def _parse_limit(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",")))
    if not names or any(not n for n in names):
        fail(f"--limit: {value!r} is not a comma-separated list of inventory host names", exitcodes.USAGE)
    return names


def _print_run(run: FleetRun) -> None:
    hosts = run.hosts.values()
    burned = sum(1 for h in hosts if h.burnin_rc in (0, 1, 2))
    unreachable = sum(1 for h in hosts if h.unreachable is not None)
    failed = sum(1 for h in hosts if h.failures and h.unreachable is None)
    line = (
        f"fleet run: {len(run.expected)} host(s), {burned} burned in, {unreachable} unreachable, "
        f"{failed} with a failed task; {len(run.fetched)} result file(s) in {run.results_dir} "
        f"({run.timings.get('total', 0.0):.0f} s)"
    )
    out.print(Text(line, style="bold"))
    # Problems, reasons and notes quote what nodes wrote: printable, never terminal control.
    if run.problem:
        out.print(Text(printable(f"fleet run: {run.problem}"), style="bold red"))
    if run.fabric is not None:
        out.print(Text(printable(run.fabric.summary()), style="bold"))
        for host, reasons in run.fabric.reasons().items():
            for reason in reasons:
                out.print(Text(printable(f"  {host}: {reason.message}")))
        for note in run.fabric.gate_notes():
            out.print(Text(printable(f"  {note}")))


def register(app: typer.Typer) -> None:
    app.add_typer(fleet_app, name="fleet")

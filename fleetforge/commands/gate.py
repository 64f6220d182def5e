"""`fleetforge gate RESULTS...`: per-node accept / reject from burn-in results, and the fleet verdict.

Exit codes (docs/exit-codes.md). Without a spec: 0 every node accepted, 1 a node rejected on
what it measured, 2 a node's results were missing, errored or unreadable (2 outranks 1). With a
spec: 0 when at least `nodes` nodes are accepted, 1 when not; `--strict` makes any reject fatal
(exit as without a spec). 64 bad options, 65 results or spec unusable (mixed SKUs), 66 a results
path or the spec missing, 69 `--html` without matplotlib or a `--hosts-inventory` only Ansible reads
(a folder, INI, a plugin's configuration) without Ansible; 73 / 74 a report that cannot be
created / written (disk full, I/O error). A results entry that is no readable file
(a FIFO, a folder or a dangling symlink named *.jsonl) is an unreadable entry for its node (2),
never a reason to stop judging the others.

Every string that came from a results file (node names, reasons, notes) is printed as `Text`
through `printable`: rich markup in it is not interpreted and control characters are escaped,
so a node cannot draw a forged verdict line on the operator's terminal.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from fleet.results import ResultFile, iter_result_paths, read_results
from fleet.text import printable
from fleetforge import exitcodes
from fleetforge.console import (
    QUIET_HELP,
    VERBOSE_HELP,
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
from validation.gate import FleetPlan, GateInputError, GateResult, GateSettings, decide


def gate(
    results: Annotated[
        list[Path],
        typer.Argument(metavar="FILE", help="Burn-in results: JSONL files, or folders searched for *.jsonl."),
    ],
    sku: Annotated[
        str | None,
        typer.Option(
            metavar="SKU", help="SKU to judge against; default: the spec's, else the one the results name."
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Fleet spec: nodes and spares for the fleet verdict, thresholds, pinned versions.",
        ),
    ] = None,
    as_json: JsonOption = False,
    junit: JunitOption = None,
    html: HtmlOption = None,
    prom: PromOption = None,
    inventory_out: InventoryOutOption = None,
    strict: StrictOption = False,
    min_fleet: MinFleetOption = 3,
    act: Annotated[
        list[str] | None,
        typer.Option(
            "--act",
            metavar="ACTION",
            help="Act on rejected nodes (repeatable): inventory, aws-unhealthy, gcp-recreate, "
            "azure-replace, slurm-drain, k8s-taint.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --act: print exactly what would be done, do nothing.")
    ] = False,
    hosts_inventory: Annotated[
        Path | None,
        typer.Option(
            "--hosts-inventory",
            metavar="PATH",
            help="Ansible inventory of the fleet: a node it does not list is rejected (`unlisted`). "
            "With --act its host vars identify each node, and the `inventory` action adds its "
            "`rejected` group to it (a YAML file). A YAML file is read as is; a folder, INI or a "
            "plugin's configuration (aws_ec2, gcp_compute, azure_rm) through ansible-inventory.",
        ),
    ] = None,
    azure_capacity: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="With --act azure-replace: the capacity to restore in each scale set (per scale set, "
            "not the fleet's nodes + spares; default: the capacity read before the delete). A value "
            "below the capacity read less the instances deleted is refused.",
        ),
    ] = None,
    max_replace: Annotated[
        int | None,
        typer.Option(
            "--max-replace",
            metavar="N",
            min=0,
            help="With --act aws-unhealthy, gcp-recreate or azure-replace: refuse to replace more than "
            "N nodes (default: a quarter of the nodes judged, at least 1). Nodes the gate saw no "
            "measurement of are never replaced.",
        ),
    ] = None,
    expect_checks: Annotated[
        str | None,
        typer.Option(
            "--expect-checks",
            metavar="A,B",
            help="Comma-separated checks every node's run must hold (e.g. compute,memory); "
            "what lets a run narrowed by `burnin --only` pass.",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=VERBOSE_HELP)] = False,
) -> None:
    """Judge every node's burn-in against its SKU and its peers; say whether the fleet is ready."""
    level = verbosity(quiet, verbose)
    outputs = report_outputs(junit, html, prom, inventory_out)
    if dry_run and not act:
        fail("--dry-run: only with --act", exitcodes.USAGE)
    _check_action_options(act or [], max_replace, azure_capacity)
    actions = _build_actions(act or [], hosts_inventory, azure_capacity)
    expected_checks = parse_expect_checks(expect_checks)
    fleet_spec = load_spec_or_exit(spec) if spec is not None else None
    chosen, sku_from = choose_sku(sku, fleet_spec)
    # Read once: a plugin's inventory asks the cloud, and the actions must name the hosts judged.
    hostvars = _inventory_hostvars(hosts_inventory) if hosts_inventory is not None else None
    listed = list(hostvars) if hostvars is not None else None
    files = _read(results)
    # The records are long-lived from here on; without this every full collection during decide
    # rescans all of them (measured: most of the decision time at 10,000 nodes, see benchmarks/).
    gc.freeze()
    try:
        result = decide(
            files,
            sku=chosen,
            sku_from=sku_from,
            settings=GateSettings.from_spec(fleet_spec, min_fleet=min_fleet, expect_checks=expected_checks),
            plan=FleetPlan.from_spec(fleet_spec) if fleet_spec is not None else None,
            listed=listed,
        )
    except GateInputError as exc:
        fail(printable(str(exc)), exitcodes.DATA)
    finally:
        gc.unfreeze()
    write_reports(result, outputs, fleet_spec, strict, spec)
    acted = _act(actions, result, hostvars or {}, dry_run, max_replace) if actions else None
    if as_json:
        from validation.reports.document import to_document

        document = to_document(result, strict)
        if acted is not None:
            document["actions"] = acted.to_json()
        print_json(document)
    else:
        print_verdict(result, strict, level)
        if acted is not None:
            out.print(Text("\n".join(printable(line) for line in acted.render().split("\n"))))
    if acted is not None and not acted.ok:
        raise typer.Exit(exitcodes.ACTION_FAILED)
    raise verdict_exit(result, strict)


def parse_expect_checks(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",")))
    if not names or any(not name or not name.isidentifier() for name in names):
        fail(
            f"--expect-checks: {printable(value)!r} is not a comma-separated list of check names "
            f"(e.g. compute,memory)",
            exitcodes.USAGE,
        )
    return names


def _inventory_hostvars(path: Path) -> dict[str, dict[str, Any]]:
    """The hosts an inventory lists, with their vars: with one, the gate judges no node outside it,
    and the actions find each node's identifiers there."""
    from validation.actions import ActionError, load_inventory_hostvars

    try:
        return load_inventory_hostvars(path)
    except ActionError as exc:
        fail(f"--hosts-inventory: {printable(str(exc))}", getattr(exitcodes, exc.exit_name))


def _build_actions(names: list[str], hosts_inventory: Path | None, azure_capacity: int | None) -> list[Any]:
    """Check action names, options and SDKs before anything is judged or changed."""
    if not names:
        return []
    from validation.actions import ActionError, ActionOptions, build_actions

    try:
        return build_actions(
            names, ActionOptions(inventory_path=hosts_inventory, azure_capacity=azure_capacity)
        )
    except ActionError as exc:
        fail(f"--act: {_lines(str(exc))}", getattr(exitcodes, exc.exit_name))


def _check_action_options(names: list[str], max_replace: int | None, azure_capacity: int | None) -> None:
    """An action's option given without that action would be silently ignored: refuse it (before
    the actions' SDKs are looked for: a usage error is not a missing extra)."""
    if max_replace is None and azure_capacity is None:
        return
    from validation.actions import ACTIONS
    from validation.actions.azure import AzureReplace

    if any(name not in ACTIONS for name in names):
        return  # _build_actions names the unknown action
    # The actions that give machines back to the cloud (Action.replaces: they name the machine).
    replacing = [name for name, cls in ACTIONS.items() if cls.identity is not None]
    if max_replace is not None and not set(names) & set(replacing):
        fail(
            f"--max-replace: only with an --act that replaces machines: {', '.join(replacing)}",
            exitcodes.USAGE,
        )
    if azure_capacity is not None and AzureReplace.name not in names:
        fail(f"--azure-capacity: only with --act {AzureReplace.name}", exitcodes.USAGE)


def _act(
    actions: list[Any],
    result: GateResult,
    hostvars: dict[str, dict[str, Any]],
    dry_run: bool,
    max_replace: int | None,
) -> Any:
    from validation.actions import ActionError, default_max_replace, rejected_nodes, run_actions
    from validation.actions.model import Seen

    rejected = [v for v in result.nodes if not v.accepted]
    rejects = [(v.node, [r.message for r in v.reasons]) for v in rejected]
    seen: dict[str, Seen] = {
        v.node: "unlisted" if v.unlisted else "unmeasured" if v.unmeasured else "measured" for v in rejected
    }
    judged = sum(1 for v in result.nodes if not v.unlisted)
    limit, limit_from = (
        (max_replace, f"--max-replace {max_replace}")
        if max_replace is not None
        else (default_max_replace(judged), f"a quarter of the {judged} node(s) judged (--max-replace)")
    )
    try:
        nodes = rejected_nodes(rejects, hostvars, seen=seen)
        return run_actions(actions, nodes, dry_run=dry_run, max_replace=limit, max_replace_from=limit_from)
    except ActionError as exc:
        fail(f"--act: {_lines(str(exc))}", getattr(exitcodes, exc.exit_name))


def _lines(message: str) -> str:
    """A message of several lines (one per node) printed as lines, each made printable."""
    return "\n".join(printable(line) for line in message.splitlines())


def _read(inputs: list[Path]) -> list[ResultFile]:
    for item in inputs:
        # lexists: a dangling symlink named on the command line is an unreadable entry, not absent.
        if not os.path.lexists(item):
            fail(f"RESULTS: {printable(str(item))}: no such file or folder", exitcodes.NO_INPUT)
    paths = list(dict.fromkeys(iter_result_paths(inputs)))  # a file named twice is read once
    if not paths:
        shown = ", ".join(printable(str(p)) for p in inputs)
        fail(f"RESULTS: no *.jsonl results under {shown}", exitcodes.NO_INPUT)
    return [read_results(path) for path in paths]


def register(app: typer.Typer) -> None:
    app.command("gate")(gate)

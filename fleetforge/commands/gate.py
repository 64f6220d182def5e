"""`fleetforge gate RESULTS...`: per-node accept / reject from burn-in results, and the fleet verdict.

Exit codes (docs/exit-codes.md). Without a spec: 0 every node accepted, 1 a node rejected on
what it measured, 2 a node's results were missing, errored or unreadable (2 outranks 1). With a
spec: 0 when at least `nodes` nodes are accepted, 1 when not; `--strict` makes any reject fatal
(exit as without a spec). 64 bad options, 65 results or spec unusable (mixed SKUs), 66 a results
path or the spec missing, 69 `--html` without matplotlib. A results entry that is no readable file
(a FIFO, a folder or a dangling symlink named *.jsonl) is an unreadable entry for its node (2),
never a reason to stop judging the others.

Every string that came from a results file (node names, reasons, notes) is printed as `Text`
through `printable`: rich markup in it is not interpreted and control characters are escaped,
so a node cannot draw a forged verdict line on the operator's terminal.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from fleet.catalog import UnknownSkuError, all_skus, get_sku
from fleet.results import BadLine, ResultFile, iter_result_paths, read_results
from fleet.spec import FleetSpec
from fleet.text import printable
from fleetforge import exitcodes
from fleetforge.console import (
    NORMAL,
    QUIET,
    QUIET_HELP,
    VERBOSE,
    VERBOSE_HELP,
    fail,
    load_spec_or_exit,
    out,
    print_json,
    verbosity,
)
from validation.gate import FleetPlan, GateInputError, GateResult, GateSettings, NodeVerdict, decide
from validation.reports import write_text

EXIT = {"ok": exitcodes.OK, "rejected": exitcodes.REJECTED, "incomplete": exitcodes.INCOMPLETE}
_LIST_ALL_UP_TO = 60  # accepted nodes named one by one in the text output up to this many
_SHARED_FROM = 3  # nodes rejected for word-for-word the same reason: one line from this many


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
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision as one JSON document.")] = False,
    junit: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Write JUnit XML: a testcase per node x check.")
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="Write an HTML page with a plot per metric (needs the `report` extra)."
        ),
    ] = None,
    prom: Annotated[
        Path | None, typer.Option(metavar="FILE", help="Write Prometheus text format (textfile collector).")
    ] = None,
    inventory_out: Annotated[
        Path | None,
        typer.Option(
            "--inventory-out", metavar="FILE", help="Write the accepted nodes as an Ansible inventory (YAML)."
        ),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Any rejected node fails the gate, even when spares cover it.")
    ] = False,
    min_fleet: Annotated[
        int,
        typer.Option(
            "--min-fleet",
            metavar="N",
            min=1,
            help="Fewest nodes for fleet statistics; below, absolute rules only.",
        ),
    ] = 3,
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
            metavar="FILE",
            help="Ansible inventory (YAML) of the fleet: a node it does not list is rejected "
            "(`unlisted`). With --act its host vars identify each node, and the `inventory` action "
            "adds its `rejected` group there.",
        ),
    ] = None,
    azure_capacity: Annotated[
        int | None,
        typer.Option(
            metavar="N", help="With --act azure-replace: scale-set capacity to restore (default: as read)."
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
    outputs = {"--junit": junit, "--html": html, "--prom": prom, "--inventory-out": inventory_out}
    check_outputs(outputs)
    if dry_run and not act:
        fail("--dry-run: only with --act", exitcodes.USAGE)
    actions = _build_actions(act or [], hosts_inventory, azure_capacity)
    if html is not None:
        from validation.reports.html import MissingExtraError, require_matplotlib

        try:
            require_matplotlib()
        except MissingExtraError as exc:
            fail(str(exc), exitcodes.UNAVAILABLE)
    expected_checks = parse_expect_checks(expect_checks)
    fleet_spec = load_spec_or_exit(spec) if spec is not None else None
    chosen, sku_from = choose_sku(sku, fleet_spec)
    listed = _inventory_hosts(hosts_inventory) if hosts_inventory is not None else None
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
    acted = _act(actions, result, hosts_inventory, dry_run) if actions else None
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
    raise typer.Exit(EXIT[result.outcome(strict)])


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


def _inventory_hosts(path: Path) -> list[str]:
    """The hosts an inventory lists: with one, the gate judges no node outside it."""
    from validation.actions import ActionError, load_inventory_hostvars

    try:
        return list(load_inventory_hostvars(path))
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
        fail(f"--act: {exc}", getattr(exitcodes, exc.exit_name))


def _act(actions: list[Any], result: GateResult, hosts_inventory: Path | None, dry_run: bool) -> Any:
    from validation.actions import ActionError, load_inventory_hostvars, rejected_nodes, run_actions

    rejects = [(v.node, [r.message for r in v.reasons]) for v in result.nodes if not v.accepted]
    try:
        hostvars = load_inventory_hostvars(hosts_inventory) if hosts_inventory is not None else {}
        return run_actions(actions, rejected_nodes(rejects, hostvars), dry_run=dry_run)
    except ActionError as exc:
        fail(f"--act: {exc}", getattr(exitcodes, exc.exit_name))


def check_outputs(outputs: dict[str, Path | None]) -> None:
    """Refuse before judging anything, so a typo in a report path changes nothing."""
    for option, path in outputs.items():
        if path is None:
            continue
        if path.is_dir():
            fail(f"{option}: {path} is a folder; give a file name", exitcodes.USAGE)
        if not path.parent.is_dir():
            fail(f"{option}: folder {path.parent} does not exist", exitcodes.USAGE)


def choose_sku(sku: str | None, fleet_spec: FleetSpec | None) -> tuple[str | None, str]:
    if sku is not None:
        try:
            get_sku(sku)
        except UnknownSkuError:
            fail(
                f"--sku: unknown SKU {sku!r}; allowed: {', '.join(s.sku for s in all_skus())}",
                exitcodes.USAGE,
            )
        if fleet_spec is not None and fleet_spec.sku != sku:
            fail(
                f"--sku {sku} disagrees with the spec's sku {fleet_spec.sku}; give one or make them match",
                exitcodes.USAGE,
            )
        return sku, "--sku"
    if fleet_spec is not None:
        return fleet_spec.sku, "the spec"
    return None, "the results"


def _read(inputs: list[Path]) -> list[ResultFile]:
    for item in inputs:
        # lexists: a dangling symlink named on the command line is an unreadable entry, not absent.
        if not os.path.lexists(item):
            fail(f"RESULTS: {printable(str(item))}: no such file or folder", exitcodes.NO_INPUT)
    paths = list(dict.fromkeys(iter_result_paths(inputs)))  # a file named twice is read once
    if not paths:
        shown = ", ".join(printable(str(p)) for p in inputs)
        fail(f"RESULTS: no *.jsonl results under {shown}", exitcodes.NO_INPUT)
    files = []
    for path in paths:
        try:
            files.append(read_results(path))
        except OSError as exc:
            # Read failed midway (EIO, a file that vanished): that node's entry is unreadable.
            problem = f"cannot be read ({exc.strerror or exc.__class__.__name__})"
            unreadable = ResultFile(path)
            unreadable.bad_lines.append(BadLine(path, 0, problem, refuses_file=True))
            files.append(unreadable)
    return files


def write_reports(
    result: GateResult,
    outputs: dict[str, Path | None],
    fleet_spec: FleetSpec | None,
    strict: bool,
    spec_path: Path | None = None,
) -> None:
    renderers: dict[str, Callable[[], str]] = {}
    if outputs["--junit"] is not None:
        from validation.reports.junit import render_junit

        renderers["--junit"] = lambda: render_junit(result)
    if outputs["--html"] is not None:
        from validation.reports.html import Provenance, render_html

        provenance = Provenance(spec=printable(str(spec_path)) if spec_path is not None else None)
        renderers["--html"] = lambda: render_html(result, provenance)
    if outputs["--prom"] is not None:
        from validation.reports.prometheus import render_prometheus

        renderers["--prom"] = lambda: render_prometheus(result)
    if outputs["--inventory-out"] is not None:
        from validation.reports.accepted_inventory import render_inventory

        hosts = tuple(fleet_spec.hosts or ()) if fleet_spec is not None else ()
        renderers["--inventory-out"] = lambda: render_inventory(result, hosts)
    for option, render in renderers.items():
        path = outputs[option]
        assert path is not None  # only options that were given have a renderer
        try:
            write_text(path, render())
        except OSError as exc:
            fail(
                f"{option}: cannot write {printable(str(path))} ({exc.strerror or exc.__class__.__name__})",
                exitcodes.USAGE,
            )


def _reason_lines(v: NodeVerdict, skip: Collection[tuple[str, str]] = ()) -> list[Text]:
    lines: list[Text] = []
    node = printable(v.node)
    for r in (r for r in v.reasons if (r.rule, r.message) not in skip):
        head = f"REJECT {node}" if not lines else " " * (7 + len(node))
        lines.append(
            Text(head, style="bold red" if not lines else "") + Text(f"  {r.rule:<11} {printable(r.message)}")
        )
    return lines


def _shared_reasons(rejected: list[NodeVerdict]) -> dict[tuple[str, str], list[str]]:
    """Reasons word for word the same on several nodes (a level or version the whole fleet ran
    at, a check none of them recorded): said once for the fleet, not once per node."""
    holders: dict[tuple[str, str], list[str]] = {}
    for v in rejected:
        for key in dict.fromkeys((r.rule, r.message) for r in v.reasons):
            holders.setdefault(key, []).append(v.node)
    return {key: nodes for key, nodes in holders.items() if len(nodes) >= _SHARED_FROM}


def _shared_lines(shared: dict[tuple[str, str], list[str]]) -> list[Text]:
    lines = []
    for (rule, message), nodes in shared.items():
        shown = ", ".join(printable(n) for n in nodes[:_LIST_ALL_UP_TO])
        more = f" and {len(nodes) - _LIST_ALL_UP_TO} more" if len(nodes) > _LIST_ALL_UP_TO else ""
        lines.append(
            Text(f"REJECT {len(nodes)} nodes", style="bold red")
            + Text(f"  {rule:<11} {printable(message)}\n  nodes: {shown}{more}")
        )
    return lines


def print_verdict(result: GateResult, strict: bool, level: int = NORMAL) -> None:
    """The verdict for a person: quiet, the count and the fleet line only; normal, every reject
    and the accepted nodes up to a screenful; verbose, every node with its role and pace."""
    f = result.fleet
    out.print(
        Text(
            f"gate: {printable(f.sku or 'unknown SKU')}, {f.judged} node(s) judged: "
            f"{len(f.accepted)} accepted, {len(f.rejected)} rejected",
            style="bold",
        )
    )
    if level > QUIET:
        rejected = [v for v in result.nodes if not v.accepted]
        shared = _shared_reasons(rejected) if level == NORMAL else {}
        for line in _shared_lines(shared):
            out.print(line)
        for v in rejected:
            for line in _reason_lines(v, shared):
                out.print(line)
    if level >= VERBOSE:
        for v in result.nodes:
            if v.accepted:
                role = f"  {v.role}" if v.role else ""
                pace = f"  pace {v.pace:.3f}" if v.pace is not None else ""
                out.print(Text("ACCEPT", style="green") + Text(f" {printable(v.node)}{role}{pace}"))
    elif level == NORMAL and f.accepted:
        if len(f.accepted) <= _LIST_ALL_UP_TO:
            shown = ", ".join(printable(n) for n in f.accepted)
            out.print(Text(f"accepted ({len(f.accepted)}): {shown}", style="green"))
        else:
            out.print(Text(f"accepted: {len(f.accepted)} nodes (listed with -v or --json)", style="green"))
    if f.ready is not None:
        label = f"fleet {printable(f.name)}" if f.name else "fleet"
        if f.ready:
            out.print(
                Text(
                    f"{label}: READY: job on {len(f.job)} node(s), {len(f.spare)} spare(s) "
                    f"({f.required} needed)",
                    style="bold green",
                )
            )
        else:
            out.print(
                Text(
                    f"{label}: NOT READY: {len(f.accepted)} accepted, {f.required} needed "
                    f"(short by {f.required - len(f.accepted) if f.required else 0})",
                    style="bold red",
                )
            )
    if level > QUIET:
        for note in result.notes:
            out.print(Text(f"note: {printable(note)}", style="yellow"))
    if strict and f.ready and f.rejected:
        out.print(Text("--strict: a rejected node fails the gate even though spares cover it", style="red"))


def register(app: typer.Typer) -> None:
    app.command("gate")(gate)

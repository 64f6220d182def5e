"""The gate as the commands use it: report options, the checks before a run, the renderers, the
verdict for a person, and the exit code. `gate`, `fleet burnin` and `burnin` share these, so an
option means the same thing and a verdict exits the same way everywhere.

Every string that came from a results file (node names, reasons, notes) is printed as `Text`
through `printable`: rich markup in it is not interpreted and control characters are escaped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.text import Text

from fleet.catalog import UnknownSkuError, all_skus, get_sku
from fleet.results import LEVELS, Level
from fleet.spec import FleetSpec
from fleet.text import printable
from fleetforge import exitcodes
from fleetforge.console import NORMAL, QUIET, VERBOSE, fail, out
from validation.gate import GateResult, NodeVerdict
from validation.reports import write_text

_LIST_ALL_UP_TO = 60  # accepted nodes named one by one in the text output up to this many
_SHARED_FROM = 3  # nodes rejected for word-for-word the same reason: one line from this many

# ------------------------------------------------------------------------------ options
JsonOption = Annotated[bool, typer.Option("--json", help="Print the decision as one JSON document.")]
JunitOption = Annotated[
    Path | None, typer.Option("--junit", metavar="FILE", help="Write JUnit XML: a testcase per node x check.")
]
HtmlOption = Annotated[
    Path | None,
    typer.Option(
        "--html", metavar="FILE", help="Write an HTML page with a plot per metric (needs the `report` extra)."
    ),
]
PromOption = Annotated[
    Path | None,
    typer.Option("--prom", metavar="FILE", help="Write Prometheus text format (textfile collector)."),
]
InventoryOutOption = Annotated[
    Path | None,
    typer.Option(
        "--inventory-out", metavar="FILE", help="Write the accepted nodes as an Ansible inventory (YAML)."
    ),
]
StrictOption = Annotated[
    bool, typer.Option("--strict", help="Any rejected node fails the gate, even when spares cover it.")
]
MinFleetOption = Annotated[
    int,
    typer.Option(
        "--min-fleet",
        metavar="N",
        min=1,
        help="Fewest nodes for fleet statistics; below, absolute rules only.",
    ),
]
LEVEL_HELP = f"{' | '.join(LEVELS)} (default: the spec's level, else standard)."


def report_outputs(
    junit: Path | None,
    html: Path | None,
    prom: Path | None,
    inventory_out: Path | None,
    *,
    out_dir: Path | None = None,
    reserved: Mapping[Path, str] | None = None,
) -> dict[str, Path | None]:
    """The report files asked for, checked before anything is measured or judged. `out_dir`: the
    command's --out, which it creates, so a report may go in it (or a folder under it) before it
    exists; `reserved`: files the command itself writes, each with what it is, no report may take."""
    outputs = {"--junit": junit, "--html": html, "--prom": prom, "--inventory-out": inventory_out}
    check_outputs(outputs, out_dir=out_dir, reserved=reserved)
    if html is not None:
        from validation.reports.html import MissingPlotLibraryError, require_matplotlib

        try:
            require_matplotlib()
        except MissingPlotLibraryError as exc:
            fail(str(exc), exitcodes.UNAVAILABLE)
    return outputs


def parse_level(level: str | None, fleet: FleetSpec | None) -> Level:
    """`--level`, else the spec's, else standard."""
    if level is None:
        return fleet.validation.level if fleet else "standard"
    for known in LEVELS:
        if level == known:
            return known
    fail(f"--level {level!r}; allowed: {', '.join(LEVELS)}", exitcodes.USAGE)


def verdict_exit(result: GateResult, strict: bool) -> typer.Exit:
    return typer.Exit(exitcodes.VERDICT[result.outcome(strict)])


def check_outputs(
    outputs: Mapping[str, Path | None],
    *,
    out_dir: Path | None = None,
    reserved: Mapping[Path, str] | None = None,
) -> None:
    """Refuse before judging anything, so a typo in a report path changes nothing.

    A report's folder must exist, unless it is `out_dir` (the command's --out) or a folder under
    it: the command creates those, and write_reports the report's folder under it. Two reports, or
    a report and a file in `reserved`, naming one file are refused: one would overwrite the other.
    """
    out_abs = _absolute(out_dir) if out_dir is not None else None
    taken: dict[str, str] = {_same_file(path): what for path, what in (reserved or {}).items()}
    for option, path in outputs.items():
        if path is None:
            continue
        shown = printable(str(path))
        if path.is_dir():
            fail(f"{option}: {shown} is a folder; give a file name", exitcodes.USAGE)
        absolute = _absolute(path)
        if out_abs is not None and out_abs.is_relative_to(absolute):
            fail(
                f"{option}: {shown} is the --out folder {printable(str(out_dir))} or holds it; "
                "give a file name",
                exitcodes.USAGE,
            )
        if not path.parent.is_dir():
            if out_abs is None or not absolute.parent.is_relative_to(out_abs):
                where = (
                    f" (only --out {printable(str(out_dir))} and folders in it are created)"
                    if out_dir is not None
                    else ""
                )
                fail(
                    f"{option}: folder {printable(str(path.parent))} does not exist{where}",
                    exitcodes.USAGE,
                )
            blocker = _nearest_existing(absolute.parent)
            if not blocker.is_dir():
                fail(
                    f"{option}: {printable(str(blocker))} is not a folder, so {shown} cannot be written",
                    exitcodes.USAGE,
                )
        key = _same_file(path)
        if key in taken:
            fail(
                f"{option} {shown}: the same file as {taken[key]}; give each report a file of its own",
                exitcodes.USAGE,
            )
        taken[key] = f"{option} {shown}"


def _absolute(path: Path) -> Path:
    """`path` absolute and normalised (`a/./b/` is `a/b`), without touching the disk."""
    return Path(os.path.abspath(path))


def _same_file(path: Path) -> str:
    """One key for every spelling of a file: relative or absolute, through a symbolic link or not."""
    return os.path.realpath(path)


def _nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


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


def write_reports(
    result: GateResult,
    outputs: dict[str, Path | None],
    fleet_spec: FleetSpec | None,
    strict: bool,
    spec_path: Path | None = None,
    out_dir: Path | None = None,
) -> None:
    """Write every report asked for. A report's folder under `out_dir` (the command's --out) is
    created; a failed write exits 73 (the place cannot take the file) or 74 (disk full, I/O error)."""
    renderers: dict[str, Callable[[], str]] = {}
    if outputs["--junit"] is not None:
        from validation.reports.junit import render_junit

        renderers["--junit"] = lambda: render_junit(result, strict)
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
            if out_dir is not None and _absolute(path).parent.is_relative_to(_absolute(out_dir)):
                path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, render())
        except OSError as exc:
            _write_failed(option, path, exc)


def _write_failed(option: str, path: Path, exc: OSError) -> NoReturn:
    fail(
        f"{option}: cannot write {printable(str(path))} ({exc.strerror or exc.__class__.__name__})",
        exitcodes.write_failed(exc),
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

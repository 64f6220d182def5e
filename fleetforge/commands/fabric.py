"""`fleetforge fabric attribute|schedule`: name the guilty host or link from pairwise measurements.

`attribute PAIRS.json` reads pair measurements made with any tool (validation/fabric/pairsfile.py
has the format) and prints the guilty hosts, suspect links and inconclusive hosts with the
evidence. Exit codes (docs/exit-codes.md): 0 nothing found, 1 something found, 64 bad options,
65 a malformed file, 66 a missing or unreadable one.

`schedule HOST...` prints the pairing rounds for those hosts, for operators who measure the pairs
themselves and feed the figures back to `attribute`.

Host names and reasons come from the file: they are printed as `Text` through `printable`, so rich
markup in them is not interpreted and control characters show as escapes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from fleet.text import printable
from fleetforge import exitcodes
from fleetforge.console import fail, out, print_json
from validation.fabric import DEFAULT_ROUNDS, Attribution, ScheduleError, attribute, pairing_schedule
from validation.fabric.attribute import DEFAULT_MAD_K, DEFAULT_MIN_RELATIVE_MARGIN
from validation.fabric.model import HostFinding, JudgedPair
from validation.fabric.pairsfile import PairsFileError, load_pairs

fabric_app = typer.Typer(
    help="Pairwise fabric rounds: the pairing schedule, and which host or link was slow.",
    no_args_is_help=True,
)


@fabric_app.command("attribute")
def attribute_command(
    pairs_file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help='JSON: {"hosts": [...], "pairs": [[a, b, busbw_gbps or null, reason?], ...]}.',
        ),
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the attribution as one JSON document.")
    ] = False,
    floor: Annotated[
        float | None,
        typer.Option(
            "--floor",
            metavar="GBPS",
            min=0,
            help="Absolute floor in GB/s (the SKU's): a pair below it is slow.",
        ),
    ] = None,
    mad_k: Annotated[
        float,
        typer.Option(
            "--mad-k", metavar="K", min=0.1, help="Slow when below the median by more than k x MAD..."
        ),
    ] = DEFAULT_MAD_K,
    margin: Annotated[
        float,
        typer.Option(
            "--min-relative-margin",
            metavar="FRACTION",
            min=0,
            max=0.99,
            help="...and by more than this fraction of it.",
        ),
    ] = DEFAULT_MIN_RELATIVE_MARGIN,
) -> None:
    """Name the hosts slow with every partner and the links slow only together."""
    try:
        hosts, results = load_pairs(pairs_file)
    except PairsFileError as exc:
        fail(str(exc), exitcodes.NO_INPUT if exc.no_input else exitcodes.DATA)
    found = attribute(hosts, results, mad_k=mad_k, min_relative_margin=margin, floor_gbps=floor)
    code = exitcodes.OK if found.clean else exitcodes.REJECTED
    if as_json:
        print_json({"verdict": "clean" if found.clean else "found", **found.as_dict()})
    else:
        _print(found)
    raise typer.Exit(code)


@fabric_app.command("schedule")
def schedule_command(
    hosts: Annotated[
        list[str], typer.Argument(metavar="HOST", help="Host names (two or more).", show_default=False)
    ],
    rounds: Annotated[
        int, typer.Option(metavar="N", min=1, help="Rounds of disjoint pairs.")
    ] = DEFAULT_ROUNDS,
    seed: Annotated[
        int | None, typer.Option(metavar="N", help="Shuffle the seats with this seed (default: none).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rounds as one JSON document.")] = False,
) -> None:
    """Print the pairing rounds: every round's pairs run at the same time, each with a new partner."""
    try:
        schedule = pairing_schedule(hosts, rounds=rounds, seed=seed)
    except ScheduleError as exc:
        fail(printable(str(exc)), exitcodes.USAGE)
    if len(schedule.hosts) < 2:
        fail("hosts: give two or more", exitcodes.USAGE)
    if as_json:
        print_json(
            {
                "hosts": list(schedule.hosts),
                "requested_rounds": schedule.requested_rounds,
                "seed": schedule.seed,
                "rounds": [
                    {"round": r.index, "pairs": [[p.a, p.b] for p in r.pairs], "idle": list(r.idle)}
                    for r in schedule.rounds
                ],
            }
        )
        return
    for r in schedule.rounds:
        line = Text(f"round {r.index}: ")
        line.append(", ".join(f"{printable(p.a)}-{printable(p.b)}" for p in r.pairs))
        if r.idle:
            line.append(f"  (sits out: {', '.join(printable(h) for h in r.idle)})")
        out.print(line)
    if len(schedule.rounds) < rounds:
        out.print(
            Text(f"{len(schedule.hosts)} hosts have only {len(schedule.rounds)} round(s) of new partners")
        )


def _evidence(findings: JudgedPair | tuple[JudgedPair, ...], host: str | None = None) -> Text:
    items = findings if isinstance(findings, tuple) else (findings,)
    return Text("; ".join(printable(e.describe(host)) for e in items))


def _host_table(title: str, findings: tuple[HostFinding, ...]) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("host", "why", "evidence"):
        table.add_column(col)
    for f in findings:
        why = f.kind.replace("_", " ")
        table.add_row(Text(printable(f.host)), Text(why), _evidence(f.evidence, f.host))
    return table


def _print(found: Attribution) -> None:
    rule = found.rule
    pairs, failed = len(found.pairs), sum(1 for p in found.pairs if p.verdict == "failed")
    summary = f"{len(found.hosts)} hosts, {pairs} pair measurements ({failed} failed)"
    if rule.median_gbps is not None:
        summary += f"; median {rule.median_gbps:.4g} GB/s, MAD {rule.mad_gbps or 0:.4g}"
    limit = rule.limit_gbps
    summary += f"; slow below {limit:.4g} GB/s" if limit is not None else "; no limit: only failures count"
    out.print(Text(summary))
    for note in rule.notes:
        out.print(Text(f"note: {printable(note)}", style="yellow"))
    if found.guilty:
        out.print(_host_table("guilty hosts", found.guilty))
    if found.suspect_links:
        table = Table(title="suspect links (both named, neither rejected)", title_justify="left")
        for col in ("hosts", "repeated", "evidence"):
            table.add_column(col)
        for link in found.suspect_links:
            hosts = Text(f"{printable(link.pair.a)} - {printable(link.pair.b)}")
            table.add_row(hosts, "yes" if link.repeated else "no", _evidence(link.evidence))
        out.print(table)
    if found.inconclusive:
        out.print(_host_table("inconclusive (rerun with healthy partners)", found.inconclusive))
    if found.clean:
        out.print(Text("no guilty host, no suspect link", style="green"))
    else:
        counts = f"{len(found.guilty)} guilty, {len(found.suspect_links)} suspect link(s)"
        out.print(Text(f"found: {counts}, {len(found.inconclusive)} inconclusive", style="red"))


def register(app: typer.Typer) -> None:
    app.add_typer(fabric_app, name="fabric")

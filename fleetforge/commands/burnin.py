"""`fleetforge burnin`: measure this node against its SKU and write <out>/<node>.jsonl.

Exit codes (docs/exit-codes.md): 0 every check passed its floors (skips allowed); 1 a check
measured below a floor or found a health fault; 2 a check errored, crashed or timed out (outranks
1, as in the gate: rerun with --resume to complete the results); 64 bad option; 65 bad spec; 66
spec missing; 69 the accelerator's libraries are not installed, or `--sku auto` found an
accelerator its library cannot see; 73 --out cannot be written or another run holds the node's
results file; 74 writing a record failed part way (disk full: the records before it are kept);
130 interrupted (records kept).

Every string that came from a node or a results file is printed through `printable`.
"""

from __future__ import annotations

import importlib.util
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from fleet.catalog import Sku, UnknownSkuError, get_sku
from fleet.results import CheckRecord
from fleet.spec import FleetSpec
from fleetforge import exitcodes
from fleetforge.console import (
    QUIET,
    QUIET_HELP,
    VERBOSE,
    err,
    fail,
    load_spec_or_exit,
    no_color,
    out,
    verbosity,
)
from fleetforge.gating import LEVEL_HELP, parse_level


def burnin(
    sku: Annotated[
        str,
        typer.Option(
            metavar="SKU",
            help="Catalog SKU to measure against, or 'auto' (NVML / JAX / no accelerator -> cpu).",
        ),
    ] = "auto",
    level: Annotated[
        str | None,
        typer.Option(metavar="LEVEL", help=LEVEL_HELP),
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Folder for <node>.jsonl and raw outputs.")
    ] = Path("burnin-results"),
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only", metavar="A,B", help="Run only these checks (repeat the option or separate with commas)."
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Continue the run in <node>.jsonl: skip recorded checks, rerun errors."
        ),
    ] = False,
    spec: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help=(
                "Fleet spec: its SKU, level, threshold overrides and check parameters apply, and on TPU "
                "the chips each VM of its slice has."
            ),
        ),
    ] = None,
    node: Annotated[
        str | None, typer.Option(metavar="NAME", help="Node name for the results (default: the host name).")
    ] = None,
    storage_path: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Where the storage check writes its test file (default: --out)."),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help=QUIET_HELP + " Failing checks still print.")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Print every metric of every check, not only the first four."),
    ] = False,
) -> None:
    """Burn this node in: run the checks of a level and record every measurement."""
    from fleet.text import printable
    from validation.burnin.registry import UnknownCheckError
    from validation.burnin.runner import (
        OutputError,
        RunBusy,
        RunError,
        RunOptions,
        check_node_name,
        default_node,
        final_status,
        run_burnin,
    )
    from validation.burnin.skuselect import AcceleratorUnreadable, AutoSkuError, detect_sku

    level_of_detail = verbosity(quiet, verbose)
    fleet = load_spec_or_exit(spec) if spec is not None else None
    chosen_level = parse_level(level, fleet)
    try:
        target = _sku(sku, fleet, detect_sku)
    except AcceleratorUnreadable as exc:
        fail(f"--sku auto: {printable(str(exc))}", exitcodes.UNAVAILABLE)
    except AutoSkuError as exc:
        fail(f"--sku auto: {printable(str(exc))}", exitcodes.USAGE)
    _require_libraries(target)
    names = [n.strip() for item in only or [] for n in item.split(",") if n.strip()] or None
    if storage_path is not None and not storage_path.is_dir():
        fail(f"--storage-path {printable(str(storage_path))}: not a directory", exitcodes.USAGE)
    node_name = node if node is not None else default_node()  # an empty --node is refused, not replaced
    try:
        check_node_name(node_name)  # before anything is created
    except RunError as exc:
        fail(printable(str(exc)), exitcodes.USAGE)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--out {printable(str(out_dir))}: cannot create it ({exc.strerror})", exitcodes.CANT_CREATE)

    from validation.burnin.progress import PlainProgress, make_progress

    opts = RunOptions(
        sku=target,
        level=chosen_level,
        out_dir=out_dir,
        node=node_name,
        only=names,
        resume=resume,
        thresholds=dict(fleet.validation.thresholds) if fleet else {},
        options={name: dict(params) for name, params in fleet.validation.checks.items()} if fleet else {},
        storage_path=storage_path,
        # A TPU VM's chips follow its slice (4 on a VM of a multi-host v5e/v6e slice): the spec says.
        expected_accelerators=fleet.tpu_chips_per_vm if fleet else None,
    )
    previous = signal.signal(
        signal.SIGTERM, _interrupt
    )  # a CI or Ansible timeout: keep records, stop cleanly
    try:
        observer: Any
        if level_of_detail == QUIET:
            observer = _QuietProgress()
        elif level_of_detail == VERBOSE:
            observer = _VerboseProgress(out)
        else:
            # NO_COLOR: no live bar either (it redraws with cursor escapes), one line per check.
            observer = PlainProgress(out) if no_color() else make_progress(out)
        with observer as progress:
            summary = run_burnin(opts, progress)
    except (RunError, UnknownCheckError) as exc:
        fail(printable(str(exc)), exitcodes.USAGE)
    except RunBusy as exc:
        fail(printable(str(exc)), exitcodes.CANT_CREATE)
    except OutputError as exc:
        fail(printable(str(exc)), exitcodes.IO_ERROR if exc.during_run else exitcodes.CANT_CREATE)
    except KeyboardInterrupt:
        path = out_dir / f"{opts.node}.jsonl"
        err.print(
            Text(
                f"interrupted: the records in {printable(str(path))} are kept; continue with --resume",
                style="magenta",
            )
        )
        raise typer.Exit(exitcodes.INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    counts = final_status(summary.final)
    line = Text(f"{printable(str(summary.path))}: ")
    line.append(
        summary.verdict,
        style={"ok": "bold green", "rejected": "bold red"}.get(summary.verdict, "bold magenta"),
    )
    line.append(
        f" - {counts['pass']} pass, {counts['fail']} fail, {counts['error']} error, {counts['skip']} skip"
        f" ({target.sku}, {chosen_level}, {summary.wall_s:.1f} s)"
    )
    out.print(line)
    for name in summary.missing:
        err.print(Text(f"{printable(name)}: no record (the run stopped before it)", style="magenta"))
    raise typer.Exit(exitcodes.VERDICT[summary.verdict])


class _QuietProgress:
    """-q: a line only for a check that failed or errored."""

    def planned(self, run_id: str, todo: Sequence[str], kept: Sequence[str]) -> None:
        self.total = len(todo)
        self.index = 0

    def started(self, check: str, timeout: float) -> None:
        self.index += 1

    def finished(self, record: CheckRecord) -> None:
        from validation.burnin.progress import finished_line

        if record.status in ("fail", "error"):
            out.print(finished_line(record, self.index, self.total))

    def __enter__(self) -> _QuietProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _VerboseProgress:
    """-v: the plain lines, each followed by every metric the check measured."""

    def __init__(self, console: Console) -> None:
        from validation.burnin.progress import PlainProgress

        self.plain = PlainProgress(console)
        self.console = console

    def planned(self, run_id: str, todo: Sequence[str], kept: Sequence[str]) -> None:
        self.plain.planned(run_id, todo, kept)

    def started(self, check: str, timeout: float) -> None:
        self.plain.started(check, timeout)

    def finished(self, record: CheckRecord) -> None:
        from fleet.text import printable

        self.plain.finished(record)
        for name, value in sorted(record.metrics.items()):
            self.console.print(Text(f"    {printable(name)} = {value:.6g}"))

    def __enter__(self) -> _VerboseProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _sku(name: str, fleet: FleetSpec | None, detect: Callable[[], Sku]) -> Sku:
    if name == "auto":
        if fleet is not None:
            return fleet.catalog_sku
        return detect()
    try:
        sku = get_sku(name)
    except UnknownSkuError as exc:
        fail(f"--sku: {exc}", exitcodes.USAGE)
    if fleet is not None and fleet.sku != sku.sku:
        fail(f"--sku {sku.sku} contradicts the spec's sku {fleet.sku}; drop one of them", exitcodes.USAGE)
    return sku


def _require_libraries(sku: Sku) -> None:
    from validation.burnin.backends import required_modules

    for module, how in required_modules(sku.accelerator.kind):
        if importlib.util.find_spec(module) is None:
            fail(f"{sku.sku} is measured with {module}, which is not installed: {how}", exitcodes.UNAVAILABLE)


def register(app: typer.Typer) -> None:
    app.command("burnin")(burnin)

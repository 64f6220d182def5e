"""Showing a burn-in as it runs: a rich progress display on a terminal, plain lines otherwise
(CI logs, Ansible, pipes), one line per finished check either way.

Reasons, check names and run ids may come from a node or a results file: every such string goes
through `printable` (control characters, newlines and bidi overrides escaped, so a reason cannot
draw a forged line or move the cursor) and is printed as `Text`, never parsed as rich markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from fleet.results import CheckRecord
from fleet.text import printable

STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta", "skip": "dim"}


def summarize(record: CheckRecord, limit: int = 4) -> str:
    if record.status in {"fail", "error", "skip"}:
        return printable(record.reason or record.error or "")
    shown = [f"{printable(k)}={v:.4g}" for k, v in sorted(record.metrics.items())[:limit]]
    more = len(record.metrics) - limit
    return " ".join(shown) + (f" (+{more})" if more > 0 else "")


def finished_line(record: CheckRecord, index: int, total: int) -> Text:
    line = Text(f"[{index}/{total}] {printable(record.check)}: ")
    line.append(record.status, style=STYLE[record.status])
    line.append(f" in {record.duration_s:.1f} s  {summarize(record)}")
    return line


class PlainProgress:
    """One line when a check starts and one when it ends; nothing redrawn."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.total = 0
        self.index = 0

    def planned(self, run_id: str, todo: Sequence[str], kept: Sequence[str]) -> None:
        self.total = len(todo)
        kept_names = ", ".join(printable(k) for k in kept)
        kept_text = f"; {len(kept)} kept from the earlier attempt ({kept_names})" if kept else ""
        self.console.print(Text(f"burn-in {printable(run_id)}: {len(todo)} checks to run{kept_text}"))

    def started(self, check: str, timeout: float) -> None:
        self.index += 1
        self.console.print(
            Text(f"[{self.index}/{self.total}] {printable(check)}: running (timeout {timeout:g} s)")
        )

    def finished(self, record: CheckRecord) -> None:
        self.console.print(finished_line(record, self.index, self.total))

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class RichProgress:
    """A live bar with the running check; finished checks print above it."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task: TaskID | None = None
        self.index = 0
        self.total = 0

    def planned(self, run_id: str, todo: Sequence[str], kept: Sequence[str]) -> None:
        self.total = len(todo)
        if kept:
            self.console.print(
                Text(f"resuming {printable(run_id)}: {len(kept)} checks already recorded", style="dim")
            )
        # The description column renders rich markup: escape it as well as the controls.
        self.task = self.progress.add_task(f"burn-in {escape(printable(run_id))}", total=len(todo))

    def started(self, check: str, timeout: float) -> None:
        self.index += 1
        if self.task is not None:
            self.progress.update(self.task, description=f"{escape(printable(check))} (timeout {timeout:g} s)")

    def finished(self, record: CheckRecord) -> None:
        self.progress.console.print(finished_line(record, self.index, self.total))
        if self.task is not None:
            self.progress.advance(self.task)

    def __enter__(self) -> RichProgress:
        self.progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.progress.stop()


def make_progress(console: Console) -> PlainProgress | RichProgress:
    return RichProgress(console) if console.is_terminal else PlainProgress(console)

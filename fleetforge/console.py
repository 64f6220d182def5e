"""One place that prints: rich on a terminal, plain text in pipes and CI logs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn, TextIO

import typer
from rich.console import Console
from rich.text import Text

from fleet.spec import FleetSpec, SpecError, load_spec
from fleetforge import exitcodes

# In pipes and CI logs there is no terminal width to honour; wide lines beat truncated SKU names.
_PIPE_WIDTH = 200


def no_color() -> bool:
    """NO_COLOR (https://no-color.org): set and not empty, no styling at all. rich alone drops only
    the colours and keeps bold, dim and the progress bar's codes; without a colour system it
    writes no escape sequence."""
    return bool(os.environ.get("NO_COLOR"))


def _console(stream: TextIO, *, stderr: bool) -> Console:
    kwargs: dict[str, Any] = {"no_color": True, "color_system": None} if no_color() else {}
    return Console(
        stderr=stderr,
        highlight=False,
        soft_wrap=True,
        width=None if stream.isatty() else _PIPE_WIDTH,
        **kwargs,
    )


out = _console(sys.stdout, stderr=False)
err = _console(sys.stderr, stderr=True)


def print_json(data: Any) -> None:
    # Plain stdout, not rich: machine readers want exactly one JSON document.
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def spec_failed(exc: SpecError) -> NoReturn:
    """Report a spec that cannot be used and exit 66 (no file to read) or 65 (invalid)."""
    err.print(Text(exc.render(), style="red"))
    raise typer.Exit(spec_exit_code(exc))


def spec_exit_code(exc: SpecError) -> int:
    return exitcodes.NO_INPUT if exc.no_input else exitcodes.DATA


def checked_spec(path: Path) -> FleetSpec:
    """The spec, or SpecError naming what is wrong: what pydantic checks, and the per-check
    parameters the burn-in's registry does not know (a node would refuse them mid-run)."""
    from validation.burnin.checks import REGISTRY
    from validation.burnin.registry import option_problems

    spec = load_spec(path)
    problems = option_problems(REGISTRY, spec.validation.checks)
    if problems:
        raise SpecError(str(path), problems)
    return spec


def load_spec_or_exit(path: Path) -> FleetSpec:
    """The spec (checked_spec), or exit 65/66 naming what is wrong."""
    try:
        return checked_spec(path)
    except SpecError as exc:
        spec_failed(exc)


def fail(message: str, code: int) -> NoReturn:
    # Text, not markup: messages quote user input, which may hold brackets.
    err.print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(code)


# -q / --quiet and -v / --verbose, for the commands whose output grows with the fleet.
QUIET, NORMAL, VERBOSE = -1, 0, 1
QUIET_HELP = "Print only the verdict (and errors)."
VERBOSE_HELP = "Print every node and every measurement, however many."


def verbosity(quiet: bool, verbose: bool) -> int:
    if quiet and verbose:
        fail("-q/--quiet and -v/--verbose: give one of them", exitcodes.USAGE)
    return QUIET if quiet else VERBOSE if verbose else NORMAL

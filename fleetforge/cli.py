"""The `fleetforge` command. Sub-commands live in fleetforge.commands; this wires them up and
maps every failure onto the documented exit codes (docs/exit-codes.md) without tracebacks."""

from __future__ import annotations

import importlib
import sys
from typing import Annotated

import typer
from typer.exceptions import TyperException

from fleetforge import __version__, exitcodes
from fleetforge.console import err

# Each module exposes register(app). Add a line here to add a command.
COMMANDS = (
    "fleetforge.commands.catalog",
    "fleetforge.commands.spec",
    "fleetforge.commands.demo",
    "fleetforge.commands.gate",
    "fleetforge.commands.plan",
    "fleetforge.commands.burnin",
    "fleetforge.commands.inventory",
    "fleetforge.commands.fleet",
    "fleetforge.commands.fabric",
)

app = typer.Typer(
    name="fleetforge",
    help="Provision homogeneous accelerator fleets, configure their nodes, burn every node in.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fleetforge {__version__}")
        raise typer.Exit(exitcodes.OK)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """fleetforge: fleets that are right before jobs land."""


for _module in COMMANDS:
    importlib.import_module(_module).register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turning click's conventions into fleetforge's exit codes."""
    try:
        # Without standalone mode, a command's typer.Exit(code) comes back as the return value.
        code = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except TyperException as exc:  # usage errors: bad option, missing argument, no such command
        show = getattr(exc, "show", None)
        if callable(show):
            show(file=sys.stderr)
        else:
            err.print(exc.format_message())
        return exitcodes.USAGE
    except (typer.Abort, KeyboardInterrupt):
        err.print("interrupted")
        return exitcodes.INTERRUPTED
    return int(code) if isinstance(code, int) else exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())

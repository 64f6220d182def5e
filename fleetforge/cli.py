"""The `fleetforge` command. Sub-commands live in fleetforge.commands; this wires them up and
maps every failure onto the documented exit codes (docs/exit-codes.md) without tracebacks."""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Any

import typer
from rich.text import Text
from typer.exceptions import TyperException

from fleet.text import printable
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
    "fleetforge.commands.bringup",
)

app = typer.Typer(
    name="fleetforge",
    help="Provision homogeneous accelerator fleets, configure their nodes, burn every node in.",
    no_args_is_help=True,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell.
    add_completion=True,
    # Plain click help: option names and examples never squeezed into boxes at 80 columns.
    rich_markup_mode=None,
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


# typer's own placeholders name Python types; these are the Unix ones for each.
_UNIX_PLACEHOLDER = {
    "path": "PATH",
    "int": "N",
    "int range": "N",
    "float": "X",
    "float range": "X",
    "str": "TEXT",
}


def _metavar(param: Any) -> str:
    """A Unix-style placeholder for a parameter that names none: PATH, N, X, TEXT, A|B."""
    label = str(param.display_type(None)).strip("<>")
    if label.startswith("list[") and label.endswith("]"):
        label = label[len("list[") : -1]
    if "|" in label:
        name = label  # a choice: its values are the best placeholder
    elif label.lower() in _UNIX_PLACEHOLDER:
        name = _UNIX_PLACEHOLDER[label.lower()]
    else:
        name = str(param.name or "value").upper()
    return name


def _unix_argument(param: Any) -> None:
    """Show an argument as click does (`FILE...`, `[DIR]`), without typer's `{FILE}` braces and
    the Python type it appends to the help line. typer has no option for this, so the argument's
    class is swapped for a subclass overriding the three display hooks; with a typer that lacks
    them the subclass changes nothing and tests/fleetforge/test_help.py says so."""
    base = type(param)

    class UnixArgument(base):  # type: ignore[valid-type, misc]
        def display_type_rich(self, ctx: Any) -> None:
            return None

        def _rich_display_name(self) -> str:
            return str(self.metavar) + ("..." if self.nargs != 1 else "")

        def _usage_display_name(self) -> str:
            name = self._rich_display_name()
            return name if self.required else f"[{name}]"

    param.__class__ = UnixArgument


def unix_metavars(command: Any) -> Any:
    """Give every option and argument without an explicit metavar a Unix one, so help never shows
    typer's Python types (`<list[Path]>`, `<int range>`, `<str>`) for a command added later."""
    for param in command.params:
        if param.metavar is None and not getattr(param, "is_flag", False):
            param.metavar = _metavar(param)
        if param.param_type_name == "argument":
            _unix_argument(param)
    for sub in getattr(command, "commands", {}).values():
        if sub.short_help is None and sub.help:
            # The command list shows the whole first paragraph, wrapped, rather than cut at "...".
            sub.short_help = " ".join(sub.help.strip().split("\n\n")[0].split())
        unix_metavars(sub)
    return command


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turning click's conventions into fleetforge's exit codes."""
    try:
        command = unix_metavars(typer.main.get_command(app))
        # Without standalone mode, a command's typer.Exit(code) comes back as the return value.
        code = command.main(args=argv, prog_name="fleetforge", standalone_mode=False)
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
    except Exception as exc:  # a bug: exit 1 would read as "rejected", and a traceback is no message
        # Text, not markup: the exception's words may quote input holding brackets.
        what = f"{type(exc).__name__}: {printable(str(exc))}"
        err.print(Text(f"internal error: {what} (a bug in fleetforge; please report it)"))
        return exitcodes.SOFTWARE
    return int(code) if isinstance(code, int) else exitcodes.OK


if __name__ == "__main__":
    sys.exit(main())

"""`fleetforge inventory SPEC | --stack-outputs FILE [-o FILE]`: the Ansible inventory for site.yml.

Exit codes (docs/exit-codes.md): 0 written, 64 neither or both inputs, 65 the spec or the outputs
cannot make an inventory (named field), 66 an input file missing or unreadable; 64 also when
-o cannot be written or is named so the cloud's plugin would not read it.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from fleet.atomic import write_atomic
from fleetforge import exitcodes
from fleetforge.console import err, fail, load_spec_or_exit
from stacks.ansible_inventory import (
    PLUGIN_FILE_SUFFIXES,
    InventoryConfigError,
    from_spec,
    from_stack_outputs,
    render,
)


def inventory(
    spec: Annotated[
        Path | None, typer.Argument(help="On-prem fleet spec (YAML) whose hosts become the inventory.")
    ] = None,
    stack_outputs: Annotated[
        Path | None,
        typer.Option(
            "--stack-outputs",
            help="Stack outputs JSON (`pulumi stack output --json`): writes the cloud's dynamic inventory "
            "plugin configuration for the fleet's group.",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Write here instead of stdout (the plugins need names ending aws_ec2.yml or gcp_compute.yml).",
        ),
    ] = None,
) -> None:
    """Write an Ansible inventory with the groups playbooks/site.yml applies roles by."""
    if (spec is None) == (stack_outputs is None):
        fail("give an on-prem spec file or --stack-outputs FILE (exactly one)", exitcodes.USAGE)
    try:
        if spec is not None:
            doc = from_spec(load_spec_or_exit(spec))
            source = str(spec)
        else:
            assert stack_outputs is not None
            doc = from_stack_outputs(_read_outputs(stack_outputs))
            source = str(stack_outputs)
    except InventoryConfigError as exc:
        fail(f"{source_name(spec, stack_outputs)}: {exc}", exitcodes.DATA)
    plugin = str(doc.get("plugin", ""))
    suffixes = PLUGIN_FILE_SUFFIXES.get(plugin)
    if output is not None and suffixes and not output.name.endswith(suffixes):
        fail(
            f"-o {output}: the {plugin.rpartition('.')[2]} inventory plugin only reads files named "
            f"*{suffixes[0]}",
            exitcodes.USAGE,
        )
    text = render(doc, source)
    if output is None:
        typer.echo(text, nl=False)  # plain: the inventory is piped to files and tools
        return
    _write_atomically(output, text)
    err.print(Text(f"wrote {output}"))


def source_name(spec: Path | None, stack_outputs: Path | None) -> str:
    return str(spec if spec is not None else stack_outputs)


def _read_outputs(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"{path}: no such file", exitcodes.NO_INPUT)
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        fail(f"{path}: cannot read ({exc.__class__.__name__})", exitcodes.NO_INPUT)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", exitcodes.DATA)
    if not isinstance(data, dict):
        fail(
            f"{path}: stack outputs are a JSON object of sections, got {type(data).__name__}", exitcodes.DATA
        )
    return data


def _write_atomically(path: Path, text: str) -> None:
    """Through the shared atomic writer, so a failed run never leaves a half inventory for Ansible."""
    try:
        write_atomic(path, text)
    except OSError as exc:
        # The burn-in's split: a place that cannot take the file (73) vs a write that failed (74).
        code = (
            exitcodes.IO_ERROR
            if exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT)
            else exitcodes.CANT_CREATE
        )
        fail(f"-o {path}: cannot write ({exc.strerror or type(exc).__name__})", code)


def register(app: typer.Typer) -> None:
    app.command("inventory")(inventory)

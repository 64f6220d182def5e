"""`fleetforge inventory SPEC | --stack-outputs FILE [-o FILE]`: the Ansible inventory for site.yml.

A TPU fleet's VMs are no Compute Engine instances, so no inventory plugin lists them: for a TPU
queued resource the command lists them through the TPU API (stacks.tpu_inventory) and writes a
static inventory, which Ansible reads from a file named *.yml or *.yaml.

Exit codes (docs/exit-codes.md): 0 written, 64 neither or both inputs, 65 the spec or the outputs
cannot make an inventory (named field), or a TPU slice is not ready to be listed (named queued
resource or node), 66 an input file missing or unreadable, 69 the TPU API cannot be asked (the
`cloud` extra missing, no Application Default Credentials, the API refused); 64 also when -o
cannot be written or is named so the cloud's plugin (or Ansible's YAML inventory) would not read it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from fleet.atomic import write_atomic
from fleetforge import exitcodes
from fleetforge.console import err, fail, load_spec_or_exit
from stacks import tpu_inventory
from stacks.ansible_inventory import (
    PLUGIN_FILE_SUFFIXES,
    InventoryConfigError,
    from_spec,
    from_stack_outputs,
    render,
)

# Ansible's YAML inventory plugin reads only these (its yaml_extensions), so a static inventory
# written under another name would be parsed as INI and fail.
STATIC_SUFFIXES = (".yml", ".yaml")


def inventory(
    spec: Annotated[
        Path | None, typer.Argument(help="On-prem fleet spec (YAML) whose hosts become the inventory.")
    ] = None,
    stack_outputs: Annotated[
        Path | None,
        typer.Option(
            "--stack-outputs",
            help="Stack outputs JSON (`pulumi stack output --json`): writes the cloud's dynamic inventory "
            "plugin configuration for the fleet's group; for TPU slices, lists the TPU VMs through the "
            "TPU API (Application Default Credentials) and writes a static inventory.",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Write here instead of stdout (the plugins need names ending aws_ec2.yml, gcp_compute.yml "
            "or azure_rm.yml; a static inventory *.yml).",
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
            outputs = read_outputs(stack_outputs)
            doc = from_outputs(outputs, output)
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


def from_outputs(outputs: dict[str, Any], output: Path | None = None) -> dict[str, Any]:
    """The inventory document for stack outputs: a plugin configuration, or for TPU slices the
    static inventory listed through the TPU API. Raises InventoryConfigError; exits 69 when the
    TPU API cannot be asked and 64 when `output` is no name for a static inventory."""
    if tpu_inventory.is_tpu_outputs(outputs):
        return _tpu_inventory(outputs, output)
    return from_stack_outputs(outputs)


def _tpu_inventory(outputs: dict[str, Any], output: Path | None) -> dict[str, Any]:
    """Lists the TPU VMs through the API; the -o name is checked first, so a bad name costs no call."""
    if output is not None:
        _check_static_name(output)
    try:
        return tpu_inventory.from_tpu_outputs(outputs)
    except tpu_inventory.TpuApiUnavailable as exc:
        fail(str(exc), exitcodes.UNAVAILABLE)


def _check_static_name(output: Path) -> None:
    if not output.name.endswith(STATIC_SUFFIXES) or output.name.endswith(
        tuple(s for group in PLUGIN_FILE_SUFFIXES.values() for s in group)
    ):
        fail(
            f"-o {output}: a static inventory is read by Ansible's YAML inventory from a file named *.yml "
            "or *.yaml (and not named for a cloud plugin, such as *gcp_compute.yml)",
            exitcodes.USAGE,
        )


def source_name(spec: Path | None, stack_outputs: Path | None) -> str:
    return str(spec if spec is not None else stack_outputs)


def read_outputs(path: Path) -> dict[str, Any]:
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
        fail(f"-o {path}: cannot write ({exc.strerror or type(exc).__name__})", exitcodes.write_failed(exc))


def register(app: typer.Typer) -> None:
    app.command("inventory")(inventory)

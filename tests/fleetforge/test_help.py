"""Help reads like a Unix tool's at 80 columns, the catalog never cuts a SKU, NO_COLOR means no
escape sequences."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from rich.console import Console

from fleet.catalog import all_skus
from fleetforge.cli import app, main, unix_metavars
from fleetforge.commands.catalog import catalog_table
from tests.validation.gate.helpers import fleet, spec_mapping, write


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands(unix_metavars(typer.main.get_command(app)))


def test_the_walk_finds_every_command_and_sub_command() -> None:
    paths = {" ".join(p) for p, _ in COMMANDS}
    assert {"", "gate", "burnin", "catalog", "demo", "fleet burnin", "fabric schedule", "spec check"} <= paths


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) or "fleetforge" for p, _ in COMMANDS])
def test_help_at_80_columns_names_no_python_type_and_cuts_no_option(
    path: tuple[str, ...], command: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main([*path, "--help"]) == 0
    text = capsys.readouterr().out
    assert "<bool>" not in text and "list[" not in text
    assert not re.search(r"<(str|int|float|path|Path)[^>]*>", text), text
    assert "╭" not in text and "│" not in text  # no boxes squeezing option names
    assert max(len(line) for line in text.splitlines()) <= 80, text
    if "Commands:" in text:  # each command's summary whole, wrapped, never cut at "..."
        assert "..." not in text[text.index("Commands:") :], text
    for param in command.params:
        for name in getattr(param, "opts", []):
            if name.startswith("-"):
                assert re.search(rf"(^|[ ,/]){re.escape(name)}([ ,/=]|$)", text, re.M), (name, text)


def test_file_arguments_read_as_file_placeholders(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    main(["gate", "--help"])
    text = capsys.readouterr().out
    assert "Usage: fleetforge gate [OPTIONS] FILE..." in text
    assert "--spec FILE" in text and "--min-fleet N" in text and "--expect-checks A,B" in text


def test_shell_completion_is_offered(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--help"])
    assert "--install-completion" in capsys.readouterr().out


def test_catalog_at_80_columns_shows_every_sku_whole() -> None:
    skus = all_skus()
    console = Console(width=80, file=io.StringIO(), color_system=None)
    console.print(catalog_table(skus))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    first_cells = {line.split()[0] for line in text.splitlines() if line.strip()}
    for sku in skus:
        assert sku.sku in first_cells, (sku.sku, text)
    assert "…" not in text


@pytest.mark.parametrize("argv", [["catalog"], ["gate", "--help"], ["spec", "check", "no-such.yaml"]])
def test_no_color_writes_no_escape_sequence(argv: list[str]) -> None:
    # FORCE_COLOR makes rich style as on a terminal; NO_COLOR must still win, on both streams.
    env = {**os.environ, "FORCE_COLOR": "1", "NO_COLOR": "1", "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-m", "fleetforge.cli", *argv], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout or done.stderr
    assert "\x1b[" not in done.stdout + done.stderr


def test_without_no_color_forced_colour_does_style() -> None:
    """The NO_COLOR test above can fail: the same command styles without it."""
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "80"}
    env.pop("NO_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-m", "fleetforge.cli", "catalog"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "\x1b[" in done.stdout


# -q / -v, and reasons the whole fleet shares said once ------------------------------------------


def _gate(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str]:
    code = main(["gate", *(str(a) for a in argv)])
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def seventy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("seventy"), fleet(70, node9={"scale": {"gemm_bf16_tflops": 0.7}}))


def test_gate_quiet_prints_only_the_verdict(seventy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, text = _gate(capsys, seventy, "-q")
    assert code == 1
    assert text.splitlines() == ["gate: p5.48xlarge, 70 node(s) judged: 69 accepted, 1 rejected"]


def test_gate_verbose_names_every_accepted_node(seventy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, normal = _gate(capsys, seventy)
    assert "accepted: 69 nodes (listed with -v or --json)" in normal and "ACCEPT" not in normal
    _, text = _gate(capsys, seventy, "--verbose")
    accepted = [line for line in text.splitlines() if line.startswith("ACCEPT ")]
    assert len(accepted) == 69 and any(line.split()[1] == "node70" for line in accepted)
    assert "pace " in accepted[0]
    assert any(line.startswith("REJECT node9") for line in text.splitlines())


def test_gate_quiet_and_verbose_together_is_a_usage_error(
    seventy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["gate", str(seventy), "-q", "-v"]) == 64
    assert "-q/--quiet and -v/--verbose" in capsys.readouterr().err


def test_a_level_the_whole_fleet_missed_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = write(tmp_path / "results", fleet(8))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_mapping(6, 1, level="extended")), encoding="utf-8")
    code, text = _gate(capsys, results, "--spec", spec)
    assert code == 1
    lines = text.splitlines()
    level_lines = [line for line in lines if "burn-in ran at level standard" in line]
    assert len(level_lines) == 1 and level_lines[0].startswith("REJECT 8 nodes")
    assert "  nodes: node1, node2, node3, node4, node5, node6, node7, node8" in lines
    assert not any(line.startswith("REJECT node") for line in lines)
    # -v keeps the per-node lines for whoever wants them
    _, verbose = _gate(capsys, results, "--spec", spec, "-v")
    assert sum(line.startswith("REJECT node") for line in verbose.splitlines()) == 8


@pytest.mark.parametrize("flag", ["-q", "-v"])
def test_burnin_and_demo_and_fleet_burnin_take_quiet_and_verbose(
    flag: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    for command in (["burnin"], ["demo"], ["fleet", "burnin"]):
        assert main([*command, "--help"]) == 0
        assert f"{flag}, --{'quiet' if flag == '-q' else 'verbose'}" in capsys.readouterr().out


def test_bash_completion_completes_a_command_name() -> None:
    env = {
        **os.environ,
        "_FLEETFORGE_COMPLETE": "complete_bash",
        "COMP_WORDS": "fleetforge ga",
        "COMP_CWORD": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "fleetforge.cli"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["gate"]


def test_a_burn_in_under_no_color_draws_no_bar_and_no_style(tmp_path: Path) -> None:
    env = {**os.environ, "FORCE_COLOR": "1", "NO_COLOR": "1", "COLUMNS": "80"}
    argv = [
        "burnin",
        "--sku",
        "cpu",
        "--level",
        "quick",
        # inventory: a check that passes on any machine, however busy (a measured figure is judged
        # against the catalog's floor, which a starved run can miss).
        "--only",
        "inventory",
        "--node",
        "n1",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "fleetforge.cli", *argv], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "\x1b[" not in done.stdout + done.stderr
    assert "[1/1] inventory: pass" in done.stdout  # the plain line per check, not a live bar


def test_a_quiet_burn_in_prints_its_verdict_line_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["burnin", "-q", "--sku", "cpu", "--level", "quick", "--only", "inventory", "--node", "n1"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{tmp_path / 'n1.jsonl'}: ok - 1 pass")

"""`fleetforge fabric attribute|schedule`: exit codes, JSON shape, the evidence shown, names escaped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fleetforge import exitcodes
from fleetforge.cli import main
from validation.fabric import Pair, pairing_schedule
from validation.fabric.simulate import SimulatedFabric
from validation.fabric.stage import run_schedule


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_stage(path: Path, n: int, seed: int = 0, **fabric: Any) -> Path:
    """A PAIRS.json from a simulated 3-round stage, as an operator's own tool would write it."""
    hosts = [f"node{i}" for i in range(1, n + 1)]
    sim = SimulatedFabric(40.0, np.random.default_rng(seed), 0.05, **fabric)
    results = run_schedule(pairing_schedule(hosts, seed=seed), sim).results
    rows: list[list[Any]] = []
    for r in results:
        rows.append([r.pair.a, r.pair.b, r.busbw_gbps] + ([r.reason] if r.reason else []))
    path.write_text(json.dumps({"hosts": hosts, "pairs": rows}))
    return path


def test_healthy_fleet_exits_0(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "fabric", "attribute", str(write_stage(tmp_path / "p.json", 64)))
    assert (code, err) == (exitcodes.OK, "")
    assert "no guilty host, no suspect link" in out


def test_guilty_host_and_dead_host_named_with_evidence(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_stage(tmp_path / "p.json", 64, host_factor={"node7": 0.1}, dead=frozenset({"node40"}))
    code, out, _ = run(capsys, "fabric", "attribute", str(path))
    assert code == exitcodes.REJECTED
    assert "guilty hosts" in out and "node7" in out and "node40" in out
    assert "slow with every partner" in out and "failed with every partner" in out
    assert "host unreachable" in out

    code, out, _ = run(capsys, "fabric", "attribute", str(path), "--json")
    doc = json.loads(out)
    assert code == exitcodes.REJECTED and doc["verdict"] == "found"
    assert [g["host"] for g in doc["guilty"]] == ["node7", "node40"]
    assert len(doc["guilty"][0]["evidence"]) == 3
    figures = {f["host"]: f for f in doc["figures"]}
    assert figures["node7"]["best_gbps"] < 8 and figures["node40"]["completed"] == 0
    assert doc["host_metric"] == "fabric_pair_busbw_gbps" and doc["suspect_links"] == []


def test_bad_link_is_a_suspect_not_a_guilty_host(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    link = pairing_schedule([f"node{i}" for i in range(1, 17)], seed=0).rounds[2].pairs[0]
    path = write_stage(tmp_path / "p.json", 16, link_factor={link: 0.3})
    code, out, _ = run(capsys, "fabric", "attribute", str(path), "--json")
    doc = json.loads(out)
    assert code == exitcodes.REJECTED
    assert doc["guilty"] == [] and [s["hosts"] for s in doc["suspect_links"]] == [[link.a, link.b]]


def test_floor_option_judges_a_uniformly_slow_fleet(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_stage(tmp_path / "p.json", 8)
    assert run(capsys, "fabric", "attribute", str(path))[0] == exitcodes.OK
    code, out, _ = run(capsys, "fabric", "attribute", str(path), "--floor", "100", "--json")
    assert code == exitcodes.REJECTED and json.loads(out)["rule"]["floor_gbps"] == 100
    assert run(capsys, "fabric", "attribute", str(path), "--floor", "-1")[0] == exitcodes.USAGE


def test_markup_and_escapes_in_names_are_printed_as_data(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    evil = "[bold red]ACCEPTED[/]\x1b[2J"
    hosts = ["a", "b", "c", "d", evil]
    pairs = [
        ["a", "b", 40],
        ["c", "d", 40],
        ["a", "c", 40],
        ["b", "d", 40],
        [evil, "a", None, "\x1b]0;x\x07"],
        [evil, "b", None],
    ]
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"hosts": hosts, "pairs": pairs}))
    code, out, _ = run(capsys, "fabric", "attribute", str(path))
    assert code == exitcodes.REJECTED
    assert "\x1b" not in out and "\x07" not in out
    assert "[bold red]ACCEPTED[/]\\x1b[2J" in out


def test_schedule_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fabric", "schedule", "n3", "n1", "n2", "n10", "n4", "--json")
    doc = json.loads(out)
    assert code == exitcodes.OK and doc["hosts"] == ["n1", "n2", "n3", "n4", "n10"]
    assert len(doc["rounds"]) == 3 and sorted(r["idle"][0] for r in doc["rounds"]) == sorted(
        {r["idle"][0] for r in doc["rounds"]}
    )
    pairs = [Pair.of(*p) for r in doc["rounds"] for p in r["pairs"]]
    assert len(pairs) == len(set(pairs)) == 6
    code, out, _ = run(capsys, "fabric", "schedule", "a", "b", "--rounds", "3")
    assert code == exitcodes.OK and "round 0: a-b" in out and "only 1 round" in out
    assert run(capsys, "fabric", "schedule", "a", "a")[0] == exitcodes.USAGE
    assert run(capsys, "fabric", "schedule", "a")[0] == exitcodes.USAGE

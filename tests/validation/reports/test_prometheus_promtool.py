"""`fleetforge gate --prom` passes Prometheus's own linter, `promtool check metrics` (stdin only;
exit 0 clean, 3 on lint problems such as a missing HELP or a counter without `_total`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from fleetforge.cli import main
from tests.deploy.tools import require, run
from tests.validation.gate.helpers import as_files, fleet, spec_mapping, write
from validation.gate import decide
from validation.reports.prometheus import render_prometheus


def gate_prom(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str, **per_node: Mapping[str, object]
) -> str:
    folder = write(tmp_path / "r", fleet(6, **per_node))
    main(["gate", str(folder), "--prom", str(tmp_path / "gate.prom"), *extra])
    capsys.readouterr()
    return (tmp_path / "gate.prom").read_text(encoding="utf-8")


def check_metrics(text: str) -> tuple[int, str]:
    done = run([require("promtool"), "check", "metrics"], stdin=text)
    return done.returncode, done.stdout + done.stderr


def test_gate_prom_with_a_spec_and_a_rejected_node_is_lint_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(yaml.safe_dump(spec_mapping(5)))
    text = gate_prom(tmp_path, capsys, "--spec", str(spec), node3={"scale": {"gemm_bf16_tflops": 0.8}})
    assert "fleetforge_fleet_ready{" in text and "fleetforge_node_reject_reasons{" in text
    assert check_metrics(text) == (0, "")


def test_gate_prom_without_a_spec_is_lint_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = gate_prom(tmp_path, capsys)
    assert "fleetforge_fleet_ready" not in text and "fleetforge_node_accepted{" in text
    assert check_metrics(text) == (0, "")


@pytest.mark.parametrize("node", ['we"ird\\node', "line\nbreak", "ünïcode-節点", "sp ace{x=1}"])
def test_hostile_node_names_stay_lint_clean(node: str) -> None:
    recs = fleet(2)
    recs = {node: [r.model_copy(update={"node": node}) for r in recs["node1"]], "node2": recs["node2"]}
    assert check_metrics(render_prometheus(decide(as_files(recs)), generated_at=1.0)) == (0, "")


def test_promtool_does_flag_what_it_lints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The check above is live: the same text without a HELP line, or with a counter named
    without `_total`, exits 3 and names the metric."""
    text = gate_prom(tmp_path, capsys)
    no_help = "\n".join(
        line for line in text.splitlines() if not line.startswith("# HELP fleetforge_node_accepted")
    )
    code, said = check_metrics(no_help + "\n")
    assert code == 3 and "fleetforge_node_accepted no help text" in said
    counter = text.replace("# TYPE fleetforge_node_accepted gauge", "# TYPE fleetforge_node_accepted counter")
    code, said = check_metrics(counter)
    assert code == 3 and "fleetforge_node_accepted" in said and "_total" in said

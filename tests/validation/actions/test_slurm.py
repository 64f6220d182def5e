"""slurm-drain: a fake `scontrol` on PATH records the argv it is really given; reasons are cleaned."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.conftest import BIN
from tests.validation.actions.fakes import node
from validation.actions import ActionConfigError, NodeIdentifierError, SlurmDrain, run_actions, slurm_reason

FAKE_SCONTROL = """#!{python}
# Records its argv; fails like scontrol does for a node slurmctld does not know.
import json, os, sys
with open(os.environ["FAKE_SCONTROL_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if "NodeName=gpu-unknown" in sys.argv:
    print("Invalid node name specified", file=sys.stderr)
    sys.exit(1)
"""


@pytest.fixture
def scontrol_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "scontrol"
    fake.write_text(FAKE_SCONTROL.format(python=sys.executable))
    fake.chmod(0o755)
    log = tmp_path / "argv.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}:{BIN}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_SCONTROL_LOG", str(log))
    return log


def recorded(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_drain_passes_one_argv_element_per_field(scontrol_log: Path) -> None:
    nodes = [
        node(
            "gpu-01",
            "gemm_bf16_tflops 512.0 < 700.0 (0.9 x reference)",
            "driver 550.54 != 550.90",
            slurm_node_name="gpu-01",
        ),
        node("gpu-02", "unreachable", slurm_node_name="a3-node-002"),
    ]
    report = run_actions([SlurmDrain()], nodes, dry_run=False)
    assert report.ok, report.render()
    assert recorded(scontrol_log) == [
        [
            "update",
            "NodeName=gpu-01",
            "State=DRAIN",
            "Reason=fleetforge: gemm_bf16_tflops 512.0 < 700.0 (0.9 x reference); driver 550.54 != 550.90",
        ],
        ["update", "NodeName=a3-node-002", "State=DRAIN", "Reason=fleetforge: unreachable"],
    ]


def test_dry_run_prints_a_pasteable_command_and_runs_nothing(scontrol_log: Path) -> None:
    report = run_actions(
        [SlurmDrain()], [node("gpu-01", "slow; rm -rf / `x` $(y)", slurm_node_name="gpu-01")], dry_run=True
    )
    line = report.steps[0].calls[0].describe()
    assert line == "scontrol update NodeName=gpu-01 State=DRAIN 'Reason=fleetforge: slow; rm -rf / _x_ _(y)'"
    assert shlex.split(line)[-1] == report.steps[0].calls[0].params["argv"][-1]
    assert not scontrol_log.exists()


def test_failure_on_one_node_is_reported_and_the_rest_drained(scontrol_log: Path) -> None:
    nodes = [node(n, slurm_node_name=n) for n in ("gpu-01", "gpu-unknown", "gpu-03")]
    report = run_actions([SlurmDrain()], nodes, dry_run=False)
    assert [(r.step.node, r.ok) for r in report.results] == [
        ("gpu-01", True),
        ("gpu-unknown", False),
        ("gpu-03", True),
    ]
    assert report.results[1].detail == "StepFailed: scontrol exited 1: Invalid node name specified"
    assert len(recorded(scontrol_log)) == 3


def test_scontrol_missing_is_a_failed_step_not_a_crash(tmp_path: Path) -> None:
    report = run_actions(
        [SlurmDrain(scontrol=str(tmp_path / "nope"))],
        [node("gpu-01", slurm_node_name="gpu-01")],
        dry_run=False,
    )
    assert not report.ok and "FileNotFoundError" in report.results[0].detail


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        (["gemm 1.0 < 2.0"], "fleetforge: gemm 1.0 < 2.0"),
        (['say "hi"', "it's"], "fleetforge: say _hi_; it_s"),
        (["multi\nline\r\n\treason"], "fleetforge: multi line reason"),
        (["back\\slash $HOME `cmd`"], "fleetforge: back_slash _HOME _cmd_"),
        (["bw 0.8\u00d7 ref", "ok\x00nul"], "fleetforge: bw 0.8_ ref; ok_nul"),
        (["  ", "kept"], "fleetforge: kept"),
    ],
)
def test_reason_is_cleaned(reasons: list[str], expected: str) -> None:
    assert slurm_reason(reasons) == expected


def test_reason_is_cut_to_length() -> None:
    text = slurm_reason(["x" * 500], max_len=40)
    assert len(text) == 40 and text.endswith("...") and text.startswith("fleetforge: ")
    with pytest.raises(ActionConfigError):
        SlurmDrain(reason_max=10)


def test_node_names_are_single_names(scontrol_log: Path) -> None:
    with pytest.raises(NodeIdentifierError) as err:
        SlurmDrain().plan(
            [
                node("a", slurm_node_name="gpu-[01-04]"),
                node("b", slurm_node_name="gpu-01 State=IDLE"),
                node("c"),
            ]
        )
    assert [(n, v, p.split(": ", 1)[1]) for n, v, p in err.value.problems] == [
        ("a", "slurm_node_name", "'gpu-[01-04]' is not one Slurm node name (no hostlist)"),
        ("b", "slurm_node_name", "'gpu-01 State=IDLE' is not one Slurm node name (no hostlist)"),
        ("c", "slurm_node_name", "missing"),
    ]
    assert not scontrol_log.exists()

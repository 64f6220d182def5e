"""slurm-drain: a stand-in `scontrol` on PATH answers like the real one (`-o show node`: one line
per node) and records the argv it is really given; reasons are cleaned."""

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
# Records its argv and answers like scontrol: `-o show node NAME` prints one line per node of NAME
# ("Node NAME not found" on stdout and exit 1 when none), where slurmctld expands a NodeSet name and
# ALL into their nodes, as it does for `update NodeName=`.
import json, os, sys
with open(os.environ["FAKE_SCONTROL_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
NODES = ["gpu-01", "gpu-02", "gpu-03", "a3-node-002", "gpu-denied"]
NODESETS = {{"gpu-set": ["gpu-01", "gpu-02"], "gpu-one": ["gpu-03"]}}
def expand(name):
    if name.upper() == "ALL":
        return NODES
    return NODESETS.get(name) or [n for n in NODES if n == name]
args = sys.argv[1:]
if args[:3] == ["-o", "show", "node"]:
    found = expand(args[3])
    if not found:
        print(f"Node {{args[3]}} not found")
        sys.exit(1)
    for n in found:
        print(
            f"NodeName={{n}} Arch=x86_64 CoresPerSocket=48 CPUAlloc=0 CPUEfctv=192 CPUTot=192 "
            f"CPULoad=0.12 AvailableFeatures=h100 ActiveFeatures=h100 Gres=gpu:h100:8 NodeAddr={{n}} "
            f"NodeHostName={{n}} Version=23.11.4 OS=Linux 5.15.0-105-generic #115-Ubuntu SMP "
            f"RealMemory=2000000 AllocMem=0 FreeMem=1900000 Sockets=2 Boards=1 State=IDLE "
            f"ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu "
            f"CfgTRES=cpu=192,mem=2000000M,billing=192,gres/gpu=8 AllocTRES= CapWatts=n/a"
        )
elif args[:1] == ["update"]:
    name = args[1].removeprefix("NodeName=")
    if not expand(name):
        print("slurm_update error: Invalid node name specified", file=sys.stderr)
        sys.exit(1)
    if name == "gpu-denied":
        print("slurm_update error: Access/permission denied", file=sys.stderr)
        sys.exit(1)
else:
    print(f"invalid entity: {{args}}", file=sys.stderr)
    sys.exit(1)
"""


def show(name: str) -> list[str]:
    return ["-o", "show", "node", name]


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
        show("gpu-01"),
        [
            "update",
            "NodeName=gpu-01",
            "State=DRAIN",
            "Reason=fleetforge: gemm_bf16_tflops 512.0 < 700.0 (0.9 x reference); driver 550.54 != 550.90",
        ],
        show("a3-node-002"),
        ["update", "NodeName=a3-node-002", "State=DRAIN", "Reason=fleetforge: unreachable"],
    ]
    assert [o.result for o in report.results[1].done] == ["one node: a3-node-002", "exit 0"]


def test_dry_run_prints_a_pasteable_command_and_runs_nothing(scontrol_log: Path) -> None:
    report = run_actions(
        [SlurmDrain()], [node("gpu-01", "slow; rm -rf / `x` $(y)", slurm_node_name="gpu-01")], dry_run=True
    )
    check, drain = (call.describe() for call in report.steps[0].calls)
    assert check == "scontrol -o show node gpu-01"
    assert drain == "scontrol update NodeName=gpu-01 State=DRAIN 'Reason=fleetforge: slow; rm -rf / _x_ _(y)'"
    assert shlex.split(drain)[-1] == report.steps[0].calls[1].params["argv"][-1]
    assert not scontrol_log.exists()


def test_failure_on_one_node_is_reported_and_the_rest_drained(scontrol_log: Path) -> None:
    nodes = [node(n, slurm_node_name=n) for n in ("gpu-01", "gpu-unknown", "gpu-denied", "gpu-03")]
    report = run_actions([SlurmDrain()], nodes, dry_run=False)
    assert [(r.step.node, r.ok) for r in report.results] == [
        ("gpu-01", True),
        ("gpu-unknown", False),
        ("gpu-denied", False),
        ("gpu-03", True),
    ]
    assert report.results[1].detail == "StepFailed: scontrol show node exited 1: Node gpu-unknown not found"
    assert report.results[2].detail == (
        "StepFailed: scontrol update exited 1: slurm_update error: Access/permission denied "
        "(after 1 of 2 calls succeeded)"
    )
    assert len(recorded(scontrol_log)) == 7  # gpu-unknown: its show only


def test_a_name_that_is_not_exactly_one_node_is_not_drained(scontrol_log: Path) -> None:
    # NodeSet names pass the name check, and slurmctld expands them in `update NodeName=`.
    nodes = [node(n, slurm_node_name=n) for n in ("gpu-set", "gpu-one", "gpu-02")]
    report = run_actions([SlurmDrain()], nodes, dry_run=False)
    assert [(r.step.node, r.ok, r.done) for r in report.results[:2]] == [
        ("gpu-set", False, ()),
        ("gpu-one", False, ()),
    ]
    assert report.results[0].detail == (
        "StepFailed: refused, nothing drained: scontrol show node gpu-set printed 2 line(s): "
        "NodeName=gpu-01, NodeName=gpu-02, not the one line NodeName=gpu-set"
    )
    assert "printed 1 line(s): NodeName=gpu-03, not the one line NodeName=gpu-one" in report.results[1].detail
    assert report.results[2].ok
    assert [argv[0] for argv in recorded(scontrol_log)] == ["-o", "-o", "-o", "update"]


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


@pytest.mark.parametrize("everything", ["ALL", "all", "All"])
def test_all_is_refused_before_anything_runs(scontrol_log: Path, everything: str) -> None:
    # slurmctld reads NodeName=ALL, in any case, as every node: one bad host var drains the cluster.
    with pytest.raises(NodeIdentifierError) as err:
        run_actions([SlurmDrain()], [node("gpu-01", slurm_node_name=everything)], dry_run=False)
    assert err.value.problems == [
        (
            "gpu-01",
            "slurm_node_name",
            f"slurm-drain: {everything!r} is Slurm's name for every node: scontrol would drain the "
            "whole cluster",
        )
    ]
    assert not scontrol_log.exists()

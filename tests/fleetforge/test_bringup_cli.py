"""`fleetforge bringup` as a user runs it, with the fake fleet (tests/validation/bringup/fakes.py)
behind the command's runner, inventory and replacer seams: the outcome, its exit code, the record,
resuming, and bad options refused with a message naming the option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fleetforge import exitcodes
from fleetforge.cli import main
from fleetforge.commands import bringup as command
from tests.validation.bringup.fakes import FakeFleet, Inventory
from tests.validation.gate.helpers import onprem_spec_mapping, spec_mapping


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


@pytest.fixture
def bed(tmp_path: Path) -> dict[str, Path]:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(yaml.safe_dump(spec_mapping(nodes=3)))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node1": None}}}))
    return {"spec": spec, "inventory": inventory, "out": tmp_path / "out"}


def fake(monkeypatch: pytest.MonkeyPatch, bed: dict[str, Path], fleet: FakeFleet) -> FakeFleet:
    fleet.path = bed["inventory"]
    monkeypatch.setattr(command, "_runner", lambda opts, say: fleet)
    monkeypatch.setattr(command, "_inventory_reader", lambda path: Inventory(fleet))
    monkeypatch.setattr(command, "_replacer", lambda name, timeout_s: fleet)
    return fleet


def args(bed: dict[str, Path], *more: str) -> list[str | Path]:
    return ["bringup", "--spec", bed["spec"], "-i", bed["inventory"], "--out", bed["out"], *more]


def test_a_reject_replaced_and_ready_in_round_two_exits_0(
    bed: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = fake(monkeypatch, bed, FakeFleet(["node1", "node2", "node3"], slow={"node2"}, spares=["node4"]))
    code, out, err = run(capsys, *args(bed))
    assert code == exitcodes.OK, out + err
    assert "bringup: READY after 2 round(s)" in out
    assert "round 1: burned in 3, kept 0, 2 accepted, 1 rejected; replaced node2" in out
    assert "round 2: burned in 1, kept 2, 3 accepted, 0 rejected" in out
    assert "round 1: replacing node2 (fake-replace)" in err
    assert fleet.runs == [(), ("node4",)]
    assert json.loads((bed["out"] / "bringup.json").read_text())["status"] == "ready"
    junit = (bed["out"] / "gate.xml").read_text()  # the last gate's, for CI
    assert 'failures="0"' in junit and "node4" in junit and "node2" not in junit


def test_a_replacement_also_slow_is_a_pattern_and_the_budget_exit_code(
    bed: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = fake(
        monkeypatch,
        bed,
        FakeFleet(["node1", "node2", "node3"], slow={"node2", "node4", "node5"}, spares=["node4", "node5"]),
    )
    code, out, _ = run(capsys, *args(bed, "--json", "--max-rounds", "4"))
    assert code == exitcodes.BUDGET_SPENT == 3
    doc = json.loads(out)
    assert doc["status"] == "budget-spent" and len(doc["rounds"]) == 3
    assert doc["rounds"][2]["patterns"][0]["slot"] == "node2"
    assert doc["gate"]["fleet"]["ready"] is False
    assert fleet.replaced == [["node2"], ["node4"]]
    code, out, _ = run(capsys, *args(bed, "--resume", "--max-rounds", "4"))
    # Resumed with nothing new: the pattern stands, no third replacement.
    assert code == exitcodes.BUDGET_SPENT and "PATTERN" in out and "BUDGET SPENT" in out
    assert fleet.replaced == [["node2"], ["node4"]]


def test_a_recreation_not_done_in_time_leaves_the_name_out_and_waits(
    bed: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As gcp-recreate: node2 keeps its name, and its old VM is still listed when the wait ends.
    fleet = fake(monkeypatch, bed, FakeFleet(["node1", "node2", "node3"], slow={"node2"}, recreate_s=10_000))
    code, out, _ = run(capsys, *args(bed, "--replace-timeout", "1", "--poll", "1"))
    assert code == exitcodes.ACTION_FAILED == 75, out
    assert (
        "round 2: burned in 0, kept 2, 2 accepted, 0 rejected; left out node2 (still the replaced instance)"
        in out
    )
    assert "WAITING" in out and fleet.replaced == [["node2"]]


def test_a_node_without_its_instance_id_exits_65_and_replaces_nothing(
    bed: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(["node1", "node2", "node3"], slow={"node2"}, recreate_s=30, no_identity={"node2"})
    fake(monkeypatch, bed, fleet)
    code, out, err = run(capsys, *args(bed))
    assert code == exitcodes.DATA == 65 and out == ""
    assert "host var gce_instance_id missing or malformed on node2" in err and fleet.replaced == []


def test_an_interrupted_bringup_resumes_from_its_record(
    bed: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = fake(
        monkeypatch,
        bed,
        FakeFleet(["node1", "node2", "node3"], slow={"node2"}, spares=["node4"], interrupt_run=2),
    )
    code, _, _ = run(capsys, *args(bed))
    assert code == exitcodes.INTERRUPTED
    code, _, err = run(capsys, *args(bed))
    assert code == exitcodes.USAGE and "--resume" in err
    fleet.interrupt_run = None
    code, out, _ = run(capsys, *args(bed, "--resume"))
    assert code == exitcodes.OK and "READY after 2 round(s)" in out
    assert fleet.runs == [(), ("node4",), ("node4",)]  # round 2 redone, round 1 not


def test_stack_outputs_become_the_inventory_the_loop_reads(
    bed: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.stacks.test_ansible_inventory import aws_outputs

    outputs = bed["out"].parent / "outputs.json"
    outputs.write_text(json.dumps(aws_outputs()))
    read: list[Path] = []
    fleet = fake(monkeypatch, bed, FakeFleet(["node1", "node2", "node3"]))
    written = bed["out"] / "inventory" / "train-a.aws_ec2.yml"
    fleet.path = written

    def reader(path: Path) -> Inventory:
        read.append(path)
        return Inventory(fleet)

    monkeypatch.setattr(command, "_inventory_reader", reader)
    code, _, err = run(
        capsys, "bringup", "--spec", bed["spec"], "--stack-outputs", outputs, "--out", bed["out"]
    )
    assert code == exitcodes.OK, err
    assert read == [written]
    plugin = yaml.safe_load(written.read_text().replace("!unsafe ", ""))
    assert plugin["plugin"] == "amazon.aws.aws_ec2"
    outputs.write_text(
        json.dumps({"fleet": {"sku": "p5.48xlarge"}, "group": {"kind": "aws-autoscaling-group"}})
    )
    code, _, err = run(
        capsys, "bringup", "--spec", bed["spec"], "--stack-outputs", outputs, "--out", bed["out"] / "2"
    )
    assert code == exitcodes.DATA and "group.node_filter" in err


@pytest.mark.parametrize(
    ("extra", "code", "words"),
    [
        (["--max-rounds", "0"], exitcodes.USAGE, "--max-rounds"),
        (["--max-replacements", "-1"], exitcodes.USAGE, "--max-replacements"),
        (["--replace", "inventory"], exitcodes.USAGE, "--replace 'inventory'; allowed: aws-unhealthy"),
        (["--level", "turbo"], exitcodes.USAGE, "--level"),
        (["--stack-outputs", "x.json"], exitcodes.USAGE, "exactly one"),
        (["--resume"], exitcodes.NO_INPUT, "no record to resume from"),
        (["-q", "-v"], exitcodes.USAGE, "-q/--quiet"),
        (["--no-fabric", "--fabric-rounds", "2"], exitcodes.USAGE, "--fabric-rounds: set the fabric stage"),
        (["--no-fabric", "--fabric-timeout", "60"], exitcodes.USAGE, "--fabric-timeout: set the fabric"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    bed: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    code: int,
    words: str,
) -> None:
    fleet = fake(monkeypatch, bed, FakeFleet(["node1", "node2", "node3"]))
    got, _, err = run(capsys, *args(bed, *extra))
    assert got == code, err
    assert words in err
    assert fleet.runs == []


def test_missing_inputs_and_an_onprem_spec_without_a_replace_action(
    bed: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "bringup", "--spec", bed["spec"], "--out", bed["out"])
    assert code == exitcodes.USAGE and "--inventory FILE or --stack-outputs FILE" in err
    code, _, err = run(capsys, "bringup", "--spec", bed["spec"], "-i", tmp_path / "nope.yml")
    assert code == exitcodes.NO_INPUT and "--inventory" in err and "nope.yml" in err
    code, _, err = run(capsys, "bringup", "--spec", tmp_path / "nope.yaml", "-i", bed["inventory"])
    assert code == exitcodes.NO_INPUT
    code, _, err = run(capsys, "bringup", "--spec", bed["spec"], "--stack-outputs", tmp_path / "none.json")
    assert code == exitcodes.NO_INPUT and "none.json" in err
    code, _, err = run(capsys, "bringup", "-i", bed["inventory"])
    assert code == exitcodes.USAGE and "--spec" in err
    onprem = tmp_path / "onprem.yaml"
    onprem.write_text(yaml.safe_dump(onprem_spec_mapping(["n1", "n2"], nodes=2)))
    code, _, err = run(capsys, "bringup", "--spec", onprem, "-i", bed["inventory"])
    assert code == exitcodes.USAGE and "--replace" in err and "onprem" in err


def test_the_replace_timeout_is_how_long_the_cloud_action_waits_too() -> None:
    # Replacing an Azure GPU VM can take longer than the actions' default 600 s: the wait for the
    # cloud's operation follows --replace-timeout, not a fixed limit that fails a step still running.
    replacer = command._replacer("gcp-recreate", 1800.0)
    assert replacer.action.timeout_s == 1800.0  # type: ignore[attr-defined]


def test_reports_inside_out_are_written_though_out_does_not_exist_yet(
    bed: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As the CI templates run it on a fresh runner: `--out bringup/ --html bringup/report.html`.
    fleet = fake(monkeypatch, bed, FakeFleet(["node1", "node2", "node3"]))
    out = bed["out"]
    # A report folder elsewhere must still exist, and a refusal creates nothing.
    elsewhere = out.parent / "reports" / "gate.prom"
    code, _, err = run(capsys, *args(bed, "--prom", elsewhere))
    assert code == exitcodes.USAGE and "--prom: folder" in err and "does not exist" in err
    (out.parent / "afile").write_text("")
    code, _, err = run(capsys, *args(bed, "--prom", out.parent / "afile" / "gate.prom"))
    assert code == exitcodes.USAGE and "--prom" in err
    assert fleet.runs == [] and not out.exists() and not elsewhere.parent.exists()
    code, _, err = run(
        capsys, *args(bed, "--prom", f"{out}/gate.prom", "--junit", out / "reports" / "last.xml")
    )
    assert code == exitcodes.OK, err
    assert fleet.runs == [()]
    assert "gemm" in (out / "gate.prom").read_text()
    assert 'failures="0"' in (out / "reports" / "last.xml").read_text()


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--prom", "{out}/gate.xml"], ["--prom", "--junit", "gate.xml"]),  # the default JUnit
        (["--junit", "{out}/j.xml", "--prom", "{out}/./j.xml"], ["--prom", "--junit", "j.xml"]),
        (["--html", "{out}/r.html", "--inventory-out", "{out}/r.html"], ["--inventory-out", "--html"]),
        (["--inventory-out", "{out}/bringup.json"], ["--inventory-out", "bring-up record"]),
        (["--prom", "{out}"], ["--prom", "--out"]),
    ],
)
def test_two_files_on_one_path_are_refused_naming_both(
    bed: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    words: list[str],
) -> None:
    fleet = fake(monkeypatch, bed, FakeFleet(["node1", "node2", "node3"]))
    code, _, err = run(capsys, *args(bed, *(e.format(out=bed["out"]) for e in extra)))
    assert code == exitcodes.USAGE, err
    for word in words:
        assert word in err
    assert fleet.runs == [] and not bed["out"].exists()


def test_the_default_junit_path_is_free_when_junit_goes_elsewhere(
    bed: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake(monkeypatch, bed, FakeFleet(["node1", "node2", "node3"]))
    out = bed["out"]
    code, _, err = run(capsys, *args(bed, "--junit", out / "last.xml", "--prom", out / "gate.xml"))
    assert code == exitcodes.OK, err
    assert "# HELP" in (out / "gate.xml").read_text() and "<testsuite" in (out / "last.xml").read_text()

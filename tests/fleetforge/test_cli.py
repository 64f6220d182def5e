"""The command line: documented exit codes, JSON shapes, and no tracebacks on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest
import yaml

from fleetforge import exitcodes
from fleetforge.cli import main
from tests.conftest import EXAMPLES
from tests.fleet.test_spec import BAD
from tests.hosts.harness import measuring_turn


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_catalog_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog", "--json")
    assert code == 0
    rows = json.loads(out)
    assert isinstance(rows, list) and len(rows) >= 18
    for row in rows:
        for key in (
            "sku",
            "cloud",
            "accelerator",
            "accelerators_per_node",
            "accelerator_memory_gib",
            "source",
        ):
            assert key in row, (row["sku"], key)
        assert {"kind", "nics", "gbps_per_nic"} <= set(row["fabric"])
    p5 = next(r for r in rows if r["sku"] == "p5.48xlarge")
    assert p5["fabric"]["kind"] == "efa" and p5["fabric"]["nics"] == 32


def test_catalog_table_and_cloud_filter(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog", "--cloud", "azure")
    assert code == 0 and "Standard_ND96isr_H200_v5" in out and "p5.48xlarge" not in out
    code, _, err = run(capsys, "catalog", "--cloud", "oracle")
    assert code == exitcodes.USAGE and "allowed" in err


def test_spec_check_accepts_examples(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(p) for p in sorted(EXAMPLES.glob("*.yaml"))]
    code, out, _ = run(capsys, "spec", "check", *files)
    assert code == 0
    assert out.count(": ok") == len(files)
    # A v5e 8x8 slice is 16 VMs of 4 chips, not of the largest VM's 8.
    assert "16 + 0 spare x tpu-v5e (4 x TPU-v5e, ici)" in out


@pytest.mark.parametrize(("doc", "field", "allowed"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_spec_check_rejects_bad_specs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: dict[str, object], field: str, allowed: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "spec", "check", str(path))
    assert code == exitcodes.DATA
    assert str(path) in err and f"{field}:" in err and allowed in err
    assert "Traceback" not in err


def test_missing_file_and_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "spec", "check", str(tmp_path / "nope.yaml"))
    assert code == exitcodes.NO_INPUT and "no such file" in err
    assert run(capsys, "spec", "check")[0] == exitcodes.USAGE
    assert run(capsys, "no-such-command")[0] == exitcodes.USAGE
    assert run(capsys, "catalog", "--jsn")[0] == exitcodes.USAGE


def test_spec_check_names_every_problem_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load((EXAMPLES / "aws-p5-fleet.yaml").read_text())
    doc["spares"] = "two"  # type errors ...
    doc["validation"] = {"level": "fast"}
    doc["capacity"] = {"type": "reservation"}  # ... and cross-field rules
    doc["storage"]["checkpoints"] = {"retention_days": 3, "noncurrent_retention_days": 9}
    path = tmp_path / "four.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "spec", "check", str(path))
    assert code == exitcodes.DATA
    assert f"{path}: 4 problem(s)" in err
    for field in ("spares", "validation.level", "capacity.reservation_id", "noncurrent_retention_days"):
        assert field in err


@pytest.mark.parametrize(
    ("checks", "message"),
    [
        ({"stres": {"seconds": 1}}, "validation.checks.stres: unknown check; known: inventory, health"),
        ({"memory": {"byte": 2**26}}, "validation.checks.memory.byte: unknown parameter of memory"),
        ({"memory": {"bytes": 4096}}, "validation.checks.memory.bytes: memory's bytes is at least 1048576"),
    ],
)
def test_spec_check_refuses_the_check_parameters_a_burn_in_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], checks: dict[str, object], message: str
) -> None:
    doc = yaml.safe_load((EXAMPLES / "onprem-hgx-h100.yaml").read_text())
    doc["validation"] = {"checks": checks}
    path = tmp_path / "checks.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "spec", "check", str(path))
    assert code == exitcodes.DATA and message in " ".join(err.split()), err
    # The same file, handed to the burn-in, is refused for the same reason.
    code, _, err = run(capsys, "burnin", "--sku", "cpu", "--spec", str(path), "--out", str(tmp_path / "o"))
    assert code == exitcodes.DATA and message in " ".join(err.split()), err
    assert not (tmp_path / "o").exists()


def test_spec_check_json_lists_each_file_with_its_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    doc = yaml.safe_load((EXAMPLES / "gcp-a3-mega-fleet.yaml").read_text())
    doc["nodes"] = 0
    doc["colour"] = "{{ blue }}"
    bad.write_text(yaml.safe_dump(doc))
    good = EXAMPLES / "gcp-tpu-v5e-slice.yaml"
    code, out, err = run(capsys, "spec", "check", "--json", str(good), str(bad), str(tmp_path / "gone.yaml"))
    assert code == exitcodes.NO_INPUT, err  # the worst of the three: a file that is not there
    assert err == ""
    report = json.loads(out)
    assert [(e["file"], e["valid"]) for e in report] == [
        (str(good), True),
        (str(bad), False),
        (str(tmp_path / "gone.yaml"), False),
    ]
    assert report[0]["problems"] == []
    fields = {p["field"]: p["message"] for p in report[1]["problems"]}
    assert set(fields) == {"nodes", "colour"} and "unknown key" in fields["colour"]
    assert report[2]["problems"] == [{"field": "", "message": "no such file"}]
    code, out, _ = run(capsys, "spec", "check", "--json", str(good))
    assert code == exitcodes.OK and json.loads(out)[0]["valid"] is True


def test_schema_is_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "spec", "schema")
    schema = json.loads(out)
    assert code == 0 and schema["title"] == "FleetSpec"
    assert {"name", "cloud", "sku", "nodes", "tags"} <= set(schema["required"])
    assert schema["additionalProperties"] is False


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("fleetforge ")


@pytest.mark.measures_this_machine
def test_demo_runs_the_main_job_on_embedded_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "demo"
    # The demo judges this machine on the cpu SKU's floors: it measures in the turn the test hosts
    # take, so a fleet run's hosts beside it cannot make it a reject (tests/hosts/harness.py).
    with measuring_turn():
        code, out, _ = run(capsys, "demo", "--examples", str(EXAMPLES), "--out", str(out_dir))
    assert code == 0, out
    assert "aws-p5-fleet.yaml: valid" in out and "plan: " in out
    assert "local-cpu: READY" in out
    records = [json.loads(line) for line in (out_dir / "localhost.jsonl").read_text().splitlines()]
    measured = {r["check"]: r["metrics"] for r in records if r["kind"] == "check" and r["status"] == "pass"}
    assert measured["compute"]["gemm_fp32_tflops"] > 0  # a real measurement, not a canned one
    assert (out_dir / "gate.junit.xml").is_file() and (out_dir / "gate.prom").is_file()


def test_demo_refuses_a_spec_it_cannot_burn_in_here(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "demo", "--spec", str(EXAMPLES / "aws-p5-fleet.yaml"))
    assert code == exitcodes.USAGE and "exactly one host" in err


def test_installed_entry_point_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncloud: aws\nsku: p5.48xlarge\nnodes: 1\ntags: {owner: me}\nbogus: 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "fleetforge.cli", "spec", "check", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == exitcodes.DATA
    assert "bogus: unknown key" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_demo_says_which_examples_it_could_not_plan_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    from fleetforge.commands.demo import _check_examples

    _check_examples(EXAMPLES)
    out = capsys.readouterr().out
    onprem = next(line for line in out.splitlines() if "onprem-hgx-h100.yaml" in line)
    assert "not planned: cloud: on-prem fleets are configured with Ansible" in onprem
    aws = next(line for line in out.splitlines() if "aws-p5-fleet.yaml" in line)
    assert "plan: " in aws and "no policy violation" in aws


def test_a_bug_exits_70_with_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Exit 1 would read as "rejected" to a pipeline; a traceback is no message.
    import fleetforge.commands.catalog as catalog

    def broken() -> list[object]:
        raise KeyError("[bold]gpu[/bold]")

    monkeypatch.setattr(catalog, "all_skus", broken)
    assert main(["catalog"]) == exitcodes.SOFTWARE
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "internal error: KeyError:" in err and "[bold]gpu[/bold]" in err and "please report it" in err


def test_fleet_burnin_takes_a_report_inside_an_out_not_made_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fleet burnin --out results/ --junit results/gate.xml` on a fresh runner: the options pass
    and the run starts (stopped here, as if Ansible were missing); a report folder elsewhere that
    does not exist, or a report on the run's own summary, is still refused before the run."""
    from validation.fleetrun import run as fleetrun
    from validation.fleetrun.hosts import MissingAnsibleError

    started: list[Path] = []

    def no_ansible(opts: fleetrun.FleetRunOptions, say: object) -> NoReturn:
        started.append(opts.out_dir)
        raise MissingAnsibleError("ansible-runner is not installed (stopped by the test)")

    monkeypatch.setattr(fleetrun, "run_fleet", no_ansible)
    monkeypatch.chdir(tmp_path)
    Path("hosts.yml").write_text("all:\n  hosts:\n    node1: {}\n")
    base = ["fleet", "burnin", "-i", "hosts.yml", "--sku", "cpu", "--out", "results/"]
    code, _, err = run(capsys, *base, "--junit", "results/gate.xml", "--prom", "results/m/gate.prom")
    assert code == exitcodes.UNAVAILABLE and "stopped by the test" in err, err
    assert started == [Path("results")]
    for extra, words in (
        (["--junit", "reports/gate.xml"], "--junit: folder reports does not exist"),
        (["--prom", "results/fleet-run.json"], "the fleet run's summary"),
        (["--junit", "results/a.xml", "--html", "results/a.xml"], "--junit results/a.xml"),
    ):
        code, _, err = run(capsys, *base, *extra)
        assert code == exitcodes.USAGE and words in err, (extra, err)
    assert started == [Path("results")] and sorted(p.name for p in tmp_path.iterdir()) == ["hosts.yml"]

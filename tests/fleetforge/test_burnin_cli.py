"""`fleetforge burnin`: exit codes, the results file, bad options, specs and resume."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from fleet.results import read_results
from fleetforge import exitcodes
from fleetforge.cli import main
from fleetforge.defaults import default_spec_path
from tests.hosts.harness import measuring_turn


def burnin(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["burnin", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cpu_spec(tmp_path: Path, **validation: object) -> Path:
    data = yaml.safe_load(default_spec_path().read_text())
    data["validation"] = {**data.get("validation", {}), **validation}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_cpu_burnin_writes_results_and_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = burnin(
        capsys,
        "--sku",
        "auto",
        "--level",
        "quick",
        "--only",
        "inventory,health",
        "--only",
        "fabric",
        "--out",
        str(tmp_path),
        "--node",
        "n1",
    )
    assert code == exitcodes.OK, out + err
    assert (
        "[1/3] inventory: pass" in out
        and "fabric: skip" in out
        and "ok - 2 pass, 0 fail, 0 error, 1 skip (cpu, quick" in out
    )
    results = read_results(tmp_path / "n1.jsonl")
    assert [r.sku for r in results.runs] == ["cpu"]  # auto: no accelerator on this machine
    assert results.runs[0].partial  # --only narrowed the quick level: the gate must know
    assert [(c.check, c.status) for c in results.checks] == [
        ("inventory", "pass"),
        ("health", "pass"),
        ("fabric", "skip"),
    ]
    assert (tmp_path / "n1.raw" / "inventory.json").exists()


def test_a_check_below_its_spec_floor_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = cpu_spec(tmp_path, thresholds={"gemm_fp32_tflops": {"floor": 1000}})
    code, out, _ = burnin(
        capsys, "--spec", str(spec), "--only", "compute", "--out", str(tmp_path / "o"), "--node", "n1"
    )
    assert code == exitcodes.REJECTED
    assert "compute: fail" in out and "below floor 1000 (spec floor 1000)" in out and "rejected" in out
    assert read_results(tmp_path / "o" / "n1.jsonl").runs[0].level == "quick"  # the spec's level


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--level", "hourly"], exitcodes.USAGE, "--level 'hourly'; allowed: quick, standard, extended"),
        (["--sku", "p9.mega"], exitcodes.USAGE, "unknown SKU 'p9.mega'"),
        (
            ["--sku", "cpu", "--only", "compute,gpu_burn"],
            exitcodes.USAGE,
            "unknown check 'gpu_burn'; known: inventory",
        ),
        (["--sku", "cpu", "--node", "a/b"], exitcodes.USAGE, "--node 'a/b'"),
        (["--spec", "/nonexistent/fleet.yaml"], exitcodes.NO_INPUT, "no such file"),
        (["--sku", "cpu", "--storage-path", "/nonexistent"], exitcodes.USAGE, "not a directory"),
    ],
)
def test_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
    got, _, err = burnin(capsys, *argv, "--out", str(tmp_path))
    assert got == code
    assert message in err and "Traceback" not in err
    assert not list(tmp_path.glob("*.jsonl"))


def test_an_out_that_cannot_be_a_folder_is_cant_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, _, err = burnin(capsys, "--sku", "cpu", "--only", "health", "--out", str(blocker / "out"))
    assert code == exitcodes.CANT_CREATE and code != exitcodes.REJECTED
    assert f"--out {blocker / 'out'}: cannot create it" in err and "Traceback" not in err
    assert blocker.read_text() == "not a folder"


def test_spec_contradicting_the_sku_and_invalid_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = burnin(
        capsys, "--spec", str(cpu_spec(tmp_path)), "--sku", "p5.48xlarge", "--out", str(tmp_path)
    )
    assert code == exitcodes.USAGE and "contradicts the spec's sku cpu" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncloud: moon\n")
    assert burnin(capsys, "--spec", str(bad), "--out", str(tmp_path))[0] == exitcodes.DATA


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_gpu_sku_without_torch_is_unavailable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = burnin(capsys, "--sku", "hgx-h100-8", "--out", str(tmp_path))
    assert code == exitcodes.UNAVAILABLE and "torch, which is not installed" in err


def test_resume_of_another_level_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        burnin(
            capsys,
            "--sku",
            "cpu",
            "--level",
            "quick",
            "--only",
            "health",
            "--out",
            str(tmp_path),
            "--node",
            "n1",
        )[0]
        == 0
    )
    code, out, err = burnin(
        capsys, "--sku", "cpu", "--level", "extended", "--resume", "--out", str(tmp_path), "--node", "n1"
    )
    assert code == exitcodes.USAGE and "--resume needs the same" in err
    code, out, _ = burnin(
        capsys, "--sku", "cpu", "--level", "quick", "--resume", "--out", str(tmp_path), "--node", "n1"
    )
    assert code == exitcodes.OK and "0 checks to run; 1 kept" in out


def test_sigterm_stops_the_run_and_keeps_the_records(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    from fleet.results import read_results as read

    argv = [
        "burnin",
        "--sku",
        "cpu",
        "--level",
        "quick",
        "--only",
        "inventory,stress",
        "--out",
        str(tmp_path),
        "--node",
        "n1",
    ]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from fleetforge.cli import main; sys.exit(main(sys.argv[1:]))",
            *argv,
        ],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        path = tmp_path / "n1.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not path.exists() or path.read_text().count("\n") < 2):
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # what `timeout` or Ansible sends while stress runs
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == exitcodes.INTERRUPTED, err
    assert "interrupted" in err and "Traceback" not in err
    got = read(tmp_path / "n1.jsonl")
    assert [c.check for c in got.checks] == ["inventory"] and not got.bad_lines


# A second of load in windows of 0.2 s: starved beside the test hosts' streams, the load once took
# fewer windows than a ratio needs, and the check rightly said it measured nothing.
@pytest.mark.measures_this_machine
def test_the_specs_check_parameters_set_what_a_check_measures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = cpu_spec(
        tmp_path, checks={"storage": {"bytes": 4 * 2**20}, "stress": {"seconds": 1, "interval_s": 0.2}}
    )
    with measuring_turn():
        code, out, err = burnin(
            capsys,
            "--spec",
            str(spec),
            "--only",
            "storage,stress",
            "--out",
            str(tmp_path / "o"),
            "--node",
            "n1",
        )
    # Measured, whatever the verdict: storage shares this machine's disk with whatever else runs.
    assert code in (exitcodes.OK, exitcodes.REJECTED), out + err
    storage, stress = read_results(tmp_path / "o" / "n1.jsonl").checks
    assert storage.status in ("pass", "fail") and stress.status in ("pass", "fail"), (storage, stress)
    assert any("4 MiB sequential" in f for f in storage.findings), storage.findings
    # 1 s of load, not the quick level's 5 s.
    assert any(re.match(r"1\.\d s of load, \d+ samples every 0.2 s", f) for f in stress.findings), (
        stress.findings
    )


@pytest.mark.parametrize(
    ("checks", "message"),
    [
        ({"stres": {"seconds": 1}}, "validation.checks.stres: unknown check; known: inventory, health"),
        (
            {"stress": {"secs": 1}},
            "validation.checks.stress.secs: unknown parameter of stress; allowed: interval_s, seconds",
        ),
        (
            {"storage": {"bytes": 1.5}},
            "validation.checks.storage.bytes: storage's bytes is a whole number, got 1.5",
        ),
        (
            {"stress": {"seconds": True}},
            "validation.checks: stress.seconds: a number greater than 0, got True",
        ),
        ({"stress": {"seconds": 0}}, "validation.checks.stress.seconds: Input should be greater than 0"),
    ],
)
def test_bad_check_parameters_in_the_spec_are_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], checks: dict[str, object], message: str
) -> None:
    code, _, err = burnin(
        capsys, "--spec", str(cpu_spec(tmp_path, checks=checks)), "--out", str(tmp_path / "o")
    )
    assert code == exitcodes.DATA
    assert message in " ".join(err.split()) and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_a_stress_run_too_short_for_its_windows_is_an_error_that_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = cpu_spec(tmp_path, checks={"stress": {"seconds": 0.4, "interval_s": 0.2}})
    code, out, _ = burnin(
        capsys, "--spec", str(spec), "--only", "stress", "--out", str(tmp_path / "o"), "--node", "n1"
    )
    assert code == exitcodes.INCOMPLETE, out
    (stress,) = read_results(tmp_path / "o" / "n1.jsonl").checks
    assert stress.status == "error" and "needs at least 4 windows" in (stress.reason or ""), stress

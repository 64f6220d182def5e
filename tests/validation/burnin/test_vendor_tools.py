"""Readers for tools operators already run: DCGM diagnostics as the dcgm_diag check, and
nccl-tests' all_reduce_perf as the collectives path when the binary is on the node. Outputs are
the published samples in tests/validation/burnin/fixtures/real/."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.validation.burnin.fakes import FakeNvml, FakeTorch, h100
from tests.validation.burnin.helpers import ctx
from validation.burnin.backends import gpu as gpu_backend
from validation.burnin.backends.base import Unsupported
from validation.burnin.backends.gpu import GpuBackend
from validation.burnin.checks import REGISTRY
from validation.burnin.outcome import CheckOutcome
from validation.burnin.parsers.dcgm import parse_diag
from validation.burnin.probes import host
from validation.burnin.probes.host import HostProbe

REAL = Path(__file__).parent / "fixtures" / "real"
H100 = "hgx-h100-8"


def real(name: str) -> str:
    return (REAL / name).read_text()


def parse(check: str, raw: dict[str, Any], sku: str = H100, level: str = "standard") -> CheckOutcome:
    return REGISTRY.get(check).parse(raw, ctx(sku, level=level))


def dcgm_raw(sample: str, rc: int = 0) -> dict[str, Any]:
    return {"run_level": 2, "version": "3.3.5", "rc": rc, "output": real(sample), "stderr": ""}


# ------------------------------------------------------------------ dcgm_diag


def test_dcgm_diag_runs_at_standard_and_extended_on_nvidia_gpus_only() -> None:
    check = REGISTRY.get("dcgm_diag")
    assert check in REGISTRY.for_level("standard") and check in REGISTRY.for_level("extended")
    assert check not in REGISTRY.for_level("quick")
    assert (
        check.level_params["standard"]["run_level"] == 2 and check.level_params["extended"]["run_level"] == 3
    )
    assert check.applies_to(ctx(H100).sku) is None
    assert "no NVIDIA GPU" in (check.applies_to(ctx("cpu").sku) or "")


def test_dcgm_diag_all_passed_with_a_skipped_test_noted() -> None:
    out = parse("dcgm_diag", dcgm_raw("dcgm-diag-r3-denylist.json"), level="extended")
    assert out.status == "pass" and out.metrics == {"dcgm_diag_failed_tests": 0}
    assert "DCGM Hardware / EUD Test: skip on GPU 0" in out.findings
    assert "dcgmi diag -r 2: 15 of 16 tests passed" in out.findings
    assert out.versions == {"dcgm": "3.3.5"}


def test_dcgm_diag_a_failed_test_fails_the_node_and_a_warning_is_noted() -> None:
    # dcgmi exits non-zero when a test fails; its JSON verdicts are still read.
    out = parse("dcgm_diag", dcgm_raw("dcgm-diag-blacklist-fail.json", rc=226))
    assert out.status == "fail" and out.metrics == {"dcgm_diag_failed_tests": 1}
    assert "DCGM Deployment / Persistence Mode: fail" in out.findings
    assert "DCGM Deployment / Environment Variables: warn" in out.findings
    # A -r 1 run, the deployment checks alone: a warning among them is noted, and they are the run.
    warn = parse("dcgm_diag", {**dcgm_raw("dcgm-diag-blacklist-warn.json"), "run_level": 1})
    assert warn.status == "pass" and "DCGM Deployment / Persistence Mode: warn" in warn.findings


def test_dcgm_diag_whose_gpu_tests_did_not_run_is_an_error_never_a_pass() -> None:
    # The same deployment-only report from a run asked for -r 2: it stopped before the GPU tests.
    short = parse("dcgm_diag", dcgm_raw("dcgm-diag-blacklist-warn.json"))
    assert short.status == "error" and "passed no test of the GPUs" in (short.reason or ""), short
    # The real r3 report with one GPU test passed on GPU 0 alone and skipped on the others.
    doc = json.loads(real("dcgm-diag-r3-denylist.json"))
    tests = [
        t
        for c in doc["DCGM GPU Diagnostic"]["test_categories"]
        if c["category"] != "Deployment"
        for t in c["tests"]
    ]
    assert tests
    for test in tests:
        test["results"] = [{"gpu_ids": "0", "status": "Pass"}] + [
            {"gpu_ids": str(i), "status": "Skip", "info": "not run"} for i in range(1, 8)
        ]
    out = parse(
        "dcgm_diag", {**dcgm_raw("dcgm-diag-r3-denylist.json"), "run_level": 3, "output": json.dumps(doc)}
    )
    assert out.status == "error", out
    partial = parse_diag(json.dumps(doc))
    assert {(t.status, t.gpus) for t in partial.tests if t.category != "Deployment"} == {
        ("skip", "1,2,3,4,5,6,7")
    }


def test_dcgm_diag_output_it_cannot_read_is_an_error_never_a_pass() -> None:
    out = parse("dcgm_diag", dcgm_raw("dcgm-diag-unexpected-shape.json", rc=0))
    assert out.status == "error" and "no 'DCGM GPU Diagnostic' object" in (out.reason or "")
    crashed = parse(
        "dcgm_diag", {"run_level": 2, "rc": 255, "output": "", "stderr": "Error: unable to connect"}
    )
    assert crashed.status == "error" and "exited 255" in (crashed.reason or "")
    assert "unable to connect" in (crashed.reason or "")


def test_dcgm_diag_that_passed_no_test_or_stopped_early_is_an_error_never_a_pass() -> None:
    # The real r2 report with every verdict turned to Skip: DCGM measured nothing.
    sample = real("dcgm-diag-r2-denylist.json")
    skipped = re.sub(r'"status"\s*:\s*"Pass"', '"status" : "Skip"', sample)
    assert skipped != sample
    raw = {"run_level": 2, "version": "3.3.5", "rc": 0, "output": skipped, "stderr": ""}
    out = parse("dcgm_diag", raw)
    assert out.status == "error" and "passed no test" in (out.reason or "")
    # Non-zero with nothing failed or warned: an abort reports only the tests it reached.
    aborted = parse("dcgm_diag", {**dcgm_raw("dcgm-diag-r2-denylist.json", rc=226), "stderr": "diag aborted"})
    assert aborted.status == "error" and "exited 226 with no failed test" in (aborted.reason or "")
    assert "diag aborted" in (aborted.reason or "")


def test_dcgmi_not_installed_is_a_skip_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.shutil, "which", lambda name: None)
    with pytest.raises(Unsupported, match="dcgmi not installed"):
        HostProbe().dcgm_diag(2, 60.0)


def test_dcgmi_is_run_with_json_output_and_its_exit_status_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.shutil, "which", lambda name: f"/usr/bin/{name}")
    calls: list[list[str]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if argv[1] == "--version":
            return subprocess.CompletedProcess(argv, 0, "dcgmi  version: 3.3.5\n", "")
        return subprocess.CompletedProcess(argv, 226, real("dcgm-diag-blacklist-fail.json"), "")

    raw = HostProbe(run=run).dcgm_diag(3, 60.0)
    assert calls[-1] == ["/usr/bin/dcgmi", "diag", "-r", "3", "-j"]
    assert raw["rc"] == 226 and raw["version"] == "3.3.5"
    assert parse("dcgm_diag", raw).status == "fail"


def test_dcgmi_timing_out_is_recorded_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.shutil, "which", lambda name: f"/usr/bin/{name}")

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        if argv[1] == "--version":
            return subprocess.CompletedProcess(argv, 1, "", "")
        raise subprocess.TimeoutExpired(argv, kw["timeout"])

    raw = HostProbe(run=run).dcgm_diag(2, 5.0)
    out = parse("dcgm_diag", raw)
    assert out.status == "error" and "timed out after 5 s" in (out.reason or "")


# ------------------------------------------------------------------ nccl-tests


def nccl_raw(sample: str, rc: int = 0) -> dict[str, Any]:
    return {"impl": "nccl-tests", "world": 8, "bytes": 2**30, "iters": 20, "rc": rc, "output": real(sample)}


def test_all_reduce_perf_table_is_judged_at_its_largest_size() -> None:
    out = parse("collectives", nccl_raw("nccl-allreduce-8xa100.txt"))
    assert out.metrics == {"allreduce_busbw_gbps": 231.70}  # the lower of 231.72 / 231.70
    assert any("out-of-place 231.72 GB/s, in-place 231.7 GB/s" in f for f in out.findings)


def test_all_reduce_perf_without_validation_cannot_pass() -> None:
    out = parse("collectives", nccl_raw("nccl-allreduce-2node-k80-novalidation.txt"))
    assert out.status == "fail"
    assert (
        "nccl-tests did not count wrong results (#wrong N/A): data corruption not ruled out" in out.findings
    )


def test_all_reduce_perf_that_failed_before_measuring_is_an_error() -> None:
    out = parse(
        "collectives", {"impl": "nccl-tests", "world": 8, "rc": 1, "output": "", "stderr": "NCCL failure"}
    )
    assert out.status == "error" and "all_reduce_perf exited 1" in (out.reason or "")


def test_the_gpu_backend_uses_all_reduce_perf_when_it_is_on_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_backend.shutil, "which", lambda name: "/opt/nccl-tests/all_reduce_perf")
    seen: list[list[str]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, real("nccl-allreduce-8xa100.txt"), "")

    devices = [h100(i) for i in range(8)]
    b = GpuBackend(
        ctx(H100, sysfs_root=Path("/nonexistent-sysfs")), nvml=FakeNvml(devices), torch=FakeTorch(8), run=run
    )
    raw = b.allreduce(2**30, 20)
    size = str(2**30)
    argv = ["/opt/nccl-tests/all_reduce_perf", "-b", size, "-e", size, "-g", "8", "-n", "20", "-w", "5"]
    assert seen == [[*argv, "-c", "1", "-d", "float", "-o", "sum"]]
    assert raw["impl"] == "nccl-tests"
    # An A100 table judged as an H100 node: read, then below the H100 floor.
    assert parse("collectives", raw).metrics == {"allreduce_busbw_gbps": 231.70}

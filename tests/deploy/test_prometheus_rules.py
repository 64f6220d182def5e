"""deploy/prometheus: the alerting rules load, their unit tests pass, every alert is tested firing
and quiet, and every series they read is one that is actually exported."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from fleetforge.cli import main
from tests.deploy.tools import require, run
from tests.validation.gate.helpers import fleet, spec_mapping, write

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "fleetforge-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "fleetforge-alerts.test.yml"
COUNTERS = ROOT / "deploy" / "dcgm-exporter" / "counters.csv"


def alerts() -> dict[str, str]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return {rule["alert"]: rule["expr"] for group in doc["groups"] for rule in group["rules"]}


def test_promtool_checks_the_rules_with_lint_fatal() -> None:
    promtool = require("promtool")
    done = run([promtool, "check", "rules", "--lint-fatal", str(RULES)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


def test_promtool_unit_tests_pass() -> None:
    promtool = require("promtool")
    done = run([promtool, "test", "rules", str(RULE_TESTS)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_is_tested_both_firing_and_quiet() -> None:
    doc = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in doc["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert set(alerts()) == fired == quiet


def test_both_host_label_spellings_reach_the_alert_as_hostname() -> None:
    """dcgm-exporter renamed `Hostname` to `hostname`; the unit tests feed both and every DCGM
    alert copies the old spelling into the new one."""
    for name, expr in alerts().items():
        if "DCGM_" in expr:
            assert re.search(r'"hostname", "\$1", "Hostname", "\(\.\+\)"\)\s*$', expr), name
    text = RULE_TESTS.read_text(encoding="utf-8")
    assert 'Hostname="node1"' in text and 'hostname="node2"' in text


def test_a_changed_threshold_fails_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests pin the thresholds: moving one (85 C to 95 C) must turn them red."""
    promtool = require("promtool")
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    text = RULES.read_text(encoding="utf-8")
    assert "DCGM_FI_DEV_GPU_TEMP > 85" in text
    (tmp_path / RULES.name).write_text(text.replace("DCGM_FI_DEV_GPU_TEMP > 85", "DCGM_FI_DEV_GPU_TEMP > 95"))
    done = run([promtool, "test", "rules", str(tmp_path / RULE_TESTS.name)])
    assert done.returncode == 1 and "alertname: GPUTemperatureHigh" in done.stdout + done.stderr


def test_violation_counters_are_read_as_nanoseconds() -> None:
    """DCGM's *_VIOLATION counters are nanoseconds (NVML violationTime; the DCGM field reference,
    NVIDIA/dcgm-exporter#589): a rate of one is a fraction of time only over 1e9, never 1e6."""
    read = 0
    for name, expr in alerts().items():
        for metric, divisor in re.findall(
            r"rate\((DCGM_FI_DEV_\w+_VIOLATION)\[\w+\]\)\s*/\s*([0-9.e]+)", expr
        ):
            assert float(divisor) == 1e9, f"{name}: rate({metric}) / {divisor}; the counter is in ns"
            read += 1
        assert len(re.findall(r"_VIOLATION\b", expr)) == len(
            re.findall(r"rate\(DCGM_FI_DEV_\w+_VIOLATION", expr)
        )
    assert read == 2  # thermal and power
    helps = {
        fields[0]: fields[2]
        for line in COUNTERS.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
        for fields in [[f.strip() for f in line.split(",", 2)]]
    }
    violations = {m: h for m, h in helps.items() if m.endswith("_VIOLATION")}
    assert violations and all(h.startswith("Nanoseconds") for h in violations.values()), violations


def test_microsecond_violation_units_fail_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests feed nanoseconds: read as microseconds (/ 1e6), a GPU throttled 0.1 % of the
    time would fire and the annotation would say 1000x the share, so promtool must turn red."""
    promtool = require("promtool")
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    text = RULES.read_text(encoding="utf-8")
    assert text.count("_VIOLATION[5m]) / 1e9") == 2
    (tmp_path / RULES.name).write_text(text.replace("_VIOLATION[5m]) / 1e9", "_VIOLATION[5m]) / 1e6"))
    done = run([promtool, "test", "rules", str(tmp_path / RULE_TESTS.name)])
    output = done.stdout + done.stderr
    assert done.returncode == 1
    assert "alertname: GPUThermalThrottling" in output and "alertname: GPUPowerThrottling" in output


def counters() -> dict[str, str]:
    """The enabled fields of the shipped dcgm-exporter counters CSV: name -> Prometheus type."""
    enabled: dict[str, str] = {}
    for number, line in enumerate(COUNTERS.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",", 2)]
        assert len(fields) == 3 and all(fields), f"{COUNTERS.name}:{number}: want 'field, type, help'"
        assert fields[1] in {"gauge", "counter", "label"}, f"{COUNTERS.name}:{number}: type {fields[1]!r}"
        assert re.fullmatch(r"DCGM_(FI|EXP)_[A-Z0-9_]+", fields[0]), f"{COUNTERS.name}:{number}"
        assert fields[0] not in enabled, f"{COUNTERS.name}:{number}: {fields[0]} twice"
        enabled[fields[0]] = fields[1]
    return enabled


def test_every_dcgm_series_the_rules_read_is_enabled_in_the_shipped_counters() -> None:
    enabled = counters()
    for name, expr in alerts().items():
        plain = re.sub(r'__name__=~"[^"]+"', "", expr)
        for metric in re.findall(r"\bDCGM_(?:FI|EXP)_[A-Z0-9_]+\b", plain):
            assert metric in enabled, f"{name} reads {metric}, which {COUNTERS.name} does not export"
        for pattern in re.findall(r'__name__=~"([^"]+)"', expr):
            assert any(re.fullmatch(pattern, m) for m in enabled), f"{name}: nothing matches {pattern}"
    # Rates are taken of counters only; a gauge under rate() or increase() is a silent mistake.
    for name, expr in alerts().items():
        for metric in re.findall(r"(?:rate|increase)\((DCGM_\w+)", expr):
            assert enabled[metric] == "counter", f"{name}: {metric} is a {enabled[metric]}"


def test_gate_series_the_rules_read_are_written_by_gate_prom(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write(tmp_path / "r", fleet(6, node3={"scale": {"gemm_bf16_tflops": 0.8}}))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(yaml.safe_dump(spec_mapping(5)))
    main(["gate", str(folder), "--spec", str(spec), "--prom", str(tmp_path / "gate.prom")])
    capsys.readouterr()
    written = set(re.findall(r"^# TYPE (\S+) ", (tmp_path / "gate.prom").read_text(), re.MULTILINE))
    read = {m for expr in alerts().values() for m in re.findall(r"\bfleetforge_[a-z_]+\b", expr)}
    assert read and read <= written

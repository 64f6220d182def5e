"""Defects the corpus of real tool output showed, one test each, on the published sample that
shows it (tests/validation/burnin/fixtures/real/, sources in the sidecars)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.validation.burnin.helpers import ctx, fixture_json
from validation.burnin.checks import REGISTRY
from validation.burnin.outcome import CheckOutcome
from validation.burnin.parsers import fio, kernlog, perftest

REAL = Path(__file__).parent / "fixtures" / "real"
H100 = "p5.48xlarge"


def real(name: str) -> str:
    return (REAL / name).read_text()


def real_lines(name: str) -> list[str]:
    return real(name).splitlines()


# ------------------------------------------------------------------ perftest


def test_perftest_mb_per_sec_is_mebibytes_per_second() -> None:
    # 1.67 "MB/sec" is 1.67 x 2^20 bytes/s = 0.014009 Gb/s, not 1.67 x 10^6 x 8 = 0.01336.
    assert perftest.bw_average_gbitps(real("perftest-atomic-mb-legacy.txt")) == pytest.approx(
        0.01400898, rel=1e-6
    )


def test_perftest_reads_the_mib_per_sec_header_of_newer_versions() -> None:
    assert perftest.bw_average(real("perftest-write-mib-gpudirect.txt")) == (14948.67, "MiB/sec")
    assert perftest.bw_average_gbitps(real("perftest-write-mib-gpudirect.txt")) == pytest.approx(125.39853)


def test_perftest_skips_warnings_between_header_and_result() -> None:
    assert perftest.bw_average(real("perftest-send-mib-cpufreq-warning.txt")) == (46557.03, "MiB/sec")


def test_perftest_all_sizes_reads_the_largest_message() -> None:
    assert perftest.bw_average(real("perftest-send-mib-all-sizes-efa.txt")) == (8909.75, "MiB/sec")


# ------------------------------------------------------------------ fio


def test_fio_before_3_2_falls_back_to_bw_in_kib() -> None:
    text = real("fio-2.1.4-no-bw-bytes.json")
    # Read jobs report 129836 + 1269 + 1292 KiB/s.
    assert fio.throughput_mbps(text, "read") == pytest.approx((129836 + 1269 + 1292) * 1024 / 1e6)
    assert fio.iops(text, "read") == 253 + 317 + 323


def test_fio_reads_read_iops_in_new_and_old_json() -> None:
    assert fio.iops(real("fio-2.17-no-bw-bytes.json"), "read") == pytest.approx(8086.673998)
    assert fio.iops(real("fio-3.26-readwrite.json"), "read") == pytest.approx(569.699415)


def test_fio_prefers_bw_bytes_where_present() -> None:
    assert fio.throughput_mbps(real("fio-3.26-readwrite.json"), "write") == pytest.approx(67.267937)


def test_fio_unreadable_json_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="fio: JSON not readable"):
        fio.throughput_mbps('{"jobs": [', "read")


# ------------------------------------------------------------------ kernel log


def test_xids_keep_the_pci_domain() -> None:
    xids = kernlog.parse_xids(real_lines("kernlog-xid43-domains.txt"))
    assert [x.bus for x in xids] == ["0002:01:00", "0003:01:00", "0006:01:00", "0007:01:00"]


def test_bus_ids_from_nvml_and_the_driver_meet_with_their_domain() -> None:
    assert kernlog.normalise_bus("00000019:01:00.0") == kernlog.normalise_bus("0019:01:00") == "0019:01:00"
    assert kernlog.normalise_bus("00000002:00:00.0") != kernlog.normalise_bus("00000019:01:00.0")
    assert kernlog.normalise_bus("3b:00") == "0000:3b:00"
    with pytest.raises(ValueError, match="not a PCI address"):
        kernlog.normalise_bus("3b")


def severities(name: str) -> list[str]:
    return [m.severity for m in kernlog.parse_machine_checks(real_lines(name))]


def test_machine_check_severity_comes_from_the_status_bits() -> None:
    # Bank 4 status a600000000020408: UC and PCC set; no line says "uncorrected".
    assert severities("kernlog-mce-uc-pcc-syslog.log") == ["uncorrected"]
    # mcelog's STATUS fa00000000400405 (UC|PCC), and AMD's decoder lines with UC clear.
    assert severities("kernlog-mcelog-uc-pcc.txt") == ["uncorrected"]
    assert severities("kernlog-mce-amd-decoded-ce.log") == ["corrected", "corrected"]


def test_apei_recoverable_is_uncorrected() -> None:
    assert severities("kernlog-ghes-recoverable.log") == ["uncorrected"]
    assert severities("kernlog-ghes-corrected.log") == ["corrected"]


def test_edac_driver_start_up_lines_are_not_errors() -> None:
    assert severities("kernlog-edac-amd64-startup.log") == []
    assert severities("kernlog-oops-edac-modules.txt") == []


def test_a_multi_line_record_counts_once() -> None:
    # "events logged" header, sb_edac's decode of the bank (5 lines) and the EDAC CE summary.
    assert severities("kernlog-mce-sbridge-ce-syslog.log") == ["corrected"]
    assert severities("kernlog-mce-sbridge-ce-ctime.log") == ["corrected"]
    # NVSwitch SXid: one record per fault; the three-line "fallen off the bus": one record.
    assert len(kernlog.parse_gpu_faults(real_lines("kernlog-fallen-off-bus-no-xid.log"))) == 1


def test_status_without_the_valid_bit_is_not_evidence() -> None:
    lines = ["mce: [Hardware Error]: Machine check events logged", "Bank 4: 2600000000020408"]
    assert [m.severity for m in kernlog.parse_machine_checks(lines)] == ["undecoded"]


# ------------------------------------------------------------------ the health check on real logs


def health(lines: list[str], bus_ids: dict[int, str] | None = None) -> CheckOutcome:
    raw: dict[str, Any] = copy.deepcopy(fixture_json("nvml/health_h100_good.json"))
    for index, bus in (bus_ids or {}).items():
        raw["devices"][index]["bus_id"] = bus
    raw["kernel_log"] = {"source": "journalctl", "lines": lines}
    return REGISTRY.get("health").parse(raw, ctx(H100))


@pytest.mark.parametrize(
    ("sample", "finding"),
    [
        ("kernlog-sxid-nvswitch.txt", "NVSwitch PCI 0000:00:00: SXid 20034"),
        ("kernlog-fallen-off-bus-no-xid.log", "PCI 0000:b3:00: fell off the bus (no XID logged)"),
        ("kernlog-rminitadapter-gsp.log", "PCI 0000:98:00: the driver could not initialise it"),
        (
            "kernlog-rminitadapter-legacy.log",
            "a GPU (the line names none): the driver could not initialise it",
        ),
    ],
)
def test_gpu_faults_without_an_xid_fail_the_node(sample: str, finding: str) -> None:
    out = health(real_lines(sample))
    assert out.status == "fail"
    assert out.metrics["xid_errors"] == 0 and out.metrics["gpu_fault_events"] >= 1
    assert any(f.startswith(finding) for f in out.findings), out.findings


def test_xids_are_mapped_to_gpus_by_their_full_bus_id() -> None:
    out = health(
        real_lines("kernlog-xid119-nhc-report.txt"),
        {0: "00000019:01:00.0", 1: "00000002:00:00.0"},
    )
    assert out.status == "fail"
    assert any(f.startswith("GPU 1 (0002:00:00): XID 119") for f in out.findings), out.findings


def test_uncorrected_machine_check_fails_the_node_and_corrected_is_noted() -> None:
    out = health(real_lines("kernlog-ghes-recoverable.log"))
    assert out.status == "fail" and out.metrics["mce_errors"] == 1
    assert any("APEI severity recoverable" in f for f in out.findings)
    ok = health(real_lines("kernlog-edac-ce-repeats.log"))
    assert ok.status == "pass" and ok.metrics["mce_errors"] == 0
    assert any(f.startswith("7 corrected hardware errors") for f in ok.findings)
    undecoded = health(real_lines("kernlog-mce-undecoded.log"))
    assert undecoded.status == "pass"
    assert any("3 machine-check events logged without a status" in f for f in undecoded.findings)


def test_the_storage_check_reads_fio_older_than_3_2() -> None:
    old = real("fio-2.17-no-bw-bytes.json")
    raw = {
        "method": "fio",
        "path": "/data",
        "bytes": 2**30,
        "write": {"rc": 0, "output": old},
        "read": {"rc": 0, "output": old},
    }
    out = REGISTRY.get("storage").parse(raw, ctx("cpu"))
    # Read, then judged: a 2017 cloud disk's 40 MB/s random writes are below the cpu floor.
    assert out.status == "fail" and any("storage_write_mbps 40.26 below floor" in f for f in out.findings)
    assert out.metrics == {
        "storage_write_mbps": pytest.approx(40.255488),
        "storage_read_mbps": pytest.approx(132.491264),
    }
    assert "fio: 8087 read IOPS, 2457 write IOPS" in out.findings

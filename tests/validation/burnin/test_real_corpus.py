"""Every sample of real, published tool output (tests/validation/burnin/fixtures/real/) goes through the
project's parsers and must read as a person reads it: the values in its sidecar.

A sample whose kind has no parser fails here unless its sidecar says why it is out of scope.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from validation.burnin.parsers import dcgm, fio, kernlog, nccl_tests, perftest

REAL = Path(__file__).parent / "fixtures" / "real"
SIDECARS = sorted(REAL.glob("*.yaml"))


def _load(sidecar: Path) -> tuple[dict[str, Any], str]:
    meta = yaml.safe_load(sidecar.read_text())
    return meta, (REAL / meta["sample"]).read_text()


def check_kernlog(text: str, expect: dict[str, Any]) -> None:
    # The same lines twice: the whole log, and what the host backend keeps of it (RELEVANT), so
    # the collection filter is proven not to drop what the parsers need.
    lines = text.splitlines()
    for view in (lines, [ln for ln in lines if kernlog.RELEVANT.search(ln)]):
        xids = kernlog.parse_xids(view)
        assert len(xids) == expect["xid_count"]
        assert sorted({x.bus for x in xids}) == sorted(expect["xid_gpus"])
        assert sorted({x.code for x in xids}) == sorted(expect["xid_codes"])
        faults = [
            {"kind": f.kind, "bus": f.bus, **({"code": f.code} if f.kind == "sxid" else {})}
            for f in kernlog.parse_gpu_faults(view)
        ]
        assert faults == expect["gpu_faults"]
        severities = Counter(m.severity for m in kernlog.parse_machine_checks(view))
        assert {k: severities.get(k, 0) for k in ("uncorrected", "corrected", "undecoded")} == expect["mce"]


def check_perftest(text: str, expect: dict[str, Any]) -> None:
    value, unit = perftest.bw_average(text)
    assert (value, unit) == (expect["bw_average"], expect["unit"])
    assert perftest.bw_average_gbitps(text) == pytest.approx(expect["bw_average_gbitps"], rel=1e-5)


def check_fio(text: str, expect: dict[str, Any]) -> None:
    for direction in ("read", "write"):
        want = expect[f"{direction}_mbps"]
        if want is None:
            with pytest.raises(ValueError, match=f"no {direction} bandwidth"):
                fio.throughput_mbps(text, direction)
        else:
            assert fio.throughput_mbps(text, direction) == pytest.approx(want, rel=1e-9)
        assert fio.iops(text, direction) == pytest.approx(expect[f"{direction}_iops"], rel=1e-9)


def check_nccl_tests(text: str, expect: dict[str, Any]) -> None:
    result = nccl_tests.parse_table(text)
    assert result.bytes == expect["bytes"]
    assert (result.busbw_out_gbps, result.busbw_in_gbps) == (
        expect["busbw_out_gbps"],
        expect["busbw_in_gbps"],
    )
    assert result.busbw_gbps == min(expect["busbw_out_gbps"], expect["busbw_in_gbps"])
    assert result.wrong == expect["wrong"]
    assert result.avg_busbw_gbps == expect["avg_busbw_gbps"]


def check_dcgm_diag(text: str, expect: dict[str, Any]) -> None:
    if expect["error"]:
        with pytest.raises(ValueError, match="dcgmi diag"):
            dcgm.parse_diag(text)
        return
    report = dcgm.parse_diag(text)
    assert len(report.with_status("pass")) == expect["passed"]
    for status in ("failed", "warned", "skipped"):
        word = {"failed": "fail", "warned": "warn", "skipped": "skip"}[status]
        assert [t.name for t in report.with_status(word)] == expect[status]


PARSERS: dict[str, Callable[[str, dict[str, Any]], None]] = {
    "kernlog": check_kernlog,
    "perftest": check_perftest,
    "fio": check_fio,
    "nccl_tests": check_nccl_tests,
    "dcgm_diag": check_dcgm_diag,
}


def test_the_corpus_is_large_and_every_sample_is_sourced() -> None:
    assert len(SIDECARS) >= 40
    for sidecar in SIDECARS:
        meta, text = _load(sidecar)
        source = meta["source"]
        assert (
            source.get("url", "").startswith("https://github.com/")
            or (source.get("repository") and source.get("path") and len(source.get("commit", "")) == 40)
            or source.get("index_id")
        ), sidecar.name
        assert meta["tool"] and meta["format"] and meta.get("version"), sidecar.name
        assert text.strip(), sidecar.name


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: p.stem)
def test_real_sample_reads_as_published(sidecar: Path) -> None:
    meta, text = _load(sidecar)
    if "out_of_scope" in meta:
        assert meta["kind"] not in PARSERS, "a kind with a parser cannot be declared out of scope"
        assert len(meta["out_of_scope"]) > 20, "say why the sample is out of scope"
        return
    check = PARSERS.get(meta["kind"])
    assert check is not None, f"{sidecar.name}: no parser reads kind {meta['kind']!r}"
    check(text, meta["expect"])


@pytest.mark.parametrize("cell", ["-nan", "inf", "-1.00"])
def test_a_broken_busbw_at_the_largest_size_is_no_measurement(cell: str) -> None:
    # The published 8x A100 table with its largest row's in-place busbw broken: the lower of the
    # two placements is judged, and min() with a NaN would quietly keep the out-of-place figure.
    text = (REAL / "nccl-allreduce-8xa100.txt").read_text()
    row = "  1073741824     268435456     float     sum      -1   8109.1  132.41  231.72      0   8109.7  132.40  231.70      0"
    assert row in text
    broken = text.replace(row, row.replace("132.40  231.70", f"132.40  {cell}"))
    with pytest.raises(ValueError, match=rf"in-place busbw at 1073741824 B is '{re.escape(cell)}'"):
        nccl_tests.parse_table(broken)

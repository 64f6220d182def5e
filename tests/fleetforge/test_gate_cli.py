"""`fleetforge gate`: exit codes for CI, the --json shape, reports on disk, and clean usage errors."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import NoReturn

import pytest
import yaml

from fleetforge import exitcodes
from fleetforge.cli import main
from tests.validation.gate.helpers import fleet, node_records, onprem_spec_mapping, spec_mapping, write


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def spec_file(tmp_path: Path, mapping: dict[str, object]) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(mapping))
    return path


def test_all_accepted_exits_0_and_json_has_the_documented_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write(tmp_path / "r", fleet(4))
    code, out, err = run(capsys, "gate", folder, "--json")
    assert (code, err) == (exitcodes.OK, "")
    doc = json.loads(out)
    assert set(doc) >= {"nodes", "fleet", "stats", "notes", "outcome"}
    assert [n["node"] for n in doc["nodes"]] == ["node1", "node2", "node3", "node4"]
    assert {n["verdict"] for n in doc["nodes"]} == {"accept"}
    assert set(doc["stats"]["gemm_bf16_tflops"]) >= {"median", "mad", "n", "floor", "outlier_below"}
    assert doc["fleet"]["sku"] == "p5.48xlarge" and doc["outcome"] == "ok"


def test_a_rejected_node_exits_1_with_every_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write(tmp_path / "r", fleet(6, node3={"scale": {"gemm_bf16_tflops": 0.8}}))
    code, out, _ = run(capsys, "gate", folder, "--json")
    assert code == exitcodes.REJECTED
    node3 = next(n for n in json.loads(out)["nodes"] if n["node"] == "node3")
    assert node3["verdict"] == "reject"
    for reason in node3["reasons"]:
        assert set(reason) >= {"check", "metric", "measured", "expected", "rule"}
    assert {r["rule"] for r in node3["reasons"]} == {"floor", "outlier"}
    code, text, _ = run(capsys, "gate", folder)
    assert code == exitcodes.REJECTED
    assert "REJECT node3" in text and "floor" in text and "accepted (5)" in text


def test_incomplete_results_exit_2_and_outrank_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs = fleet(5, node1={"scale": {"gemm_bf16_tflops": 0.8}}, node2={"drop": ["memory"]})
    folder = write(tmp_path / "r", recs)
    code, _, _ = run(capsys, "gate", folder)
    assert code == exitcodes.INCOMPLETE


def test_with_a_spec_spares_cover_rejects_unless_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write(tmp_path / "r", fleet(5, node2={"drop": ["memory"]}))
    spec = spec_file(tmp_path, spec_mapping(4, 1))
    inventory = tmp_path / "inventory.yml"
    code, out, _ = run(capsys, "gate", folder, "--spec", spec, "--inventory-out", inventory)
    assert code == exitcodes.OK
    assert "READY" in out
    doc = yaml.safe_load(inventory.read_text())
    groups = doc["all"]["children"]["fleetforge_accepted"]
    assert len(groups["children"]["fleetforge_job"]["hosts"]) == 4
    assert groups["children"]["fleetforge_spare"]["hosts"] in ({}, None)
    assert groups["vars"]["fleetforge_ready"] is True
    assert run(capsys, "gate", folder, "--spec", spec, "--strict")[0] == exitcodes.INCOMPLETE
    short = spec_file(tmp_path, spec_mapping(5, 1))
    code, out, _ = run(capsys, "gate", folder, "--spec", short, "--inventory-out", inventory)
    assert code == exitcodes.REJECTED and "NOT READY" in out
    doc = yaml.safe_load(inventory.read_text())["all"]["children"]["fleetforge_accepted"]
    assert doc["children"]["fleetforge_job"]["hosts"] in ({}, None)  # nothing lands on a short fleet
    assert doc["vars"]["fleetforge_ready"] is False


def test_onprem_inventory_keeps_host_addresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = ["gpu1", "gpu2", "gpu3"]
    folder = write(tmp_path / "r", {n: node_records(n, sku="hgx-h100-8") for n in names[:2]})
    spec = spec_file(tmp_path, onprem_spec_mapping(names, nodes=2, spares=1))
    inventory = tmp_path / "inv.yml"
    code, out, _ = run(capsys, "gate", folder, "--spec", spec, "--inventory-out", inventory, "--json")
    assert code == exitcodes.OK
    doc = json.loads(out)
    gpu3 = next(n for n in doc["nodes"] if n["node"] == "gpu3")
    assert gpu3["reasons"][0]["rule"] == "missing"
    hosts = yaml.safe_load(inventory.read_text())["all"]["children"]["fleetforge_accepted"]["children"]
    assert hosts["fleetforge_job"]["hosts"]["gpu1"] == {"ansible_host": "10.0.0.1", "ansible_user": "ops"}


def test_usage_and_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write(tmp_path / "r", fleet(3))
    code, _, err = run(capsys, "gate", tmp_path / "nope")
    assert code == exitcodes.NO_INPUT and "no such file or folder" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, "gate", tmp_path / "empty")
    assert code == exitcodes.NO_INPUT and "no *.jsonl" in err
    code, _, err = run(capsys, "gate", folder, "--sku", "p9.huge")
    assert code == exitcodes.USAGE and "unknown SKU 'p9.huge'" in err
    code, _, err = run(capsys, "gate", folder, "--junit", tmp_path / "no" / "such" / "j.xml")
    assert code == exitcodes.USAGE and "does not exist" in err
    code, _, err = run(capsys, "gate", folder, "--spec", tmp_path / "missing.yaml")
    assert code == exitcodes.NO_INPUT
    bad_spec = spec_file(tmp_path, {**spec_mapping(2), "nodes": 0})
    assert run(capsys, "gate", folder, "--spec", bad_spec)[0] == exitcodes.DATA
    code, _, err = run(
        capsys, "gate", folder, "--spec", spec_file(tmp_path, spec_mapping(2)), "--sku", "p5e.48xlarge"
    )
    assert code == exitcodes.USAGE and "disagrees" in err
    assert "Traceback" not in err


def test_mixed_skus_exit_65_naming_the_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = fleet(2)
    recs["odd1"] = node_records("odd1", sku="p5e.48xlarge")
    folder = write(tmp_path / "r", recs)
    code, out, err = run(capsys, "gate", folder, "--junit", tmp_path / "j.xml")
    assert code == exitcodes.DATA
    assert "p5e.48xlarge on odd1" in err and "p5.48xlarge on node1, node2" in err
    assert out == "" and not (tmp_path / "j.xml").exists()  # nothing written for unusable input


def test_reports_are_written_and_html_without_matplotlib_exits_69(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write(tmp_path / "r", fleet(3))
    paths = {
        opt: tmp_path / name
        for opt, name in (("--junit", "j.xml"), ("--prom", "m.prom"), ("--html", "g.html"))
    }
    code, _, _ = run(capsys, "gate", folder, *[x for kv in paths.items() for x in kv])
    assert code == exitcodes.OK
    assert all(p.stat().st_size > 0 for p in paths.values())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code, _, err = run(capsys, "gate", folder, "--html", tmp_path / "again.html")
    assert code == exitcodes.UNAVAILABLE and "fleetforge[report]" in err
    assert not (tmp_path / "again.html").exists()


def test_garbage_and_truncated_files_are_reported_per_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write(tmp_path / "r", fleet(3))
    (folder / "node7.jsonl").write_text('{"schema": "fleetforge.result/1", "kind": "ru')
    code, out, _ = run(capsys, "gate", folder, "--json")
    assert code == exitcodes.INCOMPLETE
    doc = json.loads(out)
    assert doc["files"] == [
        {
            "path": str(folder / "node7.jsonl"),
            "records": 0,
            "bad_lines": [{"line": 1, "problem": doc["files"][0]["bad_lines"][0]["problem"]}],
        }
    ]
    assert "truncated" in doc["files"][0]["bad_lines"][0]["problem"]
    node7 = next(n for n in doc["nodes"] if n["node"] == "node7")
    assert {r["rule"] for r in node7["reasons"]} == {"unreadable"}


def test_two_reports_naming_one_file_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write(tmp_path / "r", fleet(3))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link.xml").symlink_to(tmp_path / "x.xml")
    for spelled in ("x.xml", "./x.xml", str(tmp_path / "x.xml"), "r/../x.xml", "link.xml"):
        code, out, err = run(capsys, "gate", folder, "--junit", "x.xml", "--prom", spelled)
        assert code == exitcodes.USAGE, (spelled, err)
        assert "--prom" in err and "--junit x.xml" in err and "same file" in err
        assert out == "" and not (tmp_path / "x.xml").exists()


@pytest.mark.parametrize(
    ("where", "errno_", "code"),
    [
        ("mkstemp", errno.EROFS, exitcodes.CANT_CREATE),
        ("mkstemp", errno.EACCES, exitcodes.CANT_CREATE),
        ("fsync", errno.ENOSPC, exitcodes.IO_ERROR),
        ("fsync", errno.EDQUOT, exitcodes.IO_ERROR),
        ("fsync", errno.EIO, exitcodes.IO_ERROR),
    ],
)
def test_a_report_that_cannot_be_written_exits_73_or_74_naming_option_and_path(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    errno_: int,
    code: int,
) -> None:
    from fleet import atomic

    folder = write(tmp_path / "r", fleet(3))

    def refuse(*_args: object, **_kwargs: object) -> NoReturn:
        raise OSError(errno_, os.strerror(errno_))

    if where == "mkstemp":  # the folder takes no new file: read-only, no permission
        monkeypatch.setattr(atomic, "tempfile", SimpleNamespace(mkstemp=refuse))
    else:  # the file was being written: disk full, quota, I/O error
        monkeypatch.setattr(atomic.os, "fsync", refuse)
    target = tmp_path / "gate.prom"
    got, _, err = run(capsys, "gate", folder, "--prom", target)
    assert got == code, err
    assert f"--prom: cannot write {target} ({os.strerror(errno_)})" in " ".join(err.split())
    assert "Traceback" not in err and not target.exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_the_kernel_refuses_exits_73(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # /proc/self is a folder no file can be created in, even by root (who ignores a folder's mode).
    folder = write(tmp_path / "r", fleet(3))
    got, _, err = run(capsys, "gate", folder, "--junit", "/proc/self/gate.xml")
    assert got == exitcodes.CANT_CREATE, err
    assert "--junit: cannot write /proc/self/gate.xml" in err

"""validation/burnin/pairbw.py: ib_write_bw between the two hosts of a fabric pair.

The parser is proven on real ib_write_bw output, client and server side, copied from public
sources (fixtures/pairbw/ and the corpus sample its README names). The orchestration runs real
processes: this module's CLI, and a stand-in `ib_write_bw` on PATH (no RDMA hardware here) that
prints those captured outputs, sleeps past every limit, or exits non-zero like a refused connection.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from fleet.metrics import FABRIC_IB_CHECK, FABRIC_IB_METRIC
from fleet.results import CheckRecord, ResultsWriter, RunRecord, read_results
from validation.burnin import pairbw
from validation.burnin.parsers import perftest

FIXTURES = Path(__file__).parent / "fixtures"
SERVER_SAMPLE = FIXTURES / "pairbw" / "ib_write_bw-server-roce-gbits.txt"
CLIENT_SAMPLE = FIXTURES / "real" / "perftest-write-gbits-ndr.txt"
FAILED_SAMPLE = FIXTURES / "perftest" / "ib_write_bw_failed.txt"
IB_SKU = "hgx-h100-8"  # InfiniBand in the catalog
ROCE_SKU = "a3-ultragpu-8g"  # gpudirect-rdma: RoCE

FAKE = """#!{python}
# A stand-in for perftest's ib_write_bw: what it does is chosen by the test's environment.
import os, sys, time
args = sys.argv[1:]
device = args[args.index("-d") + 1]
client = len(args) == 11  # the server address follows -p PORT on the client only
where = os.environ["FAKE_IB_DIR"]
with open(os.path.join(where, "calls.log"), "a") as fh:
    fh.write(("client " if client else "server ") + " ".join(args) + "\\n")
mode = os.environ.get("FAKE_IB_MODE_" + device, os.environ.get("FAKE_IB_MODE", "ok"))
if mode.startswith("refuse-then-ok:"):
    counter = os.path.join(where, "refused-" + device)
    done = int(open(counter).read()) if os.path.exists(counter) else 0
    if done < int(mode.split(":")[1]):
        open(counter, "w").write(str(done + 1))
        mode = "fail"
    else:
        mode = "ok"
if mode == "hang":
    with open(os.path.join(where, "pids"), "a") as fh:
        fh.write(str(os.getpid()) + "\\n")
    time.sleep(3600)
if mode == "fail":
    sys.stdout.write(open({failed!r}).read())
    sys.exit(1)
sys.stdout.write(open({client_sample!r} if client else {server_sample!r}).read())
"""


# ---------------------------------------------------------------------- the parser on real output


def test_the_server_side_of_a_real_pair_reads_as_its_sidecar_says() -> None:
    meta = yaml.safe_load(SERVER_SAMPLE.with_suffix(".yaml").read_text())
    assert meta["source"]["url"].startswith("https://github.com/")
    text = SERVER_SAMPLE.read_text()
    assert perftest.bw_average(text) == (meta["expect"]["bw_average"], meta["expect"]["unit"])
    assert perftest.bw_average_gbitps(text) == pytest.approx(meta["expect"]["bw_average_gbitps"])


def test_the_client_side_of_a_real_pair_reads_392_gbits() -> None:
    # The corpus sample: `ib_write_bw -d mlx5_0 --report_gbits csegpu2`, a CPU-frequency warning
    # between the header and the row.
    assert perftest.bw_average_gbitps(CLIENT_SAMPLE.read_text()) == 392.34


# ---------------------------------------------------------------------- probing


def _sysfs(root: Path, devices: dict[str, str]) -> Path:
    for name, layer in devices.items():
        port = root / "class" / "infiniband" / name / "ports" / "1"
        port.mkdir(parents=True)
        (port / "link_layer").write_text(layer + "\n")
        (port / "state").write_text("4: ACTIVE\n")
    return root


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ib_write_bw"
    script.write_text(
        FAKE.format(
            python=sys.executable,
            failed=str(FAILED_SAMPLE),
            client_sample=str(CLIENT_SAMPLE),
            server_sample=str(SERVER_SAMPLE),
        )
    )
    script.chmod(0o755)
    calls = tmp_path / "calls"
    calls.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_IB_DIR", str(calls))
    return calls


def test_probe_lists_the_fabrics_hcas_in_natural_order_whatever_their_state(
    tmp_path: Path, fake_bin: Path
) -> None:
    sysfs = _sysfs(
        tmp_path / "sys",
        {"mlx5_10": "InfiniBand", "mlx5_2": "InfiniBand", "mlx5_bond_0": "Ethernet", "mlx5_0": "InfiniBand"},
    )
    got = pairbw.probe(IB_SKU, sysfs)
    assert got.skip is None
    # Natural order, and the RoCE NIC is not the InfiniBand fabric.
    assert [h.device for h in got.devices] == ["mlx5_0", "mlx5_2", "mlx5_10"]
    roce = pairbw.probe(ROCE_SKU, sysfs)
    assert [h.device for h in roce.devices] == ["mlx5_bond_0"]
    named = pairbw.probe(IB_SKU, sysfs, ["mlx5_2", "mlx5_0:2"])
    assert [(h.device, h.port) for h in named.devices] == [("mlx5_2", 1), ("mlx5_0", 2)]
    assert "mlx5_9" in (pairbw.probe(IB_SKU, sysfs, ["mlx5_9"]).skip or "")


def test_probe_says_why_a_host_cannot_measure(
    tmp_path: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-sys"
    empty.mkdir()
    assert "no RDMA device with link layer InfiniBand" in (pairbw.probe(IB_SKU, empty).skip or "")
    assert "not an InfiniBand or RoCE fabric" in (pairbw.probe("p5.48xlarge", empty).skip or "")
    assert "not an InfiniBand or RoCE fabric" in (pairbw.probe("cpu", empty).skip or "")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    assert "ib_write_bw is not installed (perftest)" in (pairbw.probe(IB_SKU, empty).skip or "")


# ---------------------------------------------------------------------- measuring, real processes


def _results(path: Path, node: str, sku: str = IB_SKU) -> Path:
    with ResultsWriter(path) as w:
        w.append(
            RunRecord.model_validate(
                {
                    "run_id": "r1",
                    "node": node,
                    "sku": sku,
                    "level": "quick",
                    "started": "2026-12-01T08:00:00.000+00:00",
                    "checks": [],
                }
            )
        )
    return path


def _record(path: Path) -> CheckRecord:
    checks = [c for c in read_results(path).checks if c.check == FABRIC_IB_CHECK]
    assert len(checks) == 1, checks
    return checks[0]


PEER = json.dumps({"devices": ["mlx5_0:1", "mlx5_1:1"], "skip": None})


def _argv(role: str, results: Path, sysfs: Path, *extra: str) -> list[str]:
    return [
        "--role", role, "--results", str(results), "--self", "h0" if role == "server" else "h1",
        "--peer", "h1" if role == "server" else "h0", "--peer-addr", "10.0.0.1", "--peer-probe", PEER,
        "--port", "18600", "--seconds", "1", "--sysfs", str(sysfs), *extra,
    ]  # fmt: skip


def test_both_sides_measure_hca_i_against_hca_i_and_record_the_slowest(
    tmp_path: Path, fake_bin: Path
) -> None:
    sysfs = _sysfs(tmp_path / "sys", {"mlx5_0": "InfiniBand", "mlx5_1": "InfiniBand"})
    server_file = _results(tmp_path / "h0" / "pair-ib.jsonl", "h0")
    client_file = _results(tmp_path / "h1" / "pair-ib.jsonl", "h1")
    codes: dict[str, int] = {}
    server = threading.Thread(
        target=lambda: codes.__setitem__("server", pairbw.main(_argv("server", server_file, sysfs)))
    )
    server.start()
    codes["client"] = pairbw.main(_argv("client", client_file, sysfs))
    server.join(timeout=60)
    assert codes == {"server": 0, "client": 0}
    calls = (fake_bin / "calls.log").read_text().splitlines()
    assert sorted(calls) == [
        "client -d mlx5_0 -i 1 -F --report_gbits -D 1 -p 18600 10.0.0.1",
        "client -d mlx5_1 -i 1 -F --report_gbits -D 1 -p 18601 10.0.0.1",
        "server -d mlx5_0 -i 1 -F --report_gbits -D 1 -p 18600",
        "server -d mlx5_1 -i 1 -F --report_gbits -D 1 -p 18601",
    ]
    client = _record(client_file)
    assert client.status == "pass" and client.metrics == {FABRIC_IB_METRIC: 392.34}
    assert client.per_device[FABRIC_IB_METRIC] == [392.34, 392.34]
    assert any("mlx5_1->mlx5_1: 392.3 Gb/s" in f for f in client.findings)
    assert _record(server_file).metrics == {FABRIC_IB_METRIC: 779.21}


def test_a_hung_server_is_killed_at_its_limit_and_recorded_as_a_failure(
    tmp_path: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pairbw, "SERVER_GRACE_S", 0.5)
    monkeypatch.setenv("FAKE_IB_MODE_mlx5_1", "hang")
    sysfs = _sysfs(tmp_path / "sys", {"mlx5_0": "InfiniBand", "mlx5_1": "InfiniBand"})
    results = _results(tmp_path / "pair-ib.jsonl", "h0")
    t0 = time.monotonic()
    code = pairbw.main(_argv("server", results, sysfs, "--timeout", "2"))
    took = time.monotonic() - t0
    assert code == 2 and took < 15
    rec = _record(results)
    assert rec.status == "error" and not rec.metrics
    assert "1 of 2 HCA pair(s) failed" in (rec.reason or "")
    assert "mlx5_1->mlx5_1: no result within 2.5 s (killed)" in (rec.reason or "")
    # The hung process is gone, not left listening on the host.
    pid = int((fake_bin / "pids").read_text().split()[0])
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_hung_client_run_is_killed_at_its_share_and_the_next_hca_still_runs(
    tmp_path: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pairbw, "PER_HCA_SLACK_S", 0.5)
    monkeypatch.setattr(pairbw, "CONNECT_WINDOW_S", 0.5)
    monkeypatch.setenv("FAKE_IB_MODE_mlx5_0", "hang")
    sysfs = _sysfs(tmp_path / "sys", {"mlx5_0": "InfiniBand", "mlx5_1": "InfiniBand"})
    results = _results(tmp_path / "pair-ib.jsonl", "h1")
    assert pairbw.main(_argv("client", results, sysfs, "--timeout", "30")) == 2
    rec = _record(results)
    assert "mlx5_0->mlx5_0: no result within 2 s (killed)" in (rec.reason or "")
    assert "mlx5_1->mlx5_1: 392.3 Gb/s" in rec.findings
    # With no time left for it, the next HCA pair is not run at all, and says so.
    results = _results(tmp_path / "short.jsonl", "h1")
    assert pairbw.main(_argv("client", results, sysfs, "--timeout", "1")) == 2
    assert "mlx5_1->mlx5_1: not run: the client's 1 s went to the HCA pairs before it" in (
        _record(results).reason or ""
    )


def test_a_refused_connection_is_retried_while_the_server_comes_up(
    tmp_path: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pairbw, "CONNECT_RETRY_S", 0.05)
    monkeypatch.setenv("FAKE_IB_MODE", "refuse-then-ok:3")
    sysfs = _sysfs(tmp_path / "sys", {"mlx5_0": "InfiniBand"})
    results = _results(tmp_path / "pair-ib.jsonl", "h1")
    peer = json.dumps({"devices": ["mlx5_0:1"], "skip": None})
    assert pairbw.main(_argv("client", results, sysfs, "--peer-probe", peer)) == 0
    assert len((fake_bin / "calls.log").read_text().splitlines()) == 4
    assert _record(results).metrics == {FABRIC_IB_METRIC: 392.34}


def test_a_client_that_never_connects_fails_closed_with_perftests_words(
    tmp_path: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pairbw, "CONNECT_RETRY_S", 0.05)
    monkeypatch.setattr(pairbw, "CONNECT_WINDOW_S", 0.5)
    monkeypatch.setenv("FAKE_IB_MODE", "fail")
    sysfs = _sysfs(tmp_path / "sys", {"mlx5_0": "InfiniBand"})
    results = _results(tmp_path / "pair-ib.jsonl", "h1")
    peer = json.dumps({"devices": ["mlx5_0:1"], "skip": None})
    assert pairbw.main(_argv("client", results, sysfs, "--peer-probe", peer)) == 2
    rec = _record(results)
    assert rec.status == "error"
    assert "ib_write_bw exited with code 1: Couldn't connect to localhost:18515" in (rec.reason or "")
    assert len((fake_bin / "calls.log").read_text().splitlines()) > 1  # retried within the window


def test_unequal_hca_counts_measure_the_common_ones_and_say_so(tmp_path: Path, fake_bin: Path) -> None:
    sysfs = _sysfs(tmp_path / "sys", {"mlx5_0": "InfiniBand", "mlx5_1": "InfiniBand", "mlx5_2": "InfiniBand"})
    results = _results(tmp_path / "pair-ib.jsonl", "h1")
    assert pairbw.main(_argv("client", results, sysfs)) == 0
    rec = _record(results)
    assert "h1 has 3 HCA(s), h0 2: the first 2 measured, HCA i against HCA i" in rec.findings
    assert len(rec.per_device[FABRIC_IB_METRIC]) == 2


def test_without_perftest_or_when_the_partner_cannot_both_sides_skip_with_the_reason(
    tmp_path: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysfs = _sysfs(tmp_path / "sys", {"mlx5_0": "InfiniBand"})
    results = _results(tmp_path / "a.jsonl", "h0")
    lacking = json.dumps({"devices": [], "skip": "ib_write_bw is not installed (perftest): not measured"})
    assert pairbw.main(_argv("server", results, sysfs, "--peer-probe", lacking)) == 0
    rec = _record(results)
    assert rec.status == "skip" and (rec.reason or "").startswith("partner h1: ib_write_bw is not installed")
    assert not (fake_bin / "calls.log").exists()  # no server left waiting for a client that never comes
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    results = _results(tmp_path / "b.jsonl", "h1")
    assert pairbw.main(_argv("client", results, sysfs)) == 0
    assert "ib_write_bw is not installed" in (_record(results).reason or "")


def test_the_cli_probes_and_measures_as_a_process_and_refuses_bad_arguments(
    tmp_path: Path, fake_bin: Path
) -> None:
    sysfs = _sysfs(tmp_path / "sys", {"mlx5_0": "InfiniBand"})
    results = _results(tmp_path / "pair-ib.jsonl", "h1")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "validation.burnin.pairbw", *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)

    probed = cli("--probe", "--results", str(results), "--sysfs", str(sysfs))
    assert probed.returncode == 0 and json.loads(probed.stdout) == {"devices": ["mlx5_0:1"], "skip": None}
    peer = probed.stdout.strip()
    done = cli(*_argv("client", results, sysfs, "--peer-probe", peer))
    assert done.returncode == 0 and "fabric_pair_ib_write: pass" in done.stdout
    bad = cli("--results", str(results))
    assert bad.returncode == 64 and "--role server|client is required" in bad.stderr
    assert "Traceback" not in bad.stderr
    bad = cli("--role", "client", "--results", str(results))
    assert bad.returncode == 64 and "--peer-addr is required" in bad.stderr
    missing = cli(*_argv("client", tmp_path / "none.jsonl", sysfs))
    assert missing.returncode == 3 and "no burn-in run record" in missing.stderr

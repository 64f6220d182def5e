"""The all-reduce across nodes, launcher side: who takes part, how the ranks start (torchrun, or the
worker itself for one rank per node), and that a skip, a crash or a hang always leaves a record with
the reason. Where PyTorch is installed, two nodes on loopback all-reduce for real both ways."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.results import ResultsWriter, RunRecord, read_results
from tests.conftest import ROOT
from validation.burnin import multinode, procutil

RUN = {
    "run_id": "h0-r1",
    "node": "h0",
    "sku": "cpu",
    "level": "quick",
    "started": "2026-11-29T10:00:00+00:00",
}


def results(tmp_path: Path) -> Path:
    path = tmp_path / "h0.jsonl"
    with ResultsWriter(path) as w:
        w.append(RunRecord.model_validate({**RUN, "checks": ["inventory"]}))
    return path


def args(path: Path, *extra: str) -> list[str]:
    return [
        "--results",
        str(path),
        "--self",
        "h0",
        "--members",
        "h0,h1",
        "--endpoint",
        "10.0.0.1:29400",
        *extra,
    ]


def last_record(path: Path) -> multinode.CheckRecord:
    checks = read_results(path).checks
    assert checks, "no record was appended"
    return checks[-1]


def test_busbw_follows_nccl_tests() -> None:
    # 1 GB in 10 ms is 100 GB/s algbw; 4 ranks: x 2(4-1)/4 = 1.5.
    assert multinode.busbw_gbps(10**9, 0.01, 4) == pytest.approx(150.0)
    assert multinode.payload_counts(0, "quick", on_gpu=False, iters=0) == (2 * 2**20, 5)
    assert multinode.payload_counts(0, "standard", on_gpu=True, iters=0) == (256 * 2**20, 20)
    assert multinode.payload_counts(4096, "extended", on_gpu=True, iters=3) == (1024, 3)


@pytest.mark.parametrize(
    ("torch_found", "me", "members", "endpoint", "expect"),
    [
        (False, "h0", ["h0", "h1"], "a:1", "PyTorch is not installed"),
        (True, "h2", ["h0", "h1"], "a:1", "not among the nodes ready"),
        (True, "h0", ["h0"], "a:1", "only 1 node ready"),
        (True, "h0", ["h0", "h1"], "", "no rendezvous endpoint"),
        (True, "h0", ["h0", "h1"], "a:1", None),
    ],
)
def test_who_takes_part(
    torch_found: bool, me: str, members: list[str], endpoint: str, expect: str | None
) -> None:
    given = multinode.Endpoint.parse(endpoint)
    why = multinode.skip_reason(torch_found, me, members, given, "/opt/fleetforge/venv")
    assert (why is None) if expect is None else (why is not None and expect in why)


def test_torchrun_command_uses_c10d_rendezvous_and_no_restarts(tmp_path: Path) -> None:
    ns = multinode.parser().parse_args(
        args(tmp_path / "h0.jsonl", "--local-addr", "10.0.0.2", "--rdzv-id", "ff-1", "--timeout", "120")
    )
    argv = multinode.torchrun_argv(ns, nnodes=2, nproc=8)
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    for flag in (
        "--nnodes=2",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.1:29400",
        "--rdzv-id=ff-1",
        "--rdzv-conf=join_timeout=120",
        "--max-restarts=0",
        "--local-addr=10.0.0.2",
    ):
        assert flag in argv
    worker = argv[argv.index("--module") + 1 :]
    assert worker[:2] == ["validation.burnin.multinode", "--worker"]
    assert f"--results={tmp_path / 'h0.jsonl'}" in worker


def test_a_node_without_torch_records_a_skip_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = results(tmp_path)
    monkeypatch.setattr(multinode.importlib.util, "find_spec", lambda name: None)
    assert multinode.main(args(path)) == 0
    rec = last_record(path)
    assert (rec.check, rec.status, rec.run_id, rec.level) == (
        "multinode_collectives",
        "skip",
        "h0-r1",
        "quick",
    )
    assert rec.reason is not None and "PyTorch is not installed" in rec.reason


def test_one_rank_per_node_starts_the_worker_with_its_place_among_the_members(tmp_path: Path) -> None:
    ns = multinode.parser().parse_args(args(tmp_path / "h1.jsonl", "--self", "h1", "--members", "h0,h1,h2"))
    ranks = multinode.launch_command(ns, ["h0", "h1", "h2"], nproc=1)
    assert ranks.argv[:4] == [sys.executable, "-m", "validation.burnin.multinode", "--worker"]
    assert f"--results={tmp_path / 'h1.jsonl'}" in ranks.argv
    assert ranks.env == {
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29400",
        "RANK": "1",
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "3",
    }
    several = multinode.launch_command(ns, ["h0", "h1", "h2"], nproc=8)
    assert several.name == "torchrun" and several.env == {} and "--nproc-per-node=8" in several.argv


@pytest.mark.parametrize(
    ("endpoint", "expect"),
    [("10.0.0.1:29400", ("10.0.0.1", 29400)), ("[fd00::1]:29400", ("fd00::1", 29400)), ("h0:1", ("h0", 1))],
)
def test_endpoints_split_into_host_and_port(endpoint: str, expect: tuple[str, int]) -> None:
    parsed = multinode.Endpoint.parse(endpoint)
    assert parsed is not None and (parsed.host, parsed.port) == expect
    assert str(parsed) == endpoint  # as torchrun's --rdzv-endpoint takes it


@pytest.mark.parametrize("endpoint", ["10.0.0.1", "10.0.0.1:", ":29400", "10.0.0.1:http", "10.0.0.1:70000"])
def test_a_bad_endpoint_is_a_usage_error_that_records_nothing(
    tmp_path: Path, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = results(tmp_path)
    argv = args(path)
    argv[argv.index("--endpoint") + 1] = endpoint
    with pytest.raises(SystemExit) as exited:
        multinode.main(argv)
    assert exited.value.code == procutil.USAGE
    assert "argument --endpoint: must be HOST:PORT" in capsys.readouterr().err
    assert read_results(path).checks == []


def test_an_empty_endpoint_as_the_role_passes_it_is_a_skip_not_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # roles/burnin/tasks/collectives.yml gives --endpoint '' when no node is ready for the all-reduce.
    monkeypatch.setattr(multinode.importlib.util, "find_spec", lambda name: object())
    path = results(tmp_path)
    argv = args(path)
    argv[argv.index("--endpoint") + 1] = ""
    assert multinode.main(argv) == 0
    [check] = read_results(path).checks
    assert check.status == "skip" and "no rendezvous endpoint" in (check.reason or "")


def test_a_node_without_a_gpu_runs_one_rank_without_importing_pytorch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # any import of it raises
    monkeypatch.setattr(multinode, "torch_gpu_evidence", lambda: False)
    assert multinode._nproc(0) == 1
    assert multinode._nproc(4) == 4  # asked for: taken as given
    # A node showing a GPU asks PyTorch how many it can use.
    monkeypatch.setattr(multinode, "torch_gpu_evidence", lambda: True)
    with pytest.raises(ImportError):
        multinode._nproc(0)


def _pretend_torch(monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    monkeypatch.setattr(multinode.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(multinode, "_nproc", lambda asked: 1)
    monkeypatch.setattr(
        multinode, "launch_command", lambda ns, members, nproc: multinode.Ranks(command, {}, "torchrun")
    )


def test_torchrun_failing_without_a_result_is_an_error_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = results(tmp_path)
    crash = [sys.executable, "-c", "import sys; print('rendezvous refused', file=sys.stderr); sys.exit(3)"]
    _pretend_torch(monkeypatch, crash)
    assert multinode.main(args(path)) == 2
    rec = last_record(path)
    assert (
        rec.status == "error"
        and rec.reason == "torchrun exited with code 3 before this node recorded a result"
    )
    assert rec.error is not None and "rendezvous refused" in rec.error


def test_a_hung_collective_is_killed_at_the_timeout_and_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = results(tmp_path)
    # A launcher that hangs, and a rank of its that would outlive it: the rank sits in the
    # launcher's process group. Both command lines name this test's folder so they can be found.
    rank = f"[sys.executable, '-c', 'import time; time.sleep(600)', {str(tmp_path)!r}]"
    hang = [
        sys.executable,
        "-c",
        f"import subprocess, sys, time; subprocess.Popen({rank}); time.sleep(600)",
        str(tmp_path),
    ]
    _pretend_torch(monkeypatch, hang)
    t0 = time.monotonic()
    assert multinode.main(args(path, "--timeout", "1")) == 2
    # Back at the 1-s timeout, not when the rank would have ended (600 s); the bound only has to
    # tell those apart, so a machine busy with other work cannot fail it.
    assert time.monotonic() - t0 < 300
    rec = last_record(path)
    assert rec.status == "error" and rec.reason is not None
    assert rec.reason.startswith("no result within 1 s: the rendezvous at 10.0.0.1:29400")
    # Killed, not left behind (the rank is reaped by whoever inherited it, a moment later).
    deadline = time.monotonic() + 60
    while _processes_naming(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_naming(str(tmp_path)) == []


def _processes_naming(text: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue  # ended while we looked
    return found


def test_a_result_the_worker_wrote_is_kept_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = results(tmp_path)
    # Stands in for the worker: appends a pass record of this run, then exits non-zero in teardown.
    code = (
        "import sys; from pathlib import Path; from validation.burnin import multinode as m; "
        f"p = Path({str(path)!r}); run = m.latest_run(p); assert run is not None; "
        "m._append(p, m._record(run, 'pass', metrics={m.METRIC: 1.5}, backend='torch-gloo')); sys.exit(1)"
    )
    _pretend_torch(monkeypatch, [sys.executable, "-c", code])
    assert multinode.main(args(path)) == 0
    checks = read_results(path).checks
    assert [c.status for c in checks] == ["pass"]
    assert checks[0].metrics == {multinode.METRIC: 1.5}


def test_a_launcher_that_fails_itself_exits_70_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its log folder cannot be made (a file stands where it goes): any OSError of the launcher,
    # ENOSPC or EACCES. Python's own exit 1 read as "wrong sum, record written".
    path = results(tmp_path)
    (tmp_path / "h0.raw").write_text("")
    _pretend_torch(monkeypatch, [sys.executable, "-c", "raise SystemExit(0)"])
    assert multinode.main(args(path)) == multinode.LAUNCHER_FAILED == 70
    assert read_results(path).checks == []  # nothing that could be read back as a result
    err = capsys.readouterr().err
    assert "the launcher failed, nothing measured" in err and "Error" in err


def test_no_results_file_and_bad_arguments_have_their_own_exit_codes(tmp_path: Path) -> None:
    assert multinode.main(args(tmp_path / "missing.jsonl")) == multinode.NO_RESULTS
    with pytest.raises(SystemExit) as exc:
        multinode.main(["--results"])
    assert exc.value.code == procutil.USAGE == 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("nproc", "ranks"), [(1, 2), (2, 4)], ids=["worker-direct", "torchrun"])
def test_two_nodes_on_loopback_all_reduce_for_real(tmp_path: Path, nproc: int, ranks: int) -> None:
    pytest.importorskip("torch")
    endpoint = f"127.0.0.1:{_free_port()}"
    procs = {}
    for node in ("h0", "h1"):
        path = tmp_path / node / f"{node}.jsonl"
        path.parent.mkdir()
        with ResultsWriter(path) as w:
            w.append(
                RunRecord.model_validate(
                    {**RUN, "node": node, "run_id": f"{node}-r1", "checks": ["inventory"]}
                )
            )
        argv = [sys.executable, "-m", "validation.burnin.multinode", "--results", str(path), "--self", node]
        argv += ["--members", "h0,h1", "--endpoint", endpoint, "--local-addr", "127.0.0.1", "--rdzv-id", "t"]
        argv += ["--nproc", str(nproc), "--bytes", "65536", "--iters", "2", "--timeout", "120"]
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
        procs[node] = (
            path,
            subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT),
        )
    figures = set()
    for node, (path, proc) in procs.items():
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
        (rec,) = read_results(path).checks
        assert (rec.node, rec.status, rec.backend) == (node, "pass", "torch-gloo"), rec
        assert f"2 nodes, {ranks} ranks" in rec.findings[0]
        figures.add(rec.metrics[multinode.METRIC])
    # Every node records the slowest rank's figure of the one collective.
    assert len(figures) == 1 and figures.pop() > 0

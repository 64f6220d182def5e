"""Hostile input to `fleetforge burnin` (the node side): a second run on a live results file, an
output folder that is read-only or full, node names that try to leave the output folder or carry
control characters and Jinja, results files that try to forge terminal lines, and a GPU node
whose NVML fails. Each case asserts the exact exit code and what was (not) created.

Read-only and full folders are real tmpfs mounts (the tests run as root, which ignores mode
bits); where mounting is not allowed they are skipped and the injected-fault cases still run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import validation.burnin.skuselect
from fleet.results import ResultsWriter, read_results
from fleetforge import exitcodes
from tests.hostile.conftest import Canary, tree
from validation.burnin.runner import RunError, check_node_name

ROOT = Path(__file__).resolve().parents[2]
CHEAP = ["--sku", "cpu", "--level", "quick", "--only", "inventory"]


def one_line(text: str) -> bool:
    return len(text.strip().splitlines()) == 1


# -- one writer per node file ---------------------------------------------------------------


@pytest.fixture
def live_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A real `fleetforge burnin` in another process, mid-check (stress runs for seconds)."""
    out = tmp_path_factory.mktemp("live")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from fleetforge.cli import main; sys.exit(main(sys.argv[1:]))",
            "burnin",
            *["--sku", "cpu", "--level", "quick", "--only", "stress", "--out", str(out), "--node", "n1"],
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        path = out / "n1.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if path.exists() and path.read_text().count("\n") >= 1:  # its run record is down
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1]
        yield proc, out
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


@pytest.mark.parametrize("resume", [False, True], ids=["new-run", "resume"])
def test_a_second_burnin_on_a_live_results_file_exits_at_once(
    cli: Callable[..., Any], live_run: tuple[subprocess.Popen[str], Path], resume: bool
) -> None:
    proc, out = live_run
    path = out / "n1.jsonl"
    before = path.read_bytes()
    # Stopped mid-check, the live run cannot finish: a second run that returns was refused, not
    # queued behind it, however slowly this machine runs it. Should it queue, the live run resumes
    # after a while, and the second finds the file free and runs (caught below).
    proc.send_signal(signal.SIGSTOP)
    guard = threading.Timer(120, proc.send_signal, (signal.SIGCONT,))
    guard.start()
    try:
        argv = ["--sku", "cpu", "--level", "quick", "--only", "stress"] + (["--resume"] if resume else [])
        got = cli("burnin", *argv, "--out", out, "--node", "n1")
        assert got.code == exitcodes.CANT_CREATE, got.err
        assert (
            f"{path}: another burn-in (pid {proc.pid} on {socket.gethostname()}) is writing it" in got.err
            and one_line(got.err)
        )
        assert proc.poll() is None, "the first run must be untouched"
        # Not moved to .prev, not trimmed, not appended to.
        assert path.read_bytes() == before and not (out / "n1.jsonl.prev").exists()
    finally:
        guard.cancel()
        proc.send_signal(signal.SIGCONT)


# -- read-only and full output folders --------------------------------------------------------


@pytest.fixture
def mount_tmpfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Path]]:
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        where = tmp_path_factory.mktemp("mnt")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_read_only_out_is_cant_create_and_keeps_the_old_results(
    cli: Callable[..., Any], mount_tmpfs: Callable[..., Path]
) -> None:
    out = mount_tmpfs("size=1m,mode=0755")
    (out / "n1.jsonl").write_text('{"earlier": "results"}\n')
    subprocess.run(["mount", "-o", "remount,ro", str(out)], check=True)
    before = tree(out)
    for extra in ([], ["--resume"]):
        got = cli("burnin", *CHEAP, *extra, "--out", out, "--node", "n1")
        assert got.code == exitcodes.CANT_CREATE != exitcodes.REJECTED
        assert "Read-only file system" in got.err and one_line(got.err)
    got = cli("burnin", *CHEAP, "--out", out / "sub", "--node", "n1")
    assert got.code == exitcodes.CANT_CREATE and f"--out {out / 'sub'}: cannot create it" in got.err
    assert tree(out) == before and (out / "n1.jsonl").read_text() == '{"earlier": "results"}\n'


def test_a_full_out_is_an_io_error(cli: Callable[..., Any], mount_tmpfs: Callable[..., Path]) -> None:
    out = mount_tmpfs("size=64k")
    with (out / "filler").open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass  # the disk is full
    got = cli("burnin", *CHEAP, "--out", out / "results", "--node", "n1")
    assert got.code == exitcodes.IO_ERROR != exitcodes.REJECTED
    assert "No space left on device" in got.err and "--resume" in got.err and one_line(got.err)


def test_a_disk_that_fills_mid_run_keeps_every_fsynced_record(
    cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_append = ResultsWriter.append
    appended: list[str] = []

    def fills_up(self: ResultsWriter, record: Any) -> None:
        if len(appended) == 2:  # the run record and inventory's record are down
            raise OSError(28, "No space left on device")
        real_append(self, record)
        appended.append(record.kind)

    monkeypatch.setattr(ResultsWriter, "append", fills_up)
    only = ["--sku", "cpu", "--level", "quick", "--only", "inventory,health,fabric"]
    got = cli("burnin", *only, "--out", tmp_path / "out", "--node", "n1")
    assert got.code == exitcodes.IO_ERROR
    assert "writing the check health record failed (No space left on device)" in got.err
    kept = read_results(tmp_path / "out" / "n1.jsonl")
    assert [c.check for c in kept.checks] == ["inventory"] and len(kept.runs) == 1 and not kept.bad_lines


# -- entries planted in the output folder -------------------------------------------------------


def _plant(kind: str, out: Path, outside: Path) -> Path:
    """Put a hostile entry where the burn-in writes; returns the file it must never touch."""
    out.mkdir(parents=True, exist_ok=True)
    victim = outside / "victim"
    victim.write_text("precious\n")
    if kind == "results-link":
        (out / "n1.jsonl").symlink_to(victim)
    elif kind == "dangling-results-link":
        victim.unlink()
        (out / "n1.jsonl").symlink_to(victim)
    elif kind == "lock-link":
        (out / "n1.jsonl.lock").symlink_to(victim)
    elif kind == "prev-link":
        (out / "n1.jsonl").write_text("{}\n")
        (out / "n1.jsonl.prev").symlink_to(victim)
    elif kind == "raw-link":
        (out / "n1.raw").symlink_to(outside)
    elif kind == "results-fifo":
        os.mkfifo(out / "n1.jsonl")
    elif kind == "lock-fifo":
        os.mkfifo(out / "n1.jsonl.lock")
    elif kind == "results-dir":
        (out / "n1.jsonl").mkdir()
    return victim


PLANTED = [
    "results-link",
    "dangling-results-link",
    "lock-link",
    "prev-link",
    "raw-link",
    "results-fifo",
    "lock-fifo",
    "results-dir",
]


@pytest.mark.parametrize("resume", [False, True], ids=["new-run", "resume"])
@pytest.mark.parametrize("kind", PLANTED)
def test_planted_links_and_special_files_in_out_are_refused(
    cli: Callable[..., Any], tmp_path: Path, kind: str, resume: bool
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = _plant(kind, tmp_path / "out", outside)
    before_out, before_outside = tree(tmp_path / "out"), tree(outside)
    before_victim = victim.read_bytes() if victim.exists() else None
    got = cli("burnin", *CHEAP, *(["--resume"] if resume else []), "--out", tmp_path / "out", "--node", "n1")
    assert got.code == exitcodes.CANT_CREATE and one_line(got.err)
    assert "move it away" in got.err
    # Nothing written through the link, nothing created or truncated outside --out.
    assert tree(outside) == before_outside
    assert (victim.read_bytes() if victim.exists() else None) == before_victim
    assert tree(tmp_path / "out") - before_out <= {"n1.jsonl.lock"}


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_links_planted_in_the_raw_folder_are_never_written_through(
    cli: Callable[..., Any], tmp_path: Path, link: str
) -> None:
    """The check's log and its raw output are refused where an entry points elsewhere: the check is
    an error (never a pass), and the file pointed at keeps its bytes."""
    outside = tmp_path / "outside"
    outside.mkdir()
    raw = tmp_path / "out" / "n1.raw"
    raw.mkdir(parents=True)
    victims = {name: outside / name for name in ("log", "json")}
    for name, victim in victims.items():
        victim.write_text(f"precious {name}\n")
        planted = raw / f"inventory.{name}"
        planted.symlink_to(victim) if link == "symbolic" else os.link(victim, planted)
    got = cli("burnin", *CHEAP, "--out", tmp_path / "out", "--node", "n1")
    assert got.code != exitcodes.OK
    (record,) = read_results(tmp_path / "out" / "n1.jsonl").checks
    assert record.check == "inventory" and record.status == "error", record
    refusal = "a symbolic link; refused" if link == "symbolic" else "not a regular file of its own; refused"
    assert refusal in (record.error or ""), record.error
    for name, victim in victims.items():
        assert victim.read_text() == f"precious {name}\n"


# -- node names -------------------------------------------------------------------------------

HOSTILE_NODES = [
    "../../etc/x",
    "../x",
    "a/b",
    "/etc/passwd",
    ".",
    "..",
    ".hidden",
    "-rf",
    "",
    "n1\n",
    "n1\nforged: pass",
    "n1\r",
    "n1\x00",
    "n1\x1b[31m",
    "n1\u202e",
    "[bold]n1[/bold]",
    "n1 n2",
    "ü",
    "a" * 245,
]


@pytest.mark.parametrize("node", HOSTILE_NODES)
def test_hostile_node_names_are_refused_and_create_nothing(
    cli: Callable[..., Any], tmp_path: Path, node: str
) -> None:
    got = cli("burnin", *CHEAP, "--out", tmp_path / "out", f"--node={node}")
    assert got.code == exitcodes.USAGE
    assert "a node name is 1 to 244 letters" in got.err and one_line(got.err)
    assert "\x1b" not in got.err
    assert tree(tmp_path) == set()  # not even the output folder
    assert not (tmp_path.parent.parent / "etc" / "x.jsonl").exists()


def test_a_jinja_node_name_is_refused_and_never_rendered(
    cli: Callable[..., Any], tmp_path: Path, canary: Canary
) -> None:
    for node in (canary.pipe, canary.block):
        got = cli("burnin", *CHEAP, "--out", tmp_path / "out", "--node", node)
        assert got.code == exitcodes.USAGE and tree(tmp_path) == set()


@given(st.text(max_size=300))
@example("n1\n")  # `$` in a regex matches before a final newline
@example("a" * 245)
@example("a" * 244)
def test_any_accepted_node_name_names_a_file_inside_out(node: str) -> None:
    out = Path("/srv/results")
    try:
        check_node_name(node)
    except RunError:
        return
    for suffix in (".jsonl", ".jsonl.prev", ".jsonl.lock", ".raw"):
        name = node + suffix
        assert len(name.encode()) <= 255 and name.isprintable() and "/" not in name
        assert (out / name).resolve().parent == out
    assert node[0].isalnum() and node.isascii()


# -- results files that try to forge terminal output ------------------------------------------


def _forged_results(path: Path, *, planned: list[str], checks: list[str]) -> None:
    base = {"schema": "fleetforge.result/1", "node": "n1", "sku": "cpu", "level": "quick"}
    run_id = "r1\x1b]0;owned\x07"
    lines: list[dict[str, Any]] = [
        {**base, "kind": "run", "run_id": run_id, "started": "2026-12-01T00:00:00Z", "checks": planned}
    ]
    for name in checks:
        lines.append(
            {
                **base,
                "kind": "check",
                "run_id": run_id,
                "started": "2026-12-01T00:00:01Z",
                "check": name,
                "status": "pass",
                "metrics": {"x": 1.0},
                "duration_s": 0.1,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_a_resumed_file_cannot_forge_terminal_lines(cli: Callable[..., Any], tmp_path: Path) -> None:
    # A real run's file, its run_id (printed when the run resumes) rewritten: a resume keeps only
    # records of its own node, SKU, level and settings, so the file must be a real one.
    evil = "x\x1b[2J\x1b]0;owned\x07\nn2.jsonl: ok - 9 pass\u202e"
    path = tmp_path / "out" / "n1.jsonl"
    assert cli("burnin", *CHEAP, "--out", tmp_path / "out", "--node", "n1").code == exitcodes.OK
    records = [{**json.loads(line), "run_id": evil} for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    got = cli("burnin", *CHEAP, "--resume", "--out", tmp_path / "out", "--node", "n1")
    assert got.code == exitcodes.OK, got.err
    printed = got.out + got.err
    assert "1 kept from the earlier attempt" in printed
    assert "\x1b" not in printed and "\u202e" not in printed and "\x07" not in printed
    assert not any(line.startswith("n2.jsonl") for line in printed.splitlines())
    assert "x\\x1b[2J\\x1b]0;owned\\x07\\nn2.jsonl: ok - 9 pass\\u202e" in printed  # shown, escaped


def test_a_resumed_run_naming_an_unknown_check_is_usage_and_escaped(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    path = tmp_path / "out" / "n1.jsonl"
    _forged_results(path, planned=["inventory", "gpu\x1b[31m\nforged"], checks=["inventory"])
    got = cli("burnin", *CHEAP[:4], "--resume", "--out", tmp_path / "out", "--node", "n1")
    assert got.code == exitcodes.USAGE and "unknown check" in got.err
    assert "\x1b" not in got.err and one_line(got.err)


# -- --sku auto on a GPU node whose NVML fails --------------------------------------------------


@pytest.fixture
def gpu_node(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point SKU detection at a fake sysfs with one NVIDIA 3D controller and a /dev/nvidia0."""
    root = tmp_path_factory.mktemp("node")
    function = root / "sys/bus/pci/devices/0000:1b:00.0"
    function.mkdir(parents=True)
    (function / "vendor").write_text("0x10de\n")
    (function / "class").write_text("0x030200\n")
    (root / "dev").mkdir()
    (root / "dev/nvidia0").write_text("")
    monkeypatch.setattr(validation.burnin.skuselect, "SYSFS_ROOT", root / "sys")
    monkeypatch.setattr(validation.burnin.skuselect, "DEV_ROOT", root / "dev")
    return root


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("driver", "NVML cannot start: Driver Not Loaded"),
        ("library", "NVML cannot start: NVML Shared Library Not Found"),
        ("no-pynvml", "pynvml is not installed"),
    ],
)
def test_a_gpu_node_whose_nvml_fails_is_never_burned_in_as_cpu(
    cli: Callable[..., Any],
    tmp_path: Path,
    gpu_node: Path,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
    cause: str,
) -> None:
    if fault == "no-pynvml":
        monkeypatch.setitem(sys.modules, "pynvml", None)
    else:
        code = {"driver": pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "library": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND}
        error = pynvml.NVMLError(code[fault])  # the real module's real exception class

        def init() -> None:
            raise error

        monkeypatch.setattr(pynvml, "nvmlInit", init)
    got = cli("burnin", "--sku", "auto", "--level", "quick", "--out", tmp_path / "out", "--node", "n1")
    assert got.code == exitcodes.UNAVAILABLE
    assert "PCI device 0000:1b:00.0 is an NVIDIA GPU" in got.err and cause in got.err and one_line(got.err)
    assert tree(tmp_path) == set()  # no cpu run, not even an output folder


def test_without_gpu_evidence_auto_is_still_cpu(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("cpu-node")
    os.makedirs(root / "sys/bus/pci/devices")
    os.makedirs(root / "dev")
    assert validation.burnin.skuselect.detect_sku(root / "sys", root / "dev").sku == "cpu"

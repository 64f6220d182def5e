"""Sequential storage throughput on a path: fio when installed, else Python with fsync.

Both write data no storage can shrink: random (compression gains nothing) and distinct in every
4 KiB sector (deduplication finds no two alike). fio refills its buffers with fresh random data
for every block; the Python path writes a few random blocks in turn and stamps each sector with
its own number, which costs far less than fresh random data per block. Both flush to the device
before the clock stops, and read back without the page cache: fio with O_DIRECT, Python with
O_DIRECT where the file system allows it and POSIX_FADV_DONTNEED otherwise. The Python path
also compares what it reads with what it wrote.
"""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from validation.burnin.probes import scratch

Raw = dict[str, Any]
_ROTATE = 8  # random blocks written in turn, each stamped per sector
# Deduplicating storage (VDO, ZFS dedup, array controllers) matches chunks of 4 KiB or more:
# a stamp per 4 KiB sector makes every chunk of the file unique at any of those sizes.
_SECTOR = 4096
_HEADROOM = 256 * 2**20


def measure(
    path: Path,
    nbytes: int,
    block: int,
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
    prefer_fio: bool = True,
) -> Raw:
    path = Path(path)
    if not path.is_dir():
        raise NotADirectoryError(f"storage path {path} is not a directory")
    scratch.sweep_storage(path)  # before the free space is read: an old test file is not data
    free = shutil.disk_usage(path).free
    if free < nbytes + _HEADROOM:
        raise OSError(
            f"storage path {path}: {free / 2**20:.0f} MiB free, the check needs {(nbytes + _HEADROOM) / 2**20:.0f}"
        )
    nbytes = max(block, nbytes - nbytes % block)
    fio = shutil.which("fio") if prefer_fio else None
    if fio:
        return _fio(fio, path, nbytes, block, run)
    return _python(path, nbytes, block)


def _fio(fio: str, path: Path, nbytes: int, block: int, run: Callable[..., Any]) -> Raw:
    target = scratch.storage_file(path, ".fio")
    common = [
        fio, f"--filename={target}", f"--size={nbytes}", f"--bs={block}", "--ioengine=psync",
        "--direct=1", "--numjobs=1", "--output-format=json", "--refill_buffers",
    ]  # fmt: skip
    try:
        write = run(
            [*common, "--name=seqwrite", "--rw=write", "--end_fsync=1"],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        read = run(
            [*common, "--name=seqread", "--rw=read"],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
    finally:
        target.unlink(missing_ok=True)
    return {
        "method": "fio",
        "path": str(path),
        "bytes": nbytes,
        "block": block,
        "write": {"rc": write.returncode, "output": write.stdout, "stderr": write.stderr[-2000:]},
        "read": {"rc": read.returncode, "output": read.stdout, "stderr": read.stderr[-2000:]},
    }


def stamped(blocks: list[np.ndarray[Any, Any]], index: int) -> np.ndarray[Any, Any]:
    """Block `index` of the file: the random block of its turn with `index` and the sector number
    written into the first 8 bytes of each 4 KiB sector (in place: the next use re-stamps it)."""
    base = blocks[index % len(blocks)]
    usable = len(base) - len(base) % 8
    if usable:
        words = base[:usable].view(np.uint64)[:: _SECTOR // 8]
        words[:] = (np.uint64(index) << np.uint64(24)) + np.arange(1, len(words) + 1, dtype=np.uint64)
    return base


def _python(path: Path, nbytes: int, block: int) -> Raw:
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    blocks = [rng.integers(0, 256, block, dtype=np.uint8) for _ in range(_ROTATE)]
    target = scratch.storage_file(path, ".bin")
    count = nbytes // block
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            t0 = time.perf_counter()
            for i in range(count):
                os.write(fd, stamped(blocks, i).data)
            os.fsync(fd)
            write_s = time.perf_counter() - t0
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        read_s, mismatches, read_method = _read_back(target, count, block, blocks)
    finally:
        target.unlink(missing_ok=True)
    return {
        "method": f"python-{read_method}",
        "path": str(path),
        "bytes": count * block,
        "block": block,
        "write_s": write_s,
        "read_s": read_s,
        "mismatched_blocks": mismatches,
    }


def _read_back(
    target: Path, count: int, block: int, blocks: list[np.ndarray[Any, Any]]
) -> tuple[float, int, str]:
    """Time a sequential read that bypasses the page cache; count blocks that differ."""
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT requires
    view = memoryview(buf)
    try:
        try:
            fd = os.open(target, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
            method = "odirect"
        except OSError:  # tmpfs and some network file systems refuse O_DIRECT
            fd = os.open(target, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            method = "fadvise"
        mismatches = 0
        read_s = 0.0  # the reads alone: comparing each block is not the storage's time
        try:
            for i in range(count):
                t0 = time.perf_counter()
                try:
                    got = os.readv(fd, [view])
                except OSError:
                    if method != "odirect" or i:
                        raise
                    # Some file systems accept O_DIRECT at open and refuse it on read.
                    os.close(fd)
                    fd = os.open(target, os.O_RDONLY)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    method = "fadvise"
                    t0 = time.perf_counter()
                    got = os.readv(fd, [view])
                read_s += time.perf_counter() - t0
                if got != block or not np.array_equal(np.frombuffer(buf, dtype=np.uint8), stamped(blocks, i)):
                    mismatches += 1
        finally:
            os.close(fd)
    finally:
        view.release()
        buf.close()
    return read_s, mismatches, method

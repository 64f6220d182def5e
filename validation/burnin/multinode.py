"""All-reduce across nodes: one torchrun world over the fleet, its result appended to each node's results.

The burnin role runs this on every node at once, after every node's burn-in
(roles/burnin/tasks/collectives.yml):

    python -m validation.burnin.multinode --results R --self NODE --members a,b,c --endpoint HOST:PORT ...

The launcher (this module's main) decides whether the node takes part (PyTorch importable, at least
two members, this node among them) and starts the ranks in their own process group, kills the group
when the timeout passes, and makes sure the node's results end up with a record of the check: the
measurement the worker appended, or a skip or an error written here with the reason (fail closed: a
hang or a crash is never a pass).

How the ranks start depends on how many a node runs. Several (one per GPU): `python -m
torch.distributed.run` with a c10d rendezvous on the endpoint, which assigns the ranks. One (a CPU
node, a one-GPU node): the worker directly, rank = the node's place in --members, with PyTorch's
env:// initialisation on a TCP store that rank 0 (the first member, the endpoint's host) serves.
Skipping torchrun's agent there halves what a pair costs the CPU (measured on a 2-core machine:
7.1 CPU-s for a two-node pair through torchrun, 3.8 started directly) and changes nothing the
worker measures; the endpoint's port is the pair's or the fleet's own, so no other world joins it.

The worker (`--worker`, one per rank) uses gloo on CPU nodes and NCCL on GPU nodes; it times each
iteration between barriers, keeps the slowest rank's time per iteration (the collective is done
when the last rank is), checks the sum exactly (every rank starts from small integers, so float32
sums are exact), and local rank 0 of each node appends the record.

busbw = algbw x 2(n-1)/n, n the world size, as nccl-tests reports all_reduce.

Exit codes: 0 measured (or skipped, with the reason), 1 measured a wrong sum, 2 could not measure
(the record says why), 3 the node has no burn-in results to append to, 64 bad arguments, 70 the
launcher itself failed (an unexpected exception: no record of this run is promised, so nothing may
be read back as its result; Python's own exit 1 for an uncaught exception would read as "wrong sum,
record written").
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from fleet.metrics import MULTINODE_LAUNCHER_FAILED, MULTINODE_NO_TORCH
from fleet.results import CheckRecord, ResultsWriter, RunRecord, instant, read_results, utc_now
from validation.burnin.probes.allreduce_cpu import bus_factor
from validation.burnin.probes.pci import torch_gpu_evidence
from validation.burnin.procutil import UsageExitParser

CHECK = "multinode_collectives"
METRIC = "multinode_allreduce_busbw_gbps"
_WARMUP = 2
# Payload and iterations per level: (CPU bytes, GPU bytes, iterations).
LEVEL_DEFAULTS: dict[str, tuple[int, int, int]] = {
    "quick": (8 * 2**20, 256 * 2**20, 5),
    "standard": (32 * 2**20, 1024 * 2**20, 20),
    "extended": (64 * 2**20, 4096 * 2**20, 50),
}
EXIT = {"pass": 0, "skip": 0, "fail": 1, "error": 2}
NO_RESULTS = 3
LAUNCHER_FAILED = MULTINODE_LAUNCHER_FAILED
NO_TORCH_SKIP = MULTINODE_NO_TORCH


def parser() -> argparse.ArgumentParser:
    p = UsageExitParser(prog="python -m validation.burnin.multinode", description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, required=True, help="this node's <node>.jsonl")
    p.add_argument("--self", dest="me", default="", help="this node's inventory name")
    p.add_argument("--members", default="", help="comma-separated inventory names of the nodes that join")
    p.add_argument(
        "--endpoint",
        type=Endpoint.parse,
        default=None,
        help="HOST:PORT where the first member serves the rendezvous",
    )
    p.add_argument("--local-addr", default="", help="address other nodes reach this node at")
    p.add_argument("--rdzv-id", default="fleetforge-burnin")
    p.add_argument("--nproc", type=int, default=0, help="processes per node; 0: one per GPU, else one")
    p.add_argument("--bytes", dest="nbytes", type=int, default=0, help="payload; 0: the level's default")
    p.add_argument("--iters", type=int, default=0, help="timed iterations; 0: the level's default")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for rendezvous and measurement")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.worker:
        return worker(args)
    try:
        return launch(args)
    except Exception as exc:  # any failure of the launcher is "not measured", never exit 1
        traceback.print_exc(file=sys.stderr)
        print(f"{CHECK}: the launcher failed, nothing measured: {type(exc).__name__}: {exc}", file=sys.stderr)
        return LAUNCHER_FAILED


# ---------------------------------------------------------------------- launcher


def launch(args: argparse.Namespace) -> int:
    run = latest_run(args.results)
    if run is None:
        print(f"{args.results}: no burn-in run record to append the all-reduce to", file=sys.stderr)
        return NO_RESULTS
    members = [m for m in args.members.split(",") if m]
    why_not = skip_reason(
        torch_found=importlib.util.find_spec("torch") is not None,
        me=args.me,
        members=members,
        endpoint=args.endpoint,
        prefix=sys.prefix,
    )
    if why_not is not None:
        _append(args.results, _record(run, "skip", reason=why_not))
        print(f"{CHECK}: skip: {why_not}")
        return EXIT["skip"]
    started = time.time()
    log = args.results.parent / f"{run.node}.raw" / f"{CHECK}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    ranks = launch_command(args, members, _nproc(args.nproc))
    code, timed_out = _run_group(ranks, log, args.timeout)
    ours = _record_since(args.results, run, started)
    if ours is not None:
        print(f"{CHECK}: {ours.status}")
        return EXIT[ours.status]
    if timed_out:
        why = (
            f"no result within {args.timeout:g} s: the rendezvous at {args.endpoint} or the all-reduce "
            f"across {len(members)} nodes ({', '.join(members)}) did not finish"
        )
    else:
        why = f"{ranks.name} exited with code {code} before this node recorded a result"
    tail = _tail(log)
    error = f"{why}{'; log tail: ' + tail if tail else ''}"
    _append(args.results, _record(run, "error", reason=why[:500], error=error))
    print(f"{CHECK}: error: {error}", file=sys.stderr)
    return EXIT["error"]


def skip_reason(
    torch_found: bool, me: str, members: Sequence[str], endpoint: Endpoint | None, prefix: str
) -> str | None:
    """Why this node does not take part, or None when it does."""
    if not torch_found:
        return (
            f"{NO_TORCH_SKIP} on this node ({prefix}): the "
            f"all-reduce across nodes was not measured; add it to the bundle with --extra-package torch==<version>"
        )
    if me not in members:
        return f"this node ({me}) is not among the nodes ready for the all-reduce ({', '.join(members) or 'none'})"
    if len(members) < 2:
        return f"only {len(members)} node ready for the all-reduce across nodes ({', '.join(members)}): nothing to measure across"
    if endpoint is None:
        return "no rendezvous endpoint was given"
    return None


@dataclass(frozen=True)
class Ranks:
    """What starts this node's ranks: the command, the variables it adds, and its name in errors."""

    argv: list[str]
    env: dict[str, str]
    name: str


def launch_command(args: argparse.Namespace, members: Sequence[str], nproc: int) -> Ranks:
    """torchrun for several ranks on this node, the worker itself for one (the module's docstring)."""
    if nproc > 1:
        return Ranks(torchrun_argv(args, len(members), nproc), {}, "torchrun")
    rank = list(members).index(args.me)
    env = {
        "MASTER_ADDR": args.endpoint.host,
        "MASTER_PORT": str(args.endpoint.port),
        "RANK": str(rank),
        "WORLD_SIZE": str(len(members)),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(rank),
        "GROUP_WORLD_SIZE": str(len(members)),
    }
    return Ranks(
        [sys.executable, "-m", "validation.burnin.multinode", "--worker", *_worker_args(args)],
        env,
        "the all-reduce worker",
    )


@dataclass(frozen=True)
class Endpoint:
    """The rendezvous's HOST:PORT, split once where the command line is parsed."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Endpoint | None:
        """HOST:PORT or [V6]:PORT; None for '' (the role passes it when no node is ready: a skip
        that says so); argparse's usage error (exit 64) naming the value otherwise."""
        if not text:
            return None
        host, sep, port = text.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"must be HOST:PORT, got {text!r}")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _worker_args(args: argparse.Namespace) -> list[str]:
    return [
        f"--results={args.results}",
        f"--timeout={args.timeout:g}",
        f"--bytes={args.nbytes}",
        f"--iters={args.iters}",
    ]


def torchrun_argv(args: argparse.Namespace, nnodes: int, nproc: int) -> list[str]:
    """`python -m torch.distributed.run` with a c10d rendezvous, no restarts, this module as the worker."""
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={args.endpoint}",
        f"--rdzv-id={args.rdzv_id}",
        f"--rdzv-conf=join_timeout={max(1, int(args.timeout))}",
        "--max-restarts=0",
    ]
    if args.local_addr:
        argv.append(f"--local-addr={args.local_addr}")
    return [*argv, "--module", "validation.burnin.multinode", "--worker", *_worker_args(args)]


def _nproc(asked: int) -> int:
    if asked > 0:
        return asked
    # A node without a GPU runs one rank: importing PyTorch only to hear that costs the launcher
    # 1.7 CPU-s per node and round (the worker imports it anyway).
    if not torch_gpu_evidence():
        return 1
    import torch

    return max(1, torch.cuda.device_count()) if torch.cuda.is_available() else 1


def _run_group(ranks: Ranks, log: Path, timeout: float) -> tuple[int, bool]:
    """Run the ranks in their own process group; on timeout kill the group (every rank with it)."""
    env = {**os.environ, **ranks.env}
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            ranks.argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, start_new_session=True, env=env
        )
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            _kill(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _kill(proc, signal.SIGKILL)
                proc.wait()
            return proc.returncode, True


def _kill(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _tail(log: Path, limit: int = 600) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " ".join(text.split())[-limit:]


# ---------------------------------------------------------------------- records


def latest_run(path: Path) -> RunRecord | None:
    if not path.is_file():
        return None
    runs = read_results(path).runs
    return runs[-1] if runs else None


def _record(run: RunRecord, status: str, **fields: Any) -> CheckRecord:
    return CheckRecord.model_validate(
        {
            "run_id": run.run_id,
            "node": run.node,
            "sku": run.sku,
            "level": run.level,
            "check": CHECK,
            "started": fields.pop("started", utc_now()),
            "duration_s": fields.pop("duration_s", 0.0),
            "status": status,
            **fields,
        }
    )


def _append(path: Path, record: CheckRecord) -> None:
    with ResultsWriter(path) as writer:
        writer.append(record)


def _record_since(path: Path, run: RunRecord, since: float) -> CheckRecord | None:
    """This check's record of this run written after `since` (the worker's), if any."""
    found = None
    for rec in read_results(path).checks:
        if rec.check == CHECK and rec.run_id == run.run_id and instant(rec.started).timestamp() >= since - 1:
            found = rec
    return found


# ---------------------------------------------------------------------- worker (one per rank)


def payload_counts(nbytes: int, level: str, on_gpu: bool, iters: int) -> tuple[int, int]:
    """(float32 elements, timed iterations) for a level, with explicit overrides."""
    cpu_bytes, gpu_bytes, level_iters = LEVEL_DEFAULTS.get(level, LEVEL_DEFAULTS["standard"])
    size = nbytes or (gpu_bytes if on_gpu else cpu_bytes)
    return max(1, size // 4), iters or level_iters


def busbw_gbps(nbytes: int, seconds: float, world: int) -> float:
    """nccl-tests all_reduce bus bandwidth in GB/s."""
    return nbytes / seconds / 1e9 * bus_factor(world)


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    t_start, started = time.perf_counter(), utc_now()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", "0")) or None
    run = latest_run(args.results)
    level = run.level if run is not None else "standard"
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
        backend = "gloo"
    count, iters = payload_counts(args.nbytes, level, on_gpu, args.iters)
    dist.init_process_group(backend, timeout=timedelta(seconds=max(30.0, args.timeout)))
    try:

        def sync() -> None:
            if on_gpu:
                torch.cuda.synchronize(device)

        def barrier() -> None:
            if on_gpu:
                dist.barrier(device_ids=[local_rank])
            else:
                dist.barrier()

        base = (torch.arange(count, device=device) % 17).to(torch.float32)
        source = base + float(rank)
        tensor = torch.empty_like(source)
        times: list[float] = []
        for it in range(_WARMUP + iters):
            tensor.copy_(source)
            sync()
            barrier()
            t0 = time.perf_counter()
            dist.all_reduce(tensor)
            sync()
            if it >= _WARMUP:
                times.append(time.perf_counter() - t0)
        expected = base * world + float(world * (world - 1) // 2)
        wrong = 0.0 if bool(torch.equal(tensor, expected)) else 1.0
        # The slowest rank per iteration, and whether any rank saw a wrong sum.
        summary = torch.tensor([*times, wrong], dtype=torch.float64, device=device)
        dist.all_reduce(summary, op=dist.ReduceOp.MAX)
        per_iter = [float(t) for t in summary[:-1].tolist()]
        any_wrong = float(summary[-1].item()) > 0
    finally:
        dist.destroy_process_group()
    if local_rank != 0 or run is None:
        return 0
    per_iter.sort()
    t = per_iter[len(per_iter) // 2]
    nbytes = count * 4
    impl = f"torch-{backend}"
    busbw = busbw_gbps(nbytes, t, world)
    note = (
        f"{impl}: {nodes or '?'} nodes, {world} ranks, {nbytes / 2**20:.0f} MiB, median of {iters} iterations "
        f"{t * 1e3:.2f} ms, algbw {nbytes / t / 1e9:.3g} GB/s, busbw {busbw:.3g} GB/s"
    )
    # Spelled as the GPU backend spells them, so a node's records agree with each other.
    versions = {"torch": str(torch.__version__)}
    if on_gpu and hasattr(torch.cuda, "nccl"):
        versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    status = "fail" if any_wrong else "pass"
    _append(
        args.results,
        _record(
            run,
            status,
            started=started,
            duration_s=round(time.perf_counter() - t_start, 3),
            metrics={METRIC: busbw},
            findings=[note]
            + (["all-reduce result is wrong on at least one rank (data corruption)"] if any_wrong else []),
            reason="all-reduce result is wrong on at least one rank (data corruption)" if any_wrong else None,
            backend=impl,
            versions=versions,
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

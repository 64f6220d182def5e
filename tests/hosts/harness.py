"""Local test hosts without Docker: one network namespace + sshd in its own Debian chroot per host.

    with TestHosts(2) as hosts:
        hosts.ssh(hosts[0], "uname -a")
        inventory = hosts.write_inventory(tmp_path / "inventory.yml", groups={"gpu_nodes": ["h0"]})
        with hosts.cpu_limit(hosts[1], 0.25):
            ...                      # h1 runs at a quarter of one CPU
        hosts.stop(hosts[1])         # h1 is now unreachable
        hosts.reset(hosts[1])        # h1 as start() left it: fresh root, same address and keys

Each host's root is an overlay of the cached root (rootfs.py, extracted once, never written) with
an upper layer of its own, so a host starts or resets without copying anything and its writes stay
its own; a network namespace joined to a
per-instance bridge by a veth pair, an address on a private /24 picked per instance, and an sshd
that is PID 1 of its own PID and mount namespaces (so killing it takes every process of the host
with it, and its /proc, /sys, /dev mounts vanish with the namespace). The whole process tree runs in
a cgroup v1 cpu group from its first instruction, so `cpu_limit` throttles everything on the host.

Hosts that measure (all but `background=True` ones) take turns with every other test process on
this machine: a burn-in (MEASURING_COMMAND) waits, stopped, while another host measures, so test
processes can run fleet runs side by side; `measuring_turn()` gives a test that burns this machine
itself in the same turn. `take_turns=False` opts out (a benchmark timing hosts side by side).

The hosts' Python caches the bytecode of the modules Ansible sends as zips, which Python itself
never caches (zipimport_bytecode.py): a trivial task costs this machine about a fifth less CPU.

The hosts have no default route: the only addresses anything can reach are each other's and the
bridge's. /proc/sys and /sys are read-only inside: the hosts share the test machine's kernel and
must not change it.

Every resource is named `fft<instance>...`, where <instance> is the owning pid in base 36, and is
recorded in a state file; teardown runs from `close()` (context manager exit, pytest finalizer) and
atexit, and a sweeper removes whatever an instance whose process has died left behind.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import fcntl
import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.hosts import rootfs

PREFIX = "fft"
STATE_ROOT = Path(os.environ.get("FLEETFORGE_TESTHOSTS_STATE", "/run/fleetforge-testhosts"))
ROOTS_DIR = Path(os.environ.get("FLEETFORGE_TESTHOSTS_ROOTS", "/var/tmp/fleetforge-testhosts"))
CGROUP_CPU = Path("/sys/fs/cgroup/cpu")
CGROUP_DIR = CGROUP_CPU / "fleetforge-testhosts"
# Test subnets are /24s carved from this range; one per harness instance.
SUBNET_POOL = ipaddress.IPv4Network("10.213.0.0/16")
SSH_OPTIONS = (
    "-o",
    "ControlMaster=no",
    "-o",
    "ControlPersist=no",
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "BatchMode=yes",
    "-o",
    "StrictHostKeyChecking=yes",
    "-o",
    "ConnectTimeout=10",
    "-o",
    "LogLevel=ERROR",
)
CPU_PERIOD_US = 100_000
# cgroup v1 weight of all test hosts together against each process outside (1024 each): with two
# busy processes elsewhere the hosts still get 98 % of the machine, with eleven 92 % (at 16384 a
# healthy host's all-reduce came out 60 % below the others at a load average of 11), and the
# machine's other work is slowed, not stopped, while hosts are busy.
HOSTS_CPU_SHARES = 131_072
# Background hosts (they configure, never measure: role applies beside the fleet runs) live in a
# group of their own at twice one process's weight: they neither take the CPU from measuring hosts
# nor starve the rest of the suite as the measuring hosts' weight would.
CGROUP_BACKGROUND_DIR = CGROUP_CPU / "fleetforge-testhosts-background"
BACKGROUND_CPU_SHARES = 2048
CGROUP_DIRS = (CGROUP_DIR, CGROUP_BACKGROUND_DIR)
# A test process that measures this machine itself (a local burn-in judged on the catalog's floors)
# waits for the measuring turn too, and meanwhile runs in a group of its own that outweighs the
# hosts: fleetforge-local-<pid>.
CGROUP_LOCAL_PREFIX = "fleetforge-local-"
# What a host runs while it measures (the burn-in the role starts). Measuring hosts take turns
# across every test process on this machine (MeasuringTurns): one host measures at a time, so the
# fleet runs of two test processes can run side by side without either slowing what the other
# measures. The host whose turn it is weighs the most in its group (cgroup v1's largest weight), so
# another fleet's hosts installing packages beside it cannot take its CPU either.
MEASURING_COMMAND = "bin/fleetforge burnin"
TURN_CPU_SHARES = 262_144
HOST_CPU_SHARES = 1024
INSTANCE_WIDTH = 7
# Where the hosts' system Python (Debian's python3) reads .pth files at start-up.
PYTHON_SITE = Path("usr/lib/python3/dist-packages")
BYTECODE_CACHE_MODULE = Path(__file__).with_name("zipimport_bytecode.py")


class HostsUnsupported(RuntimeError):
    """This machine cannot run test hosts (not root, no netns, no debootstrap); tests skip."""


@dataclass
class TestHost:
    __test__ = False  # not a pytest test class

    name: str
    address: str
    port: int
    user: str
    private_key: Path
    root: Path
    netns: str
    veth: str
    cgroup: Path
    known_hosts: Path
    log: Path

    @property
    def ssh_args(self) -> list[str]:
        """The ssh command line (without the remote command) that reaches this host."""
        return [
            "ssh",
            *SSH_OPTIONS,
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-i",
            str(self.private_key),
            "-p",
            str(self.port),
            f"{self.user}@{self.address}",
        ]


@dataclass
class TestHosts:
    """A set of n local test hosts; use as a context manager (or call start() and close())."""

    __test__ = False

    count: int
    names: Sequence[str] | None = None
    # Hosts that never measure (role applies run beside the fleet runs that do): in a group of their
    # own (CGROUP_BACKGROUND_DIR), so their package installs cannot slow a host being measured.
    background: bool = False
    hosts: list[TestHost] = field(default_factory=list)
    # False: measuring hosts skip the machine's measuring turns (MeasuringTurns) and all measure at
    # once; for a benchmark that times hosts measuring side by side (benchmarks/fleet_run.py).
    take_turns: bool = True

    def __post_init__(self) -> None:
        # Fixed width: 5 base-36 digits of the pid, 2 random; names embed it at a fixed offset.
        rand = _b36(int.from_bytes(os.urandom(2), "big")).rjust(2, "0")[-2:]
        self.instance = _b36(os.getpid()).rjust(5, "0") + rand
        self.state = STATE_ROOT / self.instance
        self.roots = ROOTS_DIR / self.instance
        self.bridge = f"{PREFIX}{self.instance}br"
        self.subnet: ipaddress.IPv4Network | None = None
        self.hosts_file = ""
        self._closed = False
        self._turns: MeasuringTurns | None = None
        # One SSH master per host, owned by the harness: Ansible's connections go through it
        # (ControlMaster=no, ControlPersist=no), so no connection outlives the harness.
        self._masters: dict[str, subprocess.Popen[bytes]] = {}
        # Hosts under a CPU cap (cpu_limit): they measure outside the turns (MeasuringTurns).
        self._capped: set[str] = set()
        if self.names is not None and len(self.names) != self.count:
            raise ValueError(f"names: {len(self.names)} given for {self.count} hosts")

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> TestHosts:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[TestHost]:
        return iter(self.hosts)

    def __getitem__(self, i: int) -> TestHost:
        return self.hosts[i]

    def __len__(self) -> int:
        return len(self.hosts)

    def by_name(self, name: str) -> TestHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def start(self) -> TestHosts:
        check_supported()
        sweep_stale()
        lower = rootfs.cached_root_tree()
        atexit.register(self.close)
        try:
            self.state.mkdir(parents=True)
            self._save_owner()
            self.roots.mkdir(parents=True)
            # The hosts' CPU weight against everything else on this machine: a healthy host gets
            # the CPU it asks for even while other processes keep every core busy, so what it
            # measures does not depend on the load around it. A cpu_limit quota still caps a host.
            for group, shares in (
                (CGROUP_DIR, HOSTS_CPU_SHARES),
                (CGROUP_BACKGROUND_DIR, BACKGROUND_CPU_SHARES),
            ):
                group.mkdir(exist_ok=True)
                (group / "cpu.shares").write_text(str(shares))
            self._make_network()
            self._make_client_key()
            names = list(self.names or [f"h{i}" for i in range(self.count)])
            for i, name in enumerate(names):
                self.hosts.append(self._prepare_host(i, name, lower))
            self.hosts_file = "127.0.0.1 localhost\n" + "".join(f"{h.address} {h.name}\n" for h in self.hosts)
            for host in self.hosts:
                (host.root / "etc/hosts").write_text(self.hosts_file)
                self._boot(host)
            for host in self.hosts:
                self._wait_ready(host)
                self._start_master(host)
            if not self.background and self.take_turns:
                self._turns = MeasuringTurns(self.hosts, outside_turns=self._capped)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Tear everything down; safe to call twice and after a partial start."""
        if self._closed:
            return
        self._closed = True
        if self._turns is not None:
            self._turns.close()
        for name in list(self._masters):
            self._stop_master(name)
        _teardown(self.instance)
        atexit.unregister(self.close)

    # ------------------------------------------------------------------ helpers for tests

    def ssh(
        self, host: TestHost, command: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command on host as its user; raises on non-zero exit when check is true."""
        done = subprocess.run(
            [*host.ssh_args, command],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"ssh {host.name} {command!r} exited {done.returncode}: {done.stderr.strip()[-1000:]}"
            )
        return done

    def write_inventory(
        self,
        path: Path,
        groups: Mapping[str, Sequence[str]] | None = None,
        hostvars: Mapping[str, Mapping[str, Any]] | None = None,
        group_vars: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Path:
        """An Ansible YAML inventory: every host under `all`, plus the named groups and vars."""
        all_hosts: dict[str, dict[str, Any]] = {}
        for h in self.hosts:
            all_hosts[h.name] = {**self.connection_vars(h), **dict((hostvars or {}).get(h.name, {}))}
        children: dict[str, Any] = {}
        for group, members in (groups or {}).items():
            unknown = sorted(set(members) - {h.name for h in self.hosts})
            if unknown:
                raise KeyError(f"group {group}: unknown hosts {unknown}")
            children[group] = {"hosts": {m: None for m in members}}
            if group_vars and group in group_vars:
                children[group]["vars"] = dict(group_vars[group])
        doc: dict[str, Any] = {"all": {"hosts": all_hosts}}
        if children:
            doc["all"]["children"] = children
        if group_vars and "all" in group_vars:
            doc["all"]["vars"] = dict(group_vars["all"])
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def connection_vars(self, host: TestHost) -> dict[str, Any]:
        return {
            "ansible_host": host.address,
            "ansible_port": host.port,
            "ansible_user": host.user,
            "ansible_ssh_private_key_file": str(host.private_key),
            # One connection per host, reused by every task (a new SSH connection per task costs
            # more CPU than most tasks do): the harness's master. Ansible never starts or keeps one
            # itself; without the master (a stopped host) it connects directly and fails.
            "ansible_ssh_args": (
                f"-o ControlMaster=no -o ControlPersist=no -o ControlPath={self.control_path(host)}"
            ),
            "ansible_ssh_common_args": (
                f"-o UserKnownHostsFile={host.known_hosts} -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"
            ),
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_pipelining": True,
        }

    @contextlib.contextmanager
    def cpu_limit(self, host: TestHost, fraction: float, once_running: str | None = None) -> Iterator[None]:
        """Cap every process of host (sshd and all it starts) at `fraction` of one CPU, for real.

        With once_running, the cap starts when a process of host whose command line contains that
        text starts, and stays on: a node that slows down under load. It installs software at full
        speed, which a host capped from the start does ten times slower for nothing the tests judge.
        """
        if not 0 < fraction <= 64:
            raise ValueError(f"fraction {fraction}: allowed 0 < fraction <= 64 (CPUs)")
        quota = str(max(1000, int(CPU_PERIOD_US * fraction)))
        (host.cgroup / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
        self._capped.add(host.name)
        stop = threading.Event()
        watcher = None
        if once_running is None:
            (host.cgroup / "cpu.cfs_quota_us").write_text(quota)
        else:
            watcher = threading.Thread(
                target=_cap_once_running, args=(host.cgroup, quota, once_running.encode(), stop), daemon=True
            )
            watcher.start()
        try:
            yield
        finally:
            stop.set()
            if watcher is not None:
                watcher.join()
            if host.cgroup.exists():
                (host.cgroup / "cpu.cfs_quota_us").write_text("-1")
            self._capped.discard(host.name)

    def reset(self, host: TestHost) -> None:
        """Put host back as start() left it: every process killed, a fresh copy of the root with the
        same address, host key and client key, its link up, no CPU cap, and sshd answering again."""
        self._stop_master(host.name)
        _kill_cgroup(host.cgroup, remove=False)
        if subprocess.run(["umount", str(host.root)], capture_output=True).returncode != 0:
            _run(["umount", "-l", str(host.root)])  # still busy a moment after its processes died
        for layer in self._layers(host):
            _run(["rm", "-rf", "--one-file-system", str(layer)], timeout=300)
        self._fill_root(host, rootfs.cached_root_tree())
        _ip("link", "set", host.veth, "up")
        self._boot(host)
        self._wait_ready(host)
        self._start_master(host)

    def view(self, count: int) -> TestHosts:
        """The first count hosts as a TestHosts of their own; closing the view leaves them running
        (their owner tears them down)."""
        if not 0 < count <= len(self.hosts):
            raise ValueError(f"count {count}: allowed 1..{len(self.hosts)} (hosts started)")
        part = copy.copy(self)
        part.count = count
        part.names = None
        part.hosts = self.hosts[:count]
        part._closed = True
        return part

    def stop(self, host: TestHost, link_down: bool = False) -> None:
        """Make host unreachable: kill its sshd and everything under it (connections are refused).
        With link_down, its link goes down too, so connections time out instead."""
        self._stop_master(host.name)
        _kill_cgroup(host.cgroup, remove=False)
        if link_down:
            _ip("link", "set", host.veth, "down", check=False)

    def control_path(self, host: TestHost) -> Path:
        """The socket of the harness's SSH master to host."""
        return self.state / f"cm-{host.name}"

    # ------------------------------------------------------------------ setup steps

    def _start_master(self, host: TestHost, timeout: float = 30) -> None:
        """The master connection to host that the inventory's connections go through."""
        path = self.control_path(host)
        path.unlink(missing_ok=True)
        # -M before the shared options: ssh keeps the first value of an option, and those say no.
        argv = ["ssh", "-M", "-N", "-o", f"ControlPath={path}", *host.ssh_args[1:]]
        with host.log.open("ab") as log:
            master = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        self._masters[host.name] = master
        deadline = time.monotonic() + timeout
        while not path.exists():
            if master.poll() is not None or time.monotonic() > deadline:
                self._stop_master(host.name)
                raise RuntimeError(f"test host {host.name}: its SSH master did not start (see {host.log})")
            time.sleep(0.05)

    def _stop_master(self, name: str) -> None:
        master = self._masters.pop(name, None)
        if master is not None and master.poll() is None:
            master.terminate()
            try:
                master.wait(timeout=10)
            except subprocess.TimeoutExpired:
                master.kill()
                master.wait()
        (self.state / f"cm-{name}").unlink(missing_ok=True)

    def _save_owner(self) -> None:
        owner = {"pid": os.getpid(), "starttime": _starttime(os.getpid()), "instance": self.instance}
        (self.state / "owner.json").write_text(json.dumps(owner))

    def _make_network(self) -> None:
        STATE_ROOT.mkdir(parents=True, exist_ok=True)
        with open(STATE_ROOT / "subnets.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two harnesses never take the same /24
            self.subnet = _free_subnet(os.getpid())
            _ip("link", "add", self.bridge, "type", "bridge")
            gateway = next(self.subnet.hosts())
            _ip("addr", "add", f"{gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")

    def _make_client_key(self) -> None:
        self.client_key = self.state / "id_ed25519"
        _run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"fleetforge-{self.instance}",
                "-f",
                str(self.client_key),
            ]
        )
        self.known_hosts = self.state / "known_hosts"
        self.known_hosts.write_text("")

    def _prepare_host(self, i: int, name: str, lower: Path) -> TestHost:
        assert self.subnet is not None
        address = str(list(self.subnet.hosts())[i + 1])
        root = self.roots / name
        root.mkdir()
        host = TestHost(
            name=name,
            address=address,
            port=22,
            user="root",
            private_key=self.client_key,
            root=root,
            netns=f"{PREFIX}{self.instance}-{name}",
            veth=f"{PREFIX}{self.instance}h{i}",
            cgroup=(CGROUP_BACKGROUND_DIR if self.background else CGROUP_DIR) / f"{self.instance}-{name}",
            known_hosts=self.known_hosts,
            log=self.state / f"{name}.sshd.log",
        )
        # Host key: one per host, pinned in known_hosts so clients verify who they reach. Kept in the
        # state folder, so a reset host is the same host to its clients.
        key = self.state / "hostkeys" / name / "ssh_host_ed25519_key"
        key.parent.mkdir(parents=True)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)])
        pub = key.with_suffix(".pub").read_text().split()
        with self.known_hosts.open("a") as kh:
            kh.write(f"{address} {pub[0]} {pub[1]}\n")
        self._fill_root(host, lower)
        host.cgroup.mkdir()
        _ip("netns", "add", host.netns)
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", f"{host.veth}p")
        _ip("link", "set", f"{host.veth}p", "netns", host.netns)
        _ip("link", "set", host.veth, "master", self.bridge, "up")
        inside = ["ip", "-n", host.netns]
        _run([*inside, "link", "set", f"{host.veth}p", "name", "eth0"])
        _run([*inside, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0"])
        _run([*inside, "link", "set", "eth0", "up"])
        _run([*inside, "link", "set", "lo", "up"])
        self._record(host)
        return host

    def _layers(self, host: TestHost) -> tuple[Path, Path]:
        """The host's overlay upper and work folders, beside its root in this instance's roots."""
        return self.roots / f".{host.name}.upper", self.roots / f".{host.name}.work"

    def _fill_root(self, host: TestHost, lower: Path) -> None:
        """A fresh root at host.root: the cached root under an empty upper layer (teardown unmounts
        it with everything under the instance's roots), made into this host (keys, sshd, names)."""
        root, name, address = host.root, host.name, host.address
        upper, work = self._layers(host)
        upper.mkdir()
        work.mkdir()
        options = f"lowerdir={lower},upperdir={upper},workdir={work}"
        _run(["mount", "-t", "overlay", "overlay", "-o", options, str(root)])
        for src in (self.state / "hostkeys" / name).iterdir():
            shutil.copy2(src, root / "etc/ssh" / src.name)
        authorized = root / "root/.ssh/authorized_keys"
        authorized.write_text(self.client_key.with_suffix(".pub").read_text())
        authorized.chmod(0o600)
        (root / "root/.ssh").chmod(0o700)
        (root / "etc/ssh/sshd_config.d/fleetforge-test.conf").write_text(
            f"ListenAddress {address}\n"
            "Port 22\n"
            "HostKey /etc/ssh/ssh_host_ed25519_key\n"
            "PermitRootLogin prohibit-password\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "UseDNS no\n"
            "PidFile /run/sshd.pid\n"
            "MaxStartups 64:30:128\n"
            "MaxSessions 64\n"
        )
        (root / "etc/hostname").write_text(f"{name}\n")
        # Ansible's modules run from zips that Python compiles afresh on every task: the hosts'
        # Python caches that bytecode (zipimport_bytecode.py says why and what it costs).
        site = root / PYTHON_SITE
        shutil.copyfile(BYTECODE_CACHE_MODULE, site / BYTECODE_CACHE_MODULE.name)
        (site / "zipimport_bytecode.pth").write_text(
            "import zipimport_bytecode; zipimport_bytecode.install()\n"
        )
        # The root's package lists are the hosts' mirror snapshot; they cannot be refreshed offline.
        stamp = root / "var/lib/apt/periodic/update-success-stamp"
        stamp.touch()
        if self.hosts_file:
            (root / "etc/hosts").write_text(self.hosts_file)

    def _boot(self, host: TestHost) -> None:
        r = shlex.quote(str(host.root))
        # Runs as PID 1 of the host's PID namespace, in its private mount namespace; execs sshd.
        init = f"""set -e
hostname {shlex.quote(host.name)}
mount -t proc -o nosuid,nodev,noexec proc {r}/proc
mount --bind {r}/proc/sys {r}/proc/sys
mount -o remount,bind,ro {r}/proc/sys
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs {r}/sys
mount -t tmpfs -o mode=755,size=1m,nosuid tmpfs {r}/dev
mk() {{ mknod -m 666 {r}/dev/"$1" c "$2" "$3"; }}
mk null 1 3; mk zero 1 5; mk full 1 7; mk random 1 8; mk urandom 1 9; mk tty 5 0
mkdir -p {r}/dev/pts {r}/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts {r}/dev/pts
ln -s pts/ptmx {r}/dev/ptmx
ln -s /proc/self/fd {r}/dev/fd
mount -t tmpfs -o mode=1777,size=64m,nosuid,nodev tmpfs {r}/dev/shm
mount -t tmpfs -o mode=755,size=64m,nosuid,nodev tmpfs {r}/run
mkdir -p {r}/run/sshd {r}/run/lock
exec chroot {r} /usr/sbin/sshd -D -e
"""
        argv = [
            "ip",
            "netns",
            "exec",
            host.netns,
            "unshare",
            "--pid",
            "--fork",
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "--kill-child",
            "sh",
            "-c",
            init,
        ]
        # The wrapper joins the host's cgroup first, so everything it starts inherits it.
        wrapper = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(host.cgroup), *argv]
        with host.log.open("ab") as log:
            subprocess.Popen(
                wrapper, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )

    def _wait_ready(self, host: TestHost, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((host.address, host.port), timeout=2):
                if self.ssh(host, "true", check=False, timeout=30).returncode == 0:
                    return
            time.sleep(0.2)
        log = host.log.read_text(errors="replace")[-2000:] if host.log.exists() else ""
        raise RuntimeError(f"test host {host.name} ({host.address}) did not come up in {timeout:.0f}s: {log}")

    def _record(self, host: TestHost) -> None:
        with (self.state / "hosts.jsonl").open("a") as f:
            f.write(
                json.dumps(
                    {"name": host.name, "netns": host.netns, "veth": host.veth, "cgroup": str(host.cgroup)}
                )
                + "\n"
            )


# ---------------------------------------------------------------------- support, sweep, teardown


def check_supported() -> None:
    """Raise HostsUnsupported with the reason when this machine cannot run test hosts."""
    if os.geteuid() != 0:
        raise HostsUnsupported("test hosts need root (network namespaces, chroot, mounts)")
    for tool in ("ip", "unshare", "chroot", "tar", "mount"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            raise HostsUnsupported(f"{tool} not found")
    if "\toverlay\n" not in Path("/proc/filesystems").read_text() and (
        subprocess.run(["modprobe", "overlay"], capture_output=True).returncode != 0
    ):
        raise HostsUnsupported("the kernel has no overlay file system (the hosts' roots are overlays)")
    probe = f"ffprobe{os.getpid()}"  # not our prefix: the sweeper ignores it
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        raise HostsUnsupported(f"`ip netns add` does not work here: {made.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if not (CGROUP_CPU / "cpu.cfs_quota_us").exists() and not CGROUP_CPU.joinpath("tasks").exists():
        raise HostsUnsupported(f"no cgroup v1 cpu controller at {CGROUP_CPU}")
    try:
        rootfs.ensure_tools()
    except rootfs.RootfsUnavailable as exc:
        raise HostsUnsupported(str(exc)) from None


def sweep_stale() -> list[str]:
    """Remove what dead harness instances left behind; returns the instances swept."""
    swept: list[str] = []
    if STATE_ROOT.exists():
        for state in STATE_ROOT.iterdir():
            owner = state / "owner.json"
            if not state.is_dir():
                continue
            try:
                info = json.loads(owner.read_text())
            except (OSError, ValueError):
                info = {}
            if info and _alive(int(info["pid"]), info.get("starttime")):
                continue
            _teardown(state.name)
            swept.append(state.name)
    # Links and namespaces with our prefix whose instance has no state left (killed mid-setup).
    live = {p.name for p in STATE_ROOT.iterdir()} if STATE_ROOT.exists() else set()
    for ns in _netns_names():
        inst = _instance_of(ns)
        if inst and inst not in live:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for link in _link_names():
        inst = _instance_of(link)
        if inst and inst not in live:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
    for group in CGROUP_DIRS:
        for cg in group.iterdir() if group.exists() else []:
            if cg.is_dir() and cg.name[:INSTANCE_WIDTH] not in live:
                _kill_cgroup(cg)
    # A local measuring group left by a process that died in its turn: removed once empty, never
    # killed (the processes in it are the test run's own).
    for local in CGROUP_CPU.glob(f"{CGROUP_LOCAL_PREFIX}*") if CGROUP_CPU.exists() else []:
        pid = local.name[len(CGROUP_LOCAL_PREFIX) :]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                local.rmdir()
    return swept


def _teardown(instance: str) -> None:
    state = STATE_ROOT / instance
    for socket_path in state.glob("cm-*") if state.exists() else []:
        subprocess.run(
            ["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "teardown"],
            capture_output=True,
            timeout=10,
        )
    records: list[dict[str, str]] = []
    if (state / "hosts.jsonl").exists():
        records = [json.loads(line) for line in (state / "hosts.jsonl").read_text().splitlines() if line]
    for group in CGROUP_DIRS:
        for cg in sorted(group.glob(f"{instance}-*")) if group.exists() else []:
            _kill_cgroup(cg)
    roots = ROOTS_DIR / instance
    _unmount_under(roots)
    for rec in records:
        subprocess.run(["ip", "netns", "del", rec["netns"]], capture_output=True)
        subprocess.run(["ip", "link", "del", rec["veth"]], capture_output=True)
    for ns in _netns_names():
        if _instance_of(ns) == instance:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for link in _link_names():
        if _instance_of(link) == instance:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
    if roots.exists():
        # --one-file-system: never descend into a mount that somehow survived.
        subprocess.run(["rm", "-rf", "--one-file-system", str(roots)], capture_output=True)
    if state.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(state)], capture_output=True)


def processes_naming(cgroup: Path, marker: bytes) -> set[int]:
    """The processes of cgroup whose command line holds marker; OSError once the cgroup is gone.
    A forked child shows its parent's command line until it execs: callers poll."""
    found = set()
    for pid in (cgroup / "cgroup.procs").read_text().split():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue  # ended meanwhile
        if marker in cmdline:
            found.add(int(pid))
    return found


def _cap_once_running(cgroup: Path, quota: str, marker: bytes, stop: threading.Event) -> None:
    """Write quota to cgroup's CPU quota once one of its processes' command line holds marker."""
    while not stop.wait(0.05):
        try:
            if processes_naming(cgroup, marker):
                (cgroup / "cpu.cfs_quota_us").write_text(quota)
                return
        except OSError:
            return


class _Turn:
    """This process's hold on the machine's one measuring turn: an flock on STATE_ROOT/turn.lock
    that every test process takes before a host of its measures, and a thread lock for the process's
    own watchers. The kernel drops the flock with the process: a killed test run holds no turn."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.holder: tuple[str, str] | None = None

    def take(self, who: tuple[str, str]) -> bool:
        with self._lock:
            if self.holder is not None:
                return self.holder == who
            if self._fd is None:
                STATE_ROOT.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(STATE_ROOT / "turn.lock", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            self.holder = who
            return True

    def give(self, who: tuple[str, str]) -> None:
        with self._lock:
            if self.holder != who or self._fd is None:
                return
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self.holder = None


_TURN = _Turn()


class MeasuringTurns:
    """Watches measuring hosts: a process naming MEASURING_COMMAND that starts while another host
    holds the turn is stopped (SIGSTOP) within a poll, long before it has imported what it measures
    with, and continued once the turn is its host's; the turn passes on when the host's last such
    process has ended (or the host was stopped or reset).

    Hosts named in outside_turns (the harness's CPU-capped ones) measure whenever they start and
    never hold the turn: a host slowed to a fifth of a core held it for 30-40 s per burn-in while
    every other host on the machine waited, and what it takes from a host measuring beside it is
    a fifth of a core at most, at the smallest CPU weight, on a machine with two."""

    POLL_S = 0.05

    def __init__(
        self, hosts: Sequence[TestHost], marker: str = MEASURING_COMMAND, outside_turns: Collection[str] = ()
    ) -> None:
        self.hosts = list(hosts)
        self.marker = marker.encode()
        self.outside_turns = outside_turns  # read at every poll: the owner adds and removes names
        self._stop = threading.Event()
        self._paused: dict[str, set[int]] = {}
        self._thread = threading.Thread(target=self._watch, name="measuring-turns", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for host in self.hosts:
            self._end_turn(host)

    def _watch(self) -> None:
        while not self._stop.wait(self.POLL_S):
            for host in self.hosts:
                measuring = self._measuring(host)
                if not measuring or host.name in self.outside_turns:
                    self._end_turn(host)
                elif _TURN.holder == _who(host):
                    continue
                elif _TURN.take(_who(host)):
                    self._start_turn(host)
                else:
                    paused = self._paused.setdefault(host.name, set())
                    for pid in measuring - paused:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGSTOP)
                        paused.add(pid)

    def _measuring(self, host: TestHost) -> set[int]:
        try:
            return processes_naming(host.cgroup, self.marker)
        except OSError:
            return set()  # stopped or reset meanwhile

    def _start_turn(self, host: TestHost) -> None:
        with contextlib.suppress(OSError):
            (host.cgroup / "cpu.shares").write_text(str(TURN_CPU_SHARES))
        self._resume(host)

    def _end_turn(self, host: TestHost) -> None:
        self._resume(host)
        if _TURN.holder != _who(host):
            return
        with contextlib.suppress(OSError):
            (host.cgroup / "cpu.shares").write_text(str(HOST_CPU_SHARES))
        _TURN.give(_who(host))

    def _resume(self, host: TestHost) -> None:
        for pid in self._paused.pop(host.name, set()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def measuring_turn(poll_s: float = 0.1) -> Iterator[None]:
    """This machine measures itself: wait for the turn the test hosts take, and outweigh them for
    the CPU until it is over, so that neither slows what the other measures. Where test hosts cannot
    run (not root, no cgroup v1 cpu controller) there is nobody to take turns with."""
    if os.geteuid() != 0 or not (CGROUP_CPU / "cpu.shares").is_file():
        yield
        return
    who = ("local", str(os.getpid()))
    while not _TURN.take(who):
        time.sleep(poll_s)
    home = _cpu_cgroup_of("self")
    group = CGROUP_CPU / f"{CGROUP_LOCAL_PREFIX}{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cpu.shares").write_text(str(TURN_CPU_SHARES))
        (group / "cgroup.procs").write_text(str(os.getpid()))  # every thread, and children from now on
        # And the children started before the turn: a burn-in's checks fork from multiprocessing's
        # forkserver, which an earlier test in this process started outside the turn. Only those
        # still in this process's group: a test host's sshd has a group of its own, and one moved
        # here went home with the turn's end, out of reach of the teardown that kills its group.
        for child in _descendants(os.getpid()):
            with contextlib.suppress(OSError):  # exited meanwhile
                if _cpu_cgroup_of(child) == home:
                    (group / "cgroup.procs").write_text(str(child))
        yield
    finally:
        # Helpers started in the turn that outlive it (a process pool, a resource tracker) go home
        # with the test process: the turn's weight ends with the turn.
        deadline = time.monotonic() + 2
        while group.exists() and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                for pid in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (home / "cgroup.procs").write_text(pid)
            try:
                group.rmdir()
            except OSError:
                time.sleep(0.05)  # a process exiting leaves the group a moment later
        _TURN.give(who)


def _descendants(root: int) -> list[int]:
    """Every living process below `root`, read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The command name may hold spaces and parentheses: the fields follow the last ')'.
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _cpu_cgroup_of(pid: int | str) -> Path:
    """The cpu controller's group of a process ("self": this one)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return CGROUP_CPU / path.lstrip("/")
    return CGROUP_CPU


def _who(host: TestHost) -> tuple[str, str]:
    """A host's name in the turn: its cgroup is unique on the machine, its name is for people."""
    return (str(host.cgroup), host.name)


def _kill_cgroup(cg: Path, remove: bool = True) -> None:
    if not cg.exists():
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            pids = [int(p) for p in (cg / "cgroup.procs").read_text().split()]
        except OSError:
            break
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    with contextlib.suppress(OSError):
        (cg / "cpu.cfs_quota_us").write_text("-1")
    if not remove:
        return
    deadline = time.monotonic() + 10
    while cg.exists() and time.monotonic() < deadline:
        try:
            cg.rmdir()
        except OSError:
            time.sleep(0.1)


def _unmount_under(path: Path) -> None:
    prefix = str(path) + "/"
    targets = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if target.startswith(prefix):
            targets.append(target)
    for target in sorted(targets, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)


def _free_subnet(seed: int) -> ipaddress.IPv4Network:
    used = _used_networks()
    subnets = list(SUBNET_POOL.subnets(new_prefix=24))
    start = seed % len(subnets)
    for k in range(len(subnets)):
        candidate = subnets[(start + k) % len(subnets)]
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise RuntimeError(f"no free /24 left in {SUBNET_POOL}")


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    nets = [
        ipaddress.IPv4Interface(line.split()[3]).network for line in out.splitlines() if len(line.split()) > 3
    ]
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True).stdout
    for line in routes.splitlines():
        dest = line.split()[0]
        if dest != "default":
            with contextlib.suppress(ValueError):
                nets.append(ipaddress.IPv4Network(dest, strict=False))
    return nets


def _netns_names() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def _link_names() -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = []
    for line in out.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(PREFIX):
            names.append(name)
    return names


def _instance_of(name: str) -> str | None:
    """The instance id inside a resource name: fft<instance>br, fft<instance>h3, fft<instance>-h0."""
    if not name.startswith(PREFIX) or len(name) < len(PREFIX) + INSTANCE_WIDTH + 1:
        return None
    return name[len(PREFIX) : len(PREFIX) + INSTANCE_WIDTH]


def _alive(pid: int, starttime: str | None) -> bool:
    try:
        return _starttime(pid) == starttime
    except OSError:
        return False


def _starttime(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[19]


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def _ip(*args: str, check: bool = True) -> None:
    _run(["ip", *args], check=check)


def _run(cmd: list[str], timeout: float = 120, check: bool = True) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({done.returncode}): {done.stderr.strip()[-1000:]}")

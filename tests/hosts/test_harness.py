"""The test-host harness itself: isolation, reachability, CPU throttling, stop, and cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, ROOT
from tests.hosts import harness, rootfs, zipimport_bytecode
from tests.hosts.fixtures import HostPool
from tests.hosts.harness import TestHost, TestHosts

pytestmark = pytest.mark.hosts


def _leftovers(instance: str) -> list[str]:
    """Every resource of one harness instance that still exists."""
    found = [ns for ns in harness._netns_names() if harness._instance_of(ns) == instance]
    found += [link for link in harness._link_names() if harness._instance_of(link) == instance]
    for group in harness.CGROUP_DIRS:
        found += [str(cg) for cg in group.glob(f"{instance}-*")] if group.exists() else []
    for path in (harness.ROOTS_DIR / instance, harness.STATE_ROOT / instance):
        if path.exists():
            found.append(str(path))
    mounts = Path("/proc/self/mountinfo").read_text()
    if str(harness.ROOTS_DIR / instance) in mounts:
        found.append("mounts under the roots")
    # SSH masters outside the hosts (they run on this machine, named by their control socket).
    state = str(harness.STATE_ROOT / instance)
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if state in cmdline.read_bytes().decode(errors="replace"):
                found.append(f"process {cmdline.parent.name}")
        except OSError:
            continue
    return found


def _through_master(hosts: TestHosts, host: TestHost) -> None:
    """A command as Ansible runs it from the inventory's ansible_ssh_args: through the harness's
    master, never starting or keeping one of its own."""
    args = hosts.connection_vars(host)["ansible_ssh_args"].split()
    assert "ControlPersist=no" in args and "ControlMaster=no" in args
    done = subprocess.run(
        ["ssh", *args, *host.ssh_args[1:], "-v", "true"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mux_client_request_session: master session id" in done.stderr, done.stderr[-2000:]


def test_hosts_are_isolated_reachable_and_cleaned_up(
    test_hosts: Callable[..., TestHosts], tmp_path: Path
) -> None:
    hosts = test_hosts(2)
    h0, h1 = hosts
    assert h0.address != h1.address and h0.root != h1.root
    assert hosts.ssh(h0, "hostname").stdout.strip() == "h0"
    assert hosts.ssh(h1, "hostname").stdout.strip() == "h1"
    # Each host has its own file system.
    hosts.ssh(h0, "echo only-here > /root/marker")
    assert hosts.ssh(h1, "test -e /root/marker", check=False).returncode == 1
    assert (h0.root / "root/marker").read_text() == "only-here\n"
    # Hosts reach each other over the bridge, and nothing else: no default route.
    probe = f"import socket; socket.create_connection(('{h1.address}', 22), 5); print('ok')"
    assert hosts.ssh(h0, f'python3 -c "{probe}"').stdout.strip() == "ok"
    routes = hosts.ssh(h0, "ip -4 route").stdout
    assert "default" not in routes and str(hosts.subnet) in routes
    # The shared kernel is protected: /proc/sys is read-only inside.
    assert hosts.ssh(h0, "echo 1 > /proc/sys/vm/swappiness", check=False).returncode != 0
    # sshd is PID 1 of the host's own PID namespace, so killing it takes the whole host down.
    assert hosts.ssh(h0, "cat /proc/1/comm").stdout.strip() == "sshd"
    # Key-only root login: a password attempt is not even offered.
    cfg = hosts.ssh(h0, "sshd -T").stdout
    assert "passwordauthentication no" in cfg and "permitrootlogin without-password" in cfg
    # The inventory names each host with what Ansible needs to reach it.
    inv = hosts.write_inventory(tmp_path / "inv.yml", groups={"gpu_nodes": ["h1"]}, hostvars={"h0": {"x": 1}})
    doc = yaml.safe_load(inv.read_text())
    assert doc["all"]["hosts"]["h0"]["ansible_host"] == h0.address
    assert doc["all"]["hosts"]["h0"]["x"] == 1
    assert f"ControlPath={hosts.state}/cm-h1" in doc["all"]["hosts"]["h1"]["ansible_ssh_args"]
    assert list(doc["all"]["children"]["gpu_nodes"]["hosts"]) == ["h1"]
    with pytest.raises(KeyError, match="nope"):
        hosts.write_inventory(tmp_path / "bad.yml", groups={"g": ["nope"]})
    _through_master(hosts, h1)  # Ansible's connection, kept open between tasks
    instance = hosts.instance
    assert any(f.startswith("process ") for f in _leftovers(instance))  # the probe sees the masters
    hosts.close()
    assert _leftovers(instance) == []


def test_a_reset_host_is_the_started_host_again(test_hosts: Callable[..., TestHosts]) -> None:
    hosts = test_hosts(2)
    h0, h1 = hosts
    sshd_h1 = hosts.ssh(h1, "cat /run/sshd.pid").stdout
    hosts.ssh(h0, "echo left-behind > /root/marker && mkdir -p /opt/fleetforge")
    _through_master(hosts, h0)
    (h0.cgroup / "cpu.cfs_quota_us").write_text("10000")
    hosts.stop(h0, link_down=True)
    hosts.reset(h0)
    # Same address and host key (known_hosts pins it), a root as the cache has it, no cap.
    assert hosts.ssh(h0, "hostname").stdout.strip() == "h0"
    assert hosts.ssh(h0, "test -e /root/marker || test -e /opt/fleetforge", check=False).returncode == 1
    # The host wrote to its own layer: the cached root every host overlays is as it was.
    lower = rootfs.cached_root_tree()
    assert not (lower / "root/marker").exists() and not (lower / "opt/fleetforge").exists()
    assert (h0.cgroup / "cpu.cfs_quota_us").read_text().strip() == "-1"
    probe = f"import socket; socket.create_connection(('{h1.address}', 22), 5); print('ok')"
    assert hosts.ssh(h0, f'python3 -c "{probe}"').stdout.strip() == "ok"
    assert hosts.ssh(h1, "cat /run/sshd.pid").stdout == sshd_h1  # the other host was left alone
    # The master to the old h0 went with it: the new one reaches the new h0.
    _through_master(hosts, h0)


def test_ansible_modules_on_a_host_compile_once(test_hosts: Callable[..., TestHosts], tmp_path: Path) -> None:
    hosts = test_hosts(1)
    inventory = hosts.write_inventory(tmp_path / "inventory.yml")
    # Inode and name of every entry: a recompiled entry is written anew (a new inode).
    cache = f"stat -c '%i %n' {zipimport_bytecode.CACHE_DIR}/* | sort"

    ansible = [str(BIN / "ansible"), "-i", str(inventory), "h0", "-o"]

    def uname() -> str:
        done = subprocess.run(
            [*ansible, "-m", "ansible.builtin.command", "-a", "uname -n"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    assert "(stdout) h0" in uname()
    compiled = hosts.ssh(hosts[0], cache).stdout.splitlines()
    assert len(compiled) > 10  # ansible.module_utils, one entry per module
    assert "(stdout) h0" in uname()
    assert hosts.ssh(hosts[0], cache).stdout.splitlines() == compiled  # every one read back, none compiled


def test_the_session_pool_hands_out_fresh_hosts_and_cleans_up(hosts_supported: None) -> None:
    pool = HostPool(2)
    first = pool.fresh(1)
    assert [h.name for h in first] == ["h0"]
    first.ssh(first[0], "touch /root/marker")
    first.close()  # a view: closing it leaves the pool's hosts running
    both = pool.fresh(2)
    assert [h.name for h in both] == ["h0", "h1"] and both.instance == first.instance
    assert both.ssh(both[0], "test -e /root/marker", check=False).returncode == 1
    with pytest.raises(ValueError, match="count 3"):
        pool.fresh(3)
    pool.close()
    assert _leftovers(both.instance) == []


def test_hosts_outweigh_other_processes_for_the_cpu(test_hosts: Callable[..., TestHosts]) -> None:
    test_hosts(1)
    assert int((harness.CGROUP_DIR / "cpu.shares").read_text()) == harness.HOSTS_CPU_SHARES >= 8 * 1024
    # Background hosts (they never measure) weigh like a couple of processes, not like the hosts.
    with TestHosts(1, background=True) as quiet, TestHosts(1) as loud:
        assert quiet[0].cgroup.parent == harness.CGROUP_BACKGROUND_DIR
        assert loud[0].cgroup.parent == harness.CGROUP_DIR
        shares = int((harness.CGROUP_BACKGROUND_DIR / "cpu.shares").read_text())
        assert shares == harness.BACKGROUND_CPU_SHARES <= harness.HOSTS_CPU_SHARES // 32


def test_cpu_limit_throttles_the_whole_host(test_hosts: Callable[..., TestHosts]) -> None:
    hosts = test_hosts(1)
    (h0,) = hosts
    stat = h0.cgroup / "cpu.stat"

    def throttled() -> int:
        return int(dict(line.split() for line in stat.read_text().splitlines())["nr_throttled"])

    # CPU time, not wall time: while another test's host holds the measuring turn this host gets
    # little CPU, and a loop that stops at a wall-clock deadline may never reach the quota.
    busy = "python3 -c 'import time\nwhile time.process_time() < 0.3: pass'"
    before = throttled()
    hosts.ssh(h0, busy)  # unthrottled: the quota is unlimited
    assert throttled() == before
    with hosts.cpu_limit(h0, 0.2):
        assert (h0.cgroup / "cpu.cfs_quota_us").read_text().strip() == "20000"
        hosts.ssh(h0, busy)  # a child of a child of sshd: throttled through inheritance
        assert throttled() > before
    assert (h0.cgroup / "cpu.cfs_quota_us").read_text().strip() == "-1"
    # Capped once a process naming the marker runs, and from then on.
    marked = busy.replace("pass'", "pass' slow-from-here")
    with hosts.cpu_limit(h0, 0.2, once_running="slow-from-here"):
        before = throttled()
        hosts.ssh(h0, busy)
        assert throttled() == before
        assert (h0.cgroup / "cpu.cfs_quota_us").read_text().strip() == "-1"
        hosts.ssh(h0, marked)
        assert throttled() > before
        before = throttled()
        hosts.ssh(h0, busy)
        assert throttled() > before
    assert (h0.cgroup / "cpu.cfs_quota_us").read_text().strip() == "-1"
    with pytest.raises(ValueError, match="fraction"):
        hosts.cpu_limit(h0, 0).__enter__()


def _measuring_pid(host: TestHost, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = harness.processes_naming(host.cgroup, harness.MEASURING_COMMAND.encode())
        if found:
            return min(found)
        time.sleep(0.05)
    raise AssertionError(f"{host.name}: no measuring process within {timeout} s")


def _state(pid: int) -> str:
    """The process's state letter (R, S, T for stopped, ...); X once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def _wait_for(what: Callable[[], bool], timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, why
        time.sleep(0.05)


def test_measuring_hosts_take_turns_across_harnesses(hosts_supported: None) -> None:
    # Two harnesses, as two test processes hold: a host that starts measuring while the other
    # harness's host measures is stopped until that one is done, then measures in its own turn.
    # Each "measurement" lasts until the test creates /done on its host.
    measure = (
        "python3 -c 'import os, time\nwhile not os.path.exists(\"/done\"): time.sleep(0.05)' "
        + harness.MEASURING_COMMAND
    )
    with TestHosts(1) as first, TestHosts(1) as second:
        (a,), (b,) = first, second
        run_a = subprocess.Popen([*a.ssh_args, measure], stdin=subprocess.DEVNULL)
        pid_a = _measuring_pid(a)
        # Another test process on this machine may hold the turn for a while (its own fleet run).
        # The watcher takes the turn, then weighs and continues the host: wait for all three.
        _wait_for(
            lambda: (
                harness._TURN.holder == harness._who(a)
                and (a.cgroup / "cpu.shares").read_text().strip() == str(harness.TURN_CPU_SHARES)
                and _state(pid_a) != "T"
            ),
            600,
            "the first host never got its turn",
        )
        assert _state(pid_a) != "T"
        assert (a.cgroup / "cpu.shares").read_text().strip() == str(harness.TURN_CPU_SHARES)
        run_b = subprocess.Popen([*b.ssh_args, measure], stdin=subprocess.DEVNULL)
        pid_b = _measuring_pid(b)
        _wait_for(lambda: _state(pid_b) == "T", 10, "the second host measured beside the first")
        time.sleep(0.5)
        assert _state(pid_b) == "T" and _state(pid_a) not in ("T", "X")
        first.ssh(a, "touch /done")
        second.ssh(b, "touch /done")  # b sees it once it runs again
        assert run_a.wait(timeout=60) == 0
        assert run_b.wait(timeout=600) == 0  # continued: its turn came
        _wait_for(
            lambda: (a.cgroup / "cpu.shares").read_text().strip() == str(harness.HOST_CPU_SHARES),
            10,
            "the first host kept its weight after its turn",
        )
        # A host stopped while it waits for its turn gives nothing back and blocks nobody.
        first.ssh(a, "rm /done")
        second.ssh(b, "rm /done")
        runs = [subprocess.Popen([*h.ssh_args, measure], stdin=subprocess.DEVNULL) for h in (a, b)]
        pids = [_measuring_pid(a), _measuring_pid(b)]
        _wait_for(lambda: sorted(_state(p) == "T" for p in pids) == [False, True], 600, "no turn taken")
        waiting = [_state(p) for p in pids].index("T")
        (stopped_in, stopped), (running_in, running) = [(first, a), (second, b)][:: 1 if waiting == 0 else -1]
        stopped_in.stop(stopped)
        running_in.ssh(running, "touch /done")
        for run in runs:
            run.wait(timeout=60)
        _wait_for(lambda: harness._TURN.holder is None, 10, "the turn was never given back")


def test_a_capped_host_measures_while_another_holds_the_turn_and_never_takes_it(
    hosts_supported: None,
) -> None:
    # A host slowed on purpose (the e2e's slow host) measures at once: waiting for the turn, and
    # then holding it at a fifth of a core, kept every other host on the machine waiting.
    measure = (
        "python3 -c 'import os, time\nwhile not os.path.exists(\"/done\"): time.sleep(0.05)' "
        + harness.MEASURING_COMMAND
    )
    with TestHosts(1) as hosts:
        (host,) = hosts
        sshd = harness.processes_naming(host.cgroup, b"sshd")
        assert sshd
        with harness.measuring_turn():
            # The turn takes this process's children that share its group, not the host's sshd:
            # taken, it went home with the turn's end and outlived the host's teardown.
            assert sshd <= harness.processes_naming(host.cgroup, b"sshd")
            with hosts.cpu_limit(host, 0.2, once_running=harness.MEASURING_COMMAND):
                run = subprocess.Popen([*host.ssh_args, measure], stdin=subprocess.DEVNULL)
                pid = _measuring_pid(host)
                time.sleep(0.5)  # ten of the watcher's polls
                assert _state(pid) not in ("T", "X")
                hosts.ssh(host, "touch /done")
                assert run.wait(timeout=60) == 0
                assert harness._TURN.holder == ("local", str(os.getpid()))
                assert (host.cgroup / "cpu.shares").read_text().strip() == str(harness.HOST_CPU_SHARES)
    assert {_state(p) for p in sshd} <= {"X", "Z"}  # ended (a zombie until its parent reaps it)


def test_a_process_measuring_this_machine_takes_the_turn_and_outweighs_the_hosts(
    hosts_supported: None,
) -> None:
    # Started before the turn, as multiprocessing's forkserver that a burn-in's checks fork from.
    # It must outlive the wait for the turn, which other streams' hosts may hold for minutes: a
    # child that has exited is a zombie, and a zombie joins no cgroup.
    earlier = subprocess.Popen(["sleep", "infinity"])
    try:
        with harness.measuring_turn():
            assert harness._TURN.holder == ("local", str(os.getpid()))
            group = harness.CGROUP_CPU / f"{harness.CGROUP_LOCAL_PREFIX}{os.getpid()}"
            members = (group / "cgroup.procs").read_text().split()
            assert str(os.getpid()) in members and str(earlier.pid) in members
            assert int((group / "cpu.shares").read_text()) > harness.HOSTS_CPU_SHARES
            child = subprocess.run(["cat", "/proc/self/cgroup"], capture_output=True, text=True, check=True)
            assert f"cpu:/{group.name}" in child.stdout  # what it starts measures in its turn too
        assert harness._TURN.holder is None and not group.exists()
        assert f"{group.name}" not in Path("/proc/self/cgroup").read_text()
        assert f"{group.name}" not in Path(f"/proc/{earlier.pid}/cgroup").read_text()
    finally:
        earlier.kill()
        earlier.wait()


def test_stop_makes_a_host_unreachable(test_hosts: Callable[..., TestHosts]) -> None:
    hosts = test_hosts(2)
    h0, h1 = hosts
    hosts.stop(h1)
    assert hosts.ssh(h1, "true", check=False, timeout=30).returncode == 255
    # Ansible's way in fails too: no master left to reuse, and a direct connection is refused.
    args = hosts.connection_vars(h1)["ansible_ssh_args"].split()
    done = subprocess.run(["ssh", *args, *h1.ssh_args[1:], "true"], capture_output=True, timeout=30)
    assert done.returncode == 255
    assert hosts.ssh(h0, "true").returncode == 0
    assert (h1.cgroup / "cgroup.procs").read_text().split() == []


def test_sweeper_removes_what_a_killed_harness_left(hosts_supported: None) -> None:
    # A harness in another process that dies by SIGKILL runs no cleanup at all.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import json, sys, time
                from tests.hosts.harness import TestHosts
                hosts = TestHosts(1).start()
                print(json.dumps({"instance": hosts.instance}), flush=True)
                time.sleep(600)
                """
            ),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        instance = json.loads(line)["instance"]
        assert _leftovers(instance)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert _leftovers(instance)  # nothing cleaned itself up
    assert instance in harness.sweep_stale()
    assert _leftovers(instance) == []

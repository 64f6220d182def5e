"""pytest fixtures for local test hosts. Import them into a conftest.py to use them elsewhere:

    from tests.hosts.fixtures import test_hosts, hosts_supported, host_pool  # noqa: F401

and mark the tests `@pytest.mark.hosts`.

`test_hosts` starts hosts of the test's own. `host_pool` is one set of hosts for the whole session:
the modules that need hosts take them from it with `host_pool.fresh(n)`, which hands out hosts as
start() leaves them (any host handed out before is reset first), so a module never sees what
another one did and the session boots its network, keys and sshds once. A session without tests
marked `measures` starts background hosts: they yield the CPU to another session's measuring hosts.
Measuring hosts take turns with every other session's (tests/hosts/harness.py, MeasuringTurns), so
scripts/test runs each module of fleet runs in a session of its own, on a pool of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from tests.hosts import rootfs
from tests.hosts.harness import HostsUnsupported, TestHosts, check_supported

# Enough for the largest user (the 4-host fleet runs in tests/e2e).
POOL_SIZE = 4


def require_hosts() -> None:
    """Skip the calling test, with the reason, when this machine cannot run test hosts."""
    try:
        check_supported()
        rootfs.cached_root_tree()
    except (HostsUnsupported, rootfs.RootfsUnavailable) as exc:
        pytest.skip(f"local test hosts unavailable: {exc}")


def measures(session: pytest.Session) -> bool:
    """Whether this session runs tests that measure on hosts (marked `measures`): its hosts then
    take the CPU first; otherwise they are background hosts (tests/hosts/harness.py, TestHosts)."""
    return any(item.get_closest_marker("measures") is not None for item in session.items)


class HostPool:
    """Hosts shared by the session, started on first use and torn down at its end."""

    def __init__(self, size: int, background: bool = False) -> None:
        self.size = size
        self.background = background
        self._hosts: TestHosts | None = None
        self._used: set[str] = set()

    def fresh(self, count: int) -> TestHosts:
        """The first count hosts (h0, h1, ...), each as start() left it: reachable, unchanged root,
        link up, no CPU cap. Hosts an earlier caller had are reset (about 2 s each)."""
        if not 0 < count <= self.size:
            raise ValueError(f"count {count}: allowed 1..{self.size} (the pool's size)")
        require_hosts()
        if self._hosts is None:
            self._hosts = TestHosts(self.size, background=self.background).start()
        for host in self._hosts.hosts[:count]:
            if host.name in self._used:
                self._hosts.reset(host)
        self._used.update(h.name for h in self._hosts.hosts[:count])
        return self._hosts.view(count)

    def close(self) -> None:
        if self._hosts is not None:
            self._hosts.close()


@pytest.fixture(scope="session")
def host_pool(request: pytest.FixtureRequest) -> Iterator[HostPool]:
    pool = HostPool(POOL_SIZE, background=not measures(request.session))
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def hosts_supported() -> None:
    require_hosts()


@pytest.fixture
def test_hosts(request: pytest.FixtureRequest) -> Iterator[Callable[..., TestHosts]]:
    """Factory: `hosts = test_hosts(2)` starts two hosts; all are torn down after the test."""
    require_hosts()
    started: list[TestHosts] = []
    background = not measures(request.session)

    def make(count: int, names: Sequence[str] | None = None) -> TestHosts:
        hosts = TestHosts(count, names=names, background=background)
        started.append(hosts)
        return hosts.start()

    try:
        yield make
    finally:
        for hosts in started:
            hosts.close()

"""pytest fixtures for local test hosts. Import them into a conftest.py to use them elsewhere:

    from tests.hosts.fixtures import test_hosts, hosts_supported  # noqa: F401

and mark the tests `@pytest.mark.hosts`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from tests.hosts import rootfs
from tests.hosts.harness import HostsUnsupported, TestHosts, check_supported


def require_hosts() -> None:
    """Skip the calling test, with the reason, when this machine cannot run test hosts."""
    try:
        check_supported()
        rootfs.cached_root_tarball()
    except (HostsUnsupported, rootfs.RootfsUnavailable) as exc:
        pytest.skip(f"local test hosts unavailable: {exc}")


@pytest.fixture
def hosts_supported() -> None:
    require_hosts()


@pytest.fixture
def test_hosts() -> Iterator[Callable[..., TestHosts]]:
    """Factory: `hosts = test_hosts(2)` starts two hosts; all are torn down after the test."""
    require_hosts()
    started: list[TestHosts] = []

    def make(count: int, names: Sequence[str] | None = None) -> TestHosts:
        hosts = TestHosts(count, names=names)
        started.append(hosts)
        return hosts.start()

    try:
        yield make
    finally:
        for hosts in started:
            hosts.close()

"""Local test hosts: network namespaces + sshd in debootstrap chroots, reached by real SSH."""

from tests.hosts.harness import HostsUnsupported, TestHost, TestHosts

__all__ = ["HostsUnsupported", "TestHost", "TestHosts"]

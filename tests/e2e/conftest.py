from tests.hosts.fixtures import hosts_supported, test_hosts

__all__ = ["hosts_supported", "test_hosts"]

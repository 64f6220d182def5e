"""Spec fields with a grammar accept their language only; each refusal names the field and what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.spec import SpecError, spec_from_mapping
from tests.fleet.test_spec import AWS, DELETE, GCP, ONPREM, with_

BEEGFS = with_(
    with_(with_(ONPREM, "storage.filesystem.kind", "beegfs"), "storage.filesystem.mgs_nids", DELETE),
    "storage.filesystem.fsname",
    DELETE,
)
NVME = with_(ONPREM, "storage.nvmeof", [{"transport": "tcp", "address": "10.1.0.50"}])


def problems(doc: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        spec_from_mapping(doc, source="case.yaml")
    return dict(info.value.problems)


def accepts(doc: dict[str, Any]) -> None:
    spec_from_mapping(doc, source="case.yaml")


def refuses(doc: dict[str, Any], field: str, fragment: str) -> None:
    found = problems(doc)
    assert field in found, found
    assert fragment in found[field], found[field]


@pytest.mark.parametrize(
    "address", ["10.1.0.11", "fe80::1", "2001:db8::5", "gpu01", "gpu01.lab.example.com", "node-7."]
)
def test_host_address_accepts_ips_and_dns_names(address: str) -> None:
    accepts(with_(ONPREM, "hosts.0.address", address))


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.256",
        "gpu01;touch /tmp/x",
        "{{ lookup('pipe','id') }}",
        "-oProxyCommand=id",
        "gpu_01",
        "a" * 64 + ".example",
        "host name",
        "gpu01\nevil",
        "",
        "1.2.3",
    ],
)
def test_host_address_refuses_anything_else(address: str) -> None:
    refuses(
        with_(ONPREM, "hosts.0.address", address),
        "hosts.0.address",
        "IPv4 or IPv6 address or an RFC 1123 DNS name",
    )


def test_beegfs_management_host_is_a_host_address() -> None:
    accepts(with_(BEEGFS, "storage.filesystem.mgmtd_host", "beegfs-mgmt.lab"))
    refuses(
        with_(BEEGFS, "storage.filesystem.mgmtd_host", "mgmt $(id)"),
        "storage.filesystem.mgmtd_host",
        "RFC 1123 DNS name",
    )


@pytest.mark.parametrize(
    "nids",
    [
        ["10.0.0.1@tcp"],
        ["192.168.1.2@o2ib0"],
        ["10.0.0.1@o2ib,10.0.1.1@o2ib1", "10.0.0.2@o2ib,10.0.1.2@o2ib1"],
        ["12@kfi"],
        ["10.0.0.1@tcp3"],
    ],
)
def test_lustre_nids_accept_lustre_syntax(nids: list[str]) -> None:
    accepts(with_(ONPREM, "storage.filesystem.mgs_nids", nids))


@pytest.mark.parametrize(
    ("nid", "fragment"),
    [
        ("10.0.0.1", "<address>@<network>"),
        ("mgs@tcp", "take an IPv4 address"),
        ("2001:db8::1@tcp", "take an IPv4 address"),
        ("10.0.0.1@ethernet", "<address>@<network>"),
        ("10.0.0.1@tcp:10.0.0.2@tcp", "<address>@<network>"),
        ("abc@kfi", "numeric address"),
        ("10.0.0.1@tcp; reboot", "<address>@<network>"),
        ("", "<address>@<network>"),
    ],
)
def test_lustre_nids_refuse_anything_else(nid: str, fragment: str) -> None:
    refuses(with_(ONPREM, "storage.filesystem.mgs_nids", [nid]), "storage.filesystem.mgs_nids.0", fragment)


@pytest.mark.parametrize(
    "nqn",
    [
        "nqn.2014-08.org.nvmexpress.discovery",
        "nqn.2016-06.io.spdk:cnode1",
        "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
        "nqn.2019-10.com.example:storage/pool-1.vol:2",
        "nqn.2020-01.com.example:" + "x" * (223 - len("nqn.2020-01.com.example:")),
    ],
)
def test_nqn_accepts_the_nvme_forms(nqn: str) -> None:
    accepts(with_(NVME, "storage.nvmeof.0.nqn", nqn))


@pytest.mark.parametrize(
    "nqn",
    [
        "nqn.2020-01.com.example:" + "x" * (224 - len("nqn.2020-01.com.example:")),
        "nqn.2020-01.com.example:" + "é" * 100,  # 200 characters but 224 bytes in UTF-8
        "nqn.2014-08.org.nvmexpress:uuid:not-a-uuid",
        "nqn.2020-13.com.example:x",
        "nqn.20-01.com.example:x",
        "nqn.2020-01.example:x",
        "iqn.2020-01.com.example:x",
        "nqn.2020-01.com.example:a b",
        "nqn.2020-01.com.example:{{ lookup('pipe','id') }}",
        "nqn.2020-01.com.example:$(id)",
        "nqn.2020-01.com.example:x\nnqn.2020-01.com.evil:y",
    ],
)
def test_nqn_refuses_anything_else(nqn: str) -> None:
    refuses(
        with_(NVME, "storage.nvmeof.0.nqn", nqn), "storage.nvmeof.0.nqn", "nqn.<yyyy-mm>.<reverse domain>"
    )


@pytest.mark.parametrize("address", ["rdma-target.lab", "10.1.0.50; id", "", "10.1.0.500"])
def test_nvmeof_address_is_an_ip(address: str) -> None:
    refuses(
        with_(NVME, "storage.nvmeof.0.address", address), "storage.nvmeof.0.address", "IPv4 or IPv6 address"
    )


def test_nvmeof_ipv6_address_and_port() -> None:
    accepts(with_(NVME, "storage.nvmeof.0.address", "fd00::50"))
    refuses(with_(NVME, "storage.nvmeof.0.port", "4420"), "storage.nvmeof.0.port", "valid integer")
    refuses(with_(NVME, "storage.nvmeof.0.port", 70000), "storage.nvmeof.0.port", "65535")


@pytest.mark.parametrize(
    ("component", "version"),
    [
        ("driver", "570.133.20"),
        ("cuda", "12.8"),
        ("nccl", "2.21.5-1+cuda12.4"),
        ("ofed", "24.10-1.1.4.0"),
        ("ofed", "MLNX_OFED_LINUX-24.10-1.1.4.0"),
        ("vbios", "96.00.5E.00.01"),
        ("kernel", "5.15.0-1061-aws"),
        ("fleetforge", "0.4.0rc1"),
        ("firmware", "28.39.1002"),
        ("driver", "1:570.133.20-1"),
    ],
)
def test_pinned_versions_accept_real_versions(component: str, version: str) -> None:
    accepts(with_(ONPREM, "validation.pinned_versions", {component: version}))


@pytest.mark.parametrize(
    "version",
    [
        "570 .133",
        "{{ 570 }}",
        "570.133.20; reboot",
        "'570'",
        "$(id)",
        "latest",
        "",
        "v" * 65,
        "570..1",
        "570.",
        570,
    ],
)
def test_pinned_versions_refuse_anything_else(version: Any) -> None:
    found = problems(with_(ONPREM, "validation.pinned_versions", {"driver": version}))
    assert "validation.pinned_versions.driver" in found, found


@pytest.mark.parametrize("mount", ["/lustre", "/mnt/scratch", "/data/fsx-01", "/home/shared", "/var/scratch"])
def test_mount_point_accepts_normal_paths(mount: str) -> None:
    accepts(with_(ONPREM, "storage.filesystem.mount_point", mount))


@pytest.mark.parametrize(
    ("mount", "fragment"),
    [
        ("/", "would hide"),
        ("/etc", "under /etc"),
        ("/etc/ssh", "under /etc"),
        ("/usr/local", "under /usr"),
        ("/proc", "under /proc"),
        ("/sys/fs", "under /sys"),
        ("/dev/shm", "under /dev"),
        ("/boot", "under /boot"),
        ("/lib64", "under /lib64"),
        ("/run/lustre", "under /run"),
        ("/var/lib/docker", "under /var/lib"),
        ("/var", "would hide"),
        ("/mnt", "would hide"),
        ("lustre", "not absolute"),
        ("/lustre/", "not normalized"),
        ("//lustre", "not normalized"),
        ("/data/../etc", "never . or .."),
        ("/data/./x", "never . or .."),
        ("/data/$(id)", "letters, digits"),
    ],
)
def test_mount_point_refuses_system_trees_and_unnormalized_paths(mount: str, fragment: str) -> None:
    refuses(
        with_(ONPREM, "storage.filesystem.mount_point", mount), "storage.filesystem.mount_point", fragment
    )


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        ("nodes", True, "valid integer"),
        ("nodes", "16", "valid integer"),
        ("nodes", "1_6", "valid integer"),
        ("nodes", 16.0, "valid integer"),
        ("spares", False, "valid integer"),
        ("network.vpc_cidr", 0, "not an IPv4 range"),
        ("network.vpc_cidr", "10.64.0.0", "not an IPv4 range"),
        ("network.ssh_cidr", 0, "not an IPv4 range"),
        ("network.ssh_cidr", 167772160, "not an IPv4 range"),
        ("storage.filesystem.capacity_gib", "9600", "valid integer"),
        ("storage.filesystem.capacity_gib", True, "valid integer"),
        ("storage.filesystem.throughput_mbps_per_tib", "250", "valid integer"),
        ("storage.checkpoints.retention_days", True, "valid integer"),
        ("validation.mad_k", True, "valid number"),
        ("validation.mad_k", "4", "valid number"),
        ("validation.mad_k", float("nan"), "finite number"),
    ],
)
def test_strict_types(path: str, value: Any, fragment: str) -> None:
    refuses(with_(AWS, path, value), path, fragment)


def test_capacity_tib_is_a_finite_number() -> None:
    doc = with_(GCP, "storage.filesystem.capacity_gib", DELETE)
    for bad in (float("inf"), True, "36"):
        found = problems(with_(doc, "storage.filesystem.capacity_tib", bad))
        assert "storage.filesystem.capacity_tib" in found, found


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("image", "ami-0abc1234 ; id"),
        ("capacity.reservation_id", "{{x}}"),
        ("network.bastion", "jump host"),
    ],
)
def test_cloud_ids_have_a_safe_character_set(path: str, value: str) -> None:
    refuses(with_(GCP, path, value), path, "not a resource id")

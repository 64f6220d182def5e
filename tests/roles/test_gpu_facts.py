"""gpu_facts: its local fact (roles/gpu_facts/files/gpu.fact) over PCI device trees laid out as
sysfs lays them out (one folder per function holding vendor, device, class, numa_node and, where
the function has Vital Product Data, vpd), and the role's check of the NVSwitch fabric a fleet's
SKU expects, in a play on this machine.

The HGX B200 tree is after the public record: its NVSwitches are no PCI functions of the host
(NVIDIA/gpu-operator#2781, on p6-b200.48xlarge, manages them through the InfiniBand stack);
NVIDIA's own start-up tells their management functions by SW_MNG in the VPD
(NVIDIA/gpu-driver-container, nvidia-driver, _assert_nvlink5_system), and a DGX B200 logs four of
them, mlx5_0 to mlx5_3 (siderolabs/extensions#895). ConnectX-7 is 15b3:1021 (pci.ids, "MT2910
Family [ConnectX-7]"). The VPD bytes are built here to the PCI VPD format (identifier string,
read-only keywords, RV checksum, end tag) with the fields `lspci -vv` shows for a ConnectX-7
adapter. Which keyword carries the mark on a real board is not public here; the fact does not
depend on it: like NVIDIA's script it looks for the mark anywhere in the VPD.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.local_play import local_hosts, run_play

FACT = ROOT / "roles" / "gpu_facts" / "files" / "gpu.fact"
B200 = "0x2901"
H100 = "0x2330"
NVSWITCH = "0x22a3"
CONNECTX7 = "0x1021"


def _load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("gpu_fact", str(FACT))
    spec = importlib.util.spec_from_loader("gpu_fact", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def vpd(name: str, fields: dict[str, str]) -> bytes:
    """PCI VPD: an identifier string (tag 0x82), read-only keywords (0x90) closed by RV, whose
    first byte makes every byte up to it sum to zero, and the end tag (0x78)."""
    ident = name.encode()
    body = b"".join(k.encode() + bytes([len(v)]) + v.encode() for k, v in fields.items())
    head = bytes([0x82]) + len(ident).to_bytes(2, "little") + ident
    ro_len = len(body) + 3 + 1  # RV's keyword, length and checksum byte
    ro = bytes([0x90]) + ro_len.to_bytes(2, "little") + body + b"RV\x01"
    checksum = (-sum(head + ro)) % 256
    return head + ro + bytes([checksum]) + bytes([0x78])


def connectx7(serial: str, extra: str = "") -> bytes:
    return vpd(
        "NVIDIA ConnectX-7 HHHL Adapter Card, 400GbE / NDR IB",
        {
            "PN": "MCX75310AAS-NEAT",
            "EC": "A6",
            "SN": serial,
            "V0": "PCIeGen5 x16",
            "VA": "MLX:MN=MLNX:CSKU=V2:UUID=V3:PCI=V0:MODL=CX75310A" + extra,
        },
    )


def function(
    root: Path, address: str, vendor: str, device: str, pci_class: str, vpd_bytes: bytes | None = None
) -> Path:
    base = root / address
    base.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device), ("class", pci_class), ("numa_node", "0")):
        (base / name).write_text(value + "\n")
    if vpd_bytes is not None:
        (base / "vpd").write_bytes(vpd_bytes)
    return base


def scan(root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    fact = _load()
    monkeypatch.setattr(fact, "PCI", str(root))
    fact.main()
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_the_format_helper_writes_a_vpd_whose_checksum_holds() -> None:
    data = connectx7("MT2232XZ05V6")
    rv = data.index(b"RV\x01")
    assert sum(data[: rv + 4]) % 256 == 0
    assert data[-1] == 0x78


def test_an_hgx_b200_shows_its_switch_management_ports_and_no_pci_nvswitch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(8):
        function(tmp_path, f"0000:{0x18 + i:02x}:00.0", "0x10de", B200, "0x030200")
    for i in range(4):  # the NVSwitch management functions
        function(
            tmp_path,
            f"0000:{0x60 + i:02x}:00.0",
            "0x15b3",
            CONNECTX7,
            "0x020700",
            connectx7(f"SW{i}", ":SMDL=SW_MNG"),
        )
    for i in range(8):  # the compute fabric's NICs: same ids, no mark
        function(tmp_path, f"0000:{0x80 + i:02x}:00.0", "0x15b3", CONNECTX7, "0x020700", connectx7(f"MT{i}"))
    # A virtual function of a NIC: never read (a port is a physical function), even were it to fail.
    vf = function(tmp_path, "0000:90:00.1", "0x15b3", "0x101e", "0x020700")
    (vf / "physfn").symlink_to(tmp_path / "0000:80:00.0")
    (vf / "vpd").mkdir()
    got = scan(tmp_path, capsys, monkeypatch)
    assert got["error"] is None
    assert (got["nvidia_gpus"], got["nvswitches"], got["nvlink5_switch_ports"]) == (8, 0, 4)
    ports = [d for d in got["devices"] if d["kind"] == "nvlink5_switch_port"]
    assert [d["address"] for d in ports] == [f"0000:{0x60 + i:02x}:00.0" for i in range(4)]
    assert {d["vendor"] for d in ports} == {"mellanox"}
    assert got["unreadable_vpd"] == []
    assert got["other_accelerators"] == 0  # a NIC is no accelerator


def test_an_hgx_h100_shows_pci_nvswitches_and_no_management_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(8):
        function(tmp_path, f"0000:{0x18 + i:02x}:00.0", "0x10de", H100, "0x030200")
    for i in range(4):
        function(tmp_path, f"0000:{0x05 + i:02x}:00.0", "0x10de", NVSWITCH, "0x068000")
    function(tmp_path, "0000:80:00.0", "0x15b3", CONNECTX7, "0x020700", connectx7("MT0"))
    got = scan(tmp_path, capsys, monkeypatch)
    assert (got["nvidia_gpus"], got["nvswitches"], got["nvlink5_switch_ports"]) == (8, 4, 0)


def test_a_vpd_that_cannot_be_read_is_named_not_taken_for_a_plain_nic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    function(tmp_path, "0000:18:00.0", "0x10de", B200, "0x030200")
    broken = function(tmp_path, "0000:60:00.0", "0x15b3", CONNECTX7, "0x020700")
    (broken / "vpd").mkdir()  # reading it fails, as a VPD that times out does (EIO)
    got = scan(tmp_path, capsys, monkeypatch)
    assert got["nvlink5_switch_ports"] == 0
    assert [u["address"] for u in got["unreadable_vpd"]] == ["0000:60:00.0"]
    assert got["unreadable_vpd"][0]["error"]


def test_the_mark_outside_a_connectx_function_counts_for_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another vendor's VPD that happens to hold the string is not an NVSwitch management port.
    function(tmp_path, "0000:70:00.0", "0x8086", "0x1593", "0x020000", vpd("E810", {"VA": "SMDL=SW_MNG"}))
    got = scan(tmp_path, capsys, monkeypatch)
    assert got["nvlink5_switch_ports"] == 0 and got["devices"] == []


# Host -> (gpu_facts_override, gpu_facts_expected_nvswitch_fabric, the message it fails with or None).
FABRICS: dict[str, tuple[dict[str, int], str, str | None]] = {
    "b200": ({"nvidia_gpus": 8, "nvlink5_switch_ports": 4}, "nvlink5", None),
    "h100": ({"nvidia_gpus": 8, "nvswitches": 4}, "nvswitch", None),
    "unchecked": ({"nvidia_gpus": 8}, "", None),
    "b200_unseen": (
        {"nvidia_gpus": 8},
        "nvlink5",
        "b200_unseen shows no NVSwitch, the fleet's SKU has NVLink 5 switch-management ports "
        "(fourth-generation NVSwitch)",
    ),
    "h100_board_for_b200": (
        {"nvidia_gpus": 8, "nvswitches": 4},
        "nvlink5",
        "h100_board_for_b200 shows NVSwitches on the PCI bus (NVLink 4 or earlier), the fleet's SKU has "
        "NVLink 5 switch-management ports",
    ),
    "typo": ({"nvidia_gpus": 8}, "NVLink5", "gpu_facts_expected_nvswitch_fabric"),
}


# What gpu.fact printed before it read VPDs: an installed copy that a --check or --tags run did not
# replace must not stand for "no switch-management port".
OLD_FACT = {
    "scanned": "/sys/bus/pci/devices",
    "error": None,
    "devices": [],
    "nvidia_gpus": 8,
    "nvswitches": 0,
}


def test_a_host_whose_nvswitch_fabric_is_not_the_skus_fails_naming_both(tmp_path: Path) -> None:
    per_host = {
        name: {
            "gpu_facts_override": override,
            "gpu_facts_expected_nvswitch_fabric": expected,
            "gpu_facts_fact_dir": str(tmp_path / name),
        }
        for name, (override, expected, _) in FABRICS.items()
    }
    old = tmp_path / "old_fact"
    old.mkdir()
    (old / "gpu.fact").write_text(f"#!/bin/sh\necho '{json.dumps(OLD_FACT)}'\n")
    (old / "gpu.fact").chmod(0o755)
    per_host["old_fact"] = {"gpu_facts_fact_dir": str(old)}
    hosts = local_hosts(per_host)
    tasks = [
        {"name": "gpu_facts", "ansible.builtin.include_role": {"name": "gpu_facts"}, "tags": ["always"]},
        {"name": "Fabric", "ansible.builtin.debug": {"var": "gpu_facts_nvswitch_fabric"}, "tags": ["always"]},
    ]
    done = run_play(
        tmp_path,
        {"all": {"hosts": hosts}},
        tasks,
        env={
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
            # The facts concern only (its checks are tagged always): nothing is installed here.
            "ANSIBLE_RUN_TAGS": "gpu_facts:facts",
        },
    )
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-2000:]  # 2: some host failed
    tasks_run = json.loads(done.stdout)["plays"][0]["tasks"]
    failed = {
        name: result["msg"]
        for task in tasks_run
        for name, result in task["hosts"].items()
        if result.get("failed")
    }
    assert set(failed) == {name for name, (_, _, why) in FABRICS.items() if why}
    for name, (_, _, why) in FABRICS.items():
        if why:
            assert why in failed[name], failed[name]
    fabric = {name: r["gpu_facts_nvswitch_fabric"] for name, r in tasks_run[-1]["hosts"].items()}
    assert (
        fabric.pop("b200") == "nvlink5"
        and fabric.pop("h100") == "nvswitch"
        and fabric.pop("unchecked") == "none"
    )
    # The old fact was passed over for this machine's own scan.
    assert set(fabric) == {"old_fact"}
    reports = [
        t["hosts"]["old_fact"]["msg"]
        for t in tasks_run
        if t["task"]["name"].endswith(" : Report the accelerators found")
    ]
    assert len(reports) == 1 and "per a direct scan:" in reports[0], reports

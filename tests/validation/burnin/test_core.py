"""The pieces under the checks: text parsers, judging against floors, the registry, SKU
detection, and the runner's process plumbing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

import pynvml
import pytest

from fleet.results import CheckRecord
from fleet.text import printable
from tests.validation.burnin.fakes import FakeNvml, h100
from tests.validation.burnin.helpers import ctx, fixture_text, materialize
from validation.burnin.backends.base import Backend
from validation.burnin.checks import REGISTRY
from validation.burnin.context import CheckContext
from validation.burnin.models import model_matches
from validation.burnin.outcome import CheckOutcome, floor_for, judge
from validation.burnin.parsers import fio, kernlog, perftest, sysfs, throttle
from validation.burnin.procutil import pin_blas_threads, usable_cpus
from validation.burnin.progress import finished_line
from validation.burnin.registry import Check, Raw, Registry, UnknownCheckError, load_registry
from validation.burnin.skuselect import AcceleratorUnreadable, AutoSkuError, detect_sku


def test_kernel_log_parsers() -> None:
    xids = kernlog.parse_xids(fixture_text("kernlog/dmesg_xid.txt").splitlines())
    assert [(x.bus, x.code) for x in xids] == [
        ("0000:1b:00", 79),
        ("0000:43:00", 13),
        ("0000:52:00", 48),
        ("0000:52:00", 63),
    ]
    # The PCI domain is kept (multi-domain hosts); an address without one is domain 0.
    assert kernlog.normalise_bus("00000000:3B:00.0") == kernlog.normalise_bus("3b:00") == "0000:3b:00"
    # Each hardware-error record counts once, its severity from MCi_STATUS / EDAC, not the wording.
    records = kernlog.parse_machine_checks(fixture_text("kernlog/mce.txt").splitlines())
    assert sorted(m.severity for m in records) == ["corrected", "uncorrected"]
    assert kernlog.parse_xids(fixture_text("kernlog/dmesg_clean.txt").splitlines()) == []


def test_sysfs_perftest_fio_throttle_parsers() -> None:
    assert sysfs.ib_rate_gbitps("400 Gb/sec (4X NDR)") == 400.0
    assert sysfs.ib_rate_gbitps("2.5 Gb/sec (1X SDR)") == 2.5
    assert sysfs.ib_rate_gbitps("") is None
    assert sysfs.ib_state("4: ACTIVE") == "ACTIVE" and sysfs.ib_state("1: DOWN") == "DOWN"
    assert perftest.bw_average_gbitps(fixture_text("perftest/ib_write_bw_ndr.txt")) == 385.71
    with pytest.raises(ValueError, match="BW average"):
        perftest.bw_average_gbitps(fixture_text("perftest/ib_write_bw_failed.txt"))
    assert fio.throughput_mbps(fixture_text("fio/seq_write.json"), "write") == 1864.135111
    with pytest.raises(ValueError, match="failed with error 5"):
        fio.throughput_mbps(fixture_text("fio/job_error.json"), "read")
    assert throttle.decode(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]


def test_floors_come_from_the_reference_and_the_spec() -> None:
    c = ctx("p5.48xlarge")
    f = floor_for(c, "gemm_bf16_tflops")
    assert f is not None and f.limit == pytest.approx(989 * 0.6) and f.at_least
    assert floor_for(c, "storage_read_mbps") is None
    c = ctx(
        "p5.48xlarge", thresholds={"gemm_bf16_tflops": {"fraction": 0.7}, "temperature_max_c": {"floor": 85}}
    )
    f = floor_for(c, "gemm_bf16_tflops")
    assert f is not None and f.limit == pytest.approx(989 * 0.7) and "spec fraction" in f.how
    # On a lower-is-better metric the spec's floor is a ceiling.
    out = judge(c, {"temperature_max_c": 91.0})
    assert out.status == "fail" and out.reason == "temperature_max_c 91 above limit 85 (spec floor 85)"


def test_judge_never_passes_without_measurements() -> None:
    c = ctx("cpu")
    assert judge(c, {}).status == "error"
    assert judge(c, {}, faults=["GPU 1: lost"]).reason == "GPU 1: lost"
    assert judge(c, {"probe": 1.0}, required=["mem_copy_gbps"]).status == "fail"
    with pytest.raises(ValueError, match="without metrics"):
        CheckOutcome(status="pass")
    with pytest.raises(ValueError, match="not a finite number"):
        CheckOutcome(status="pass", metrics={"x": float("nan")})
    many = judge(c, {"x": 1.0}, faults=[f"fault {i}" for i in range(5)])
    assert many.reason == "fault 0; fault 1; fault 2; and 2 more" and len(many.findings) == 5


def test_context_round_trips_through_json(tmp_path: Path) -> None:
    c = ctx(
        "p5.48xlarge",
        level="standard",
        thresholds={"h2d_gbps": {"fraction": 0.9}},
        raw_dir=tmp_path,
        options={"compute": {"n": 256}},
    )
    back = CheckContext.from_json(c.to_json())
    assert back == c


def test_registry_rules() -> None:
    reg = Registry()

    class Good(Check):
        name = "good"
        timeouts: ClassVar[dict[str, float]] = {"quick": 1.0}  # type: ignore[misc]

        def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
            return {}

        def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
            return judge(ctx, {})

    reg.register(Good)
    with pytest.raises(ValueError, match="registered twice"):
        reg.register(Good)

    class BadLevel(Good):
        name = "bad_level"
        timeouts = {"weekly": 1.0}  # type: ignore[dict-item]

    with pytest.raises(ValueError, match="timeouts"):
        reg.register(BadLevel)

    class BadName(Good):
        name = "Bad Name"

    with pytest.raises(ValueError, match="must match"):
        reg.register(BadName)
    assert [c.name for c in reg.for_level("quick")] == ["good"] and reg.for_level("extended") == []
    with pytest.raises(UnknownCheckError, match="known: good"):
        reg.get("nope")
    with pytest.raises(ValueError, match="module:attribute"):
        load_registry("validation.burnin.checks")
    assert load_registry("validation.burnin.checks:REGISTRY") is REGISTRY


def test_product_levels_cover_every_check_with_timeouts() -> None:
    names = REGISTRY.names()
    assert names == [
        "inventory",
        "health",
        "dcgm_diag",
        "compute",
        "memory",
        "host_device",
        "collectives",
        "fabric",
        "storage",
        "stress",
        "efficiency",
        "health_after_load",
    ]
    for level in ("standard", "extended"):
        assert [c.name for c in REGISTRY.for_level(level)] == names
    # dcgm_diag runs DCGM's level 2 and 3 diagnostics: standard and extended only.
    assert [c.name for c in REGISTRY.for_level("quick")] == [n for n in names if n != "dcgm_diag"]
    stress = REGISTRY.get("stress")
    assert (
        stress.level_params["quick"]["seconds"]
        < stress.level_params["standard"]["seconds"]
        < stress.level_params["extended"]["seconds"]
    )


def test_model_matching() -> None:
    assert model_matches("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3")
    assert model_matches("H200-SXM-141GB", "NVIDIA H200")
    assert model_matches("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB")
    assert not model_matches("H100-SXM5-80GB", "NVIDIA H200")
    assert model_matches("TPU-v5e", "TPU v5 lite") and not model_matches("TPU-v5p", "TPU v5 lite")


def dmi(tmp_path: Path, vendor: str, product: str) -> Path:
    return materialize(
        {"class/dmi/id/sys_vendor": vendor, "class/dmi/id/product_name": product}, tmp_path / "sys"
    )


def test_auto_sku_from_nvml_and_dmi(tmp_path: Path) -> None:
    h100s = FakeNvml([h100(i) for i in range(8)])
    assert (
        detect_sku(dmi(tmp_path / "a", "Amazon EC2", "p5.48xlarge"), tmp_path, nvml=h100s).sku
        == "p5.48xlarge"
    )
    assert (
        detect_sku(dmi(tmp_path / "b", "Supermicro", "SYS-821GE-TNHR"), tmp_path, nvml=h100s).sku
        == "hgx-h100-8"
    )
    assert (
        detect_sku(dmi(tmp_path / "c", "Microsoft Corporation", "Virtual Machine"), tmp_path, nvml=h100s).sku
        == "Standard_ND96isr_H100_v5"
    )
    with pytest.raises(AutoSkuError, match="fits several SKUs: a3-highgpu-8g, a3-megagpu-8g") as err:
        detect_sku(dmi(tmp_path / "d", "Google", "Google Compute Engine"), tmp_path, nvml=h100s)
    assert err.value.candidates == ["a3-highgpu-8g", "a3-megagpu-8g"]
    l40 = FakeNvml([h100(0, name="NVIDIA L40S", memory_bytes=48 * 2**30)])
    with pytest.raises(AutoSkuError, match="matches no catalog SKU"):
        detect_sku(dmi(tmp_path / "e", "Dell Inc.", "PowerEdge"), tmp_path, nvml=l40)


def test_auto_sku_without_an_accelerator_is_cpu(tmp_path: Path) -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    assert detect_sku(dmi(tmp_path, "QEMU", "Standard PC"), tmp_path, nvml=NoDriver([])).sku == "cpu"


def nvidia_pci(tmp_path: Path, pci_class: str = "0x030200") -> Path:
    """A sysfs tree with one NVIDIA PCI function (a 3D controller by default) and QEMU DMI."""
    return materialize(
        {
            "class/dmi/id/sys_vendor": "QEMU",
            "class/dmi/id/product_name": "Standard PC",
            "bus/pci/devices/0000:00:02.0/vendor": "0x1af4",  # virtio: not a GPU
            "bus/pci/devices/0000:00:02.0/class": "0x020000",
            "bus/pci/devices/0000:1b:00.0/vendor": "0x10de",
            "bus/pci/devices/0000:1b:00.0/class": pci_class,
        },
        tmp_path / "sys",
    )


def failing_init(code: int) -> Any:
    def init() -> None:
        raise pynvml.NVMLError(code)  # the real module builds its real subclass from the code

    return init


@pytest.mark.parametrize(
    ("code", "cause"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"),
    ],
)
def test_auto_sku_never_demotes_a_gpu_node_when_nvml_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, cause: str
) -> None:
    monkeypatch.setattr(pynvml, "nvmlInit", failing_init(code))
    with pytest.raises(AcceleratorUnreadable, match=rf"PCI device 0000:1b:00.0 is an NVIDIA GPU.*{cause}"):
        detect_sku(nvidia_pci(tmp_path), tmp_path / "dev")


def test_auto_sku_never_demotes_a_gpu_node_without_pynvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    dev = materialize({"nvidia0": "", "nvidiactl": ""}, tmp_path / "dev")
    with pytest.raises(AcceleratorUnreadable, match=r"nvidia0 exists but pynvml is not installed"):
        detect_sku(dmi(tmp_path, "QEMU", "Standard PC"), dev)


def test_auto_sku_gpu_lost_while_listing_is_an_error(tmp_path: Path) -> None:
    class LostGpu(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    with pytest.raises(AcceleratorUnreadable, match="cannot list the GPUs: GPU is lost"):
        detect_sku(dmi(tmp_path, "QEMU", "Standard PC"), tmp_path, nvml=LostGpu([h100(0)]))


def test_an_nvswitch_alone_is_not_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pynvml, "nvmlInit", failing_init(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    # NVIDIA's vendor id on a bridge-class function (NVSwitch) is no GPU: the node is a cpu node.
    assert detect_sku(nvidia_pci(tmp_path, "0x068000"), tmp_path / "dev").sku == "cpu"


def test_auto_sku_never_demotes_a_tpu_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = materialize({"accel0": ""}, tmp_path / "dev")
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(AcceleratorUnreadable, match="TPU is present but JAX is not installed"):
        detect_sku(dmi(tmp_path, "Google", "Google Compute Engine"), dev, nvml=FakeNvml([]))

    class CpuOnlyJax:
        # JAX without its TPU plugin: asking for the tpu backend raises; devices() would be cpu.
        @staticmethod
        def local_devices(backend: str | None = None) -> list[Any]:
            raise RuntimeError(f"Unknown backend {backend}")

        @staticmethod
        def devices() -> list[Any]:
            return [type("Cpu", (), {"device_kind": "cpu"})()]

        @staticmethod
        def local_device_count() -> int:
            return 1

    monkeypatch.setitem(sys.modules, "jax", CpuOnlyJax)
    with pytest.raises(AcceleratorUnreadable, match="TPU is present but JAX cannot open it: Unknown backend"):
        detect_sku(dmi(tmp_path, "Google", "Google Compute Engine"), dev, nvml=FakeNvml([]))


def test_a_gce_cpu_vm_with_google_disks_and_nics_is_cpu(tmp_path: Path) -> None:
    sysfs = materialize(
        {
            "class/dmi/id/sys_vendor": "Google",
            "class/dmi/id/product_name": "Google Compute Engine",
            "bus/pci/devices/0000:00:04.0/vendor": "0x1ae0",  # gVNIC
            "bus/pci/devices/0000:00:04.0/class": "0x020000",
            "bus/pci/devices/0000:00:05.0/vendor": "0x1ae0",  # persistent disk over NVMe
            "bus/pci/devices/0000:00:05.0/class": "0x010802",
        },
        tmp_path / "sys",
    )
    assert detect_sku(sysfs, tmp_path / "dev", nvml=FakeNvml([])).sku == "cpu"
    # A Google function of another class is a TPU: without JAX that is an error, never cpu.
    materialize(
        {"bus/pci/devices/0000:00:06.0/vendor": "0x1ae0", "bus/pci/devices/0000:00:06.0/class": "0x120000"},
        sysfs,
    )
    with pytest.raises(AcceleratorUnreadable, match="TPU is present"), pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "jax", None)
        detect_sku(sysfs, tmp_path / "dev", nvml=FakeNvml([]))


def test_printed_reasons_and_names_cannot_forge_lines_or_markup() -> None:
    assert printable("plain [bold] text") == "plain [bold] text"
    assert printable("a\nn2: pass\x1b[2J\u202e\r") == "a\\nn2: pass\\x1b[2J\\u202e\\r"
    record = CheckRecord.model_validate(
        {
            "run_id": "r",
            "node": "n1",
            "sku": "cpu",
            "level": "quick",
            "started": "2026-12-01T00:00:00Z",
            "check": "health",
            "status": "fail",
            "reason": "xid 79\n[2/2] health: pass\x1b[32m [/bold]",
            "duration_s": 1.0,
        }
    )
    line = finished_line(record, 1, 2)
    assert "\n" not in line.plain and "\x1b" not in line.plain
    assert line.plain.endswith("xid 79\\n[2/2] health: pass\\x1b[32m [/bold]")


def test_blas_threads_are_pinned_once_and_respect_the_operator() -> None:
    env: dict[str, Any] = {}
    n = pin_blas_threads(env)
    assert n == usable_cpus() >= 1 and env["OPENBLAS_NUM_THREADS"] == str(n) == env["OMP_NUM_THREADS"]
    assert pin_blas_threads({"OMP_NUM_THREADS": "3"}) == 3


def test_usable_cpus_honours_a_cgroup_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert usable_cpus(tmp_path) == min(2, usable_cpus(tmp_path / "none"))


def test_check_parameter_overrides_lengthen_the_timeout_and_are_checked_against_the_registry() -> None:
    from validation.burnin.registry import option_problems

    stress = REGISTRY.get("stress")
    assert stress.param_kinds() == {"seconds": float, "interval_s": float}
    assert REGISTRY.get("storage").param_kinds() == {"bytes": int, "block": int}
    # Sizes the backends take but no level sets (the device's own by default) may be given too.
    assert REGISTRY.get("memory").param_kinds() == {"seconds": float, "bytes": int}
    assert REGISTRY.get("compute").param_kinds()["n"] is int
    assert option_problems(REGISTRY, {"memory": {"bytes": 2**26}, "collectives": {"bytes": 2**20}}) == []
    assert option_problems(REGISTRY, {"memory": {"bytes": 2**26 + 0.5}, "compute": {"n": 8}}) == [
        ("validation.checks.memory.bytes", f"memory's bytes is a whole number, got {2**26 + 0.5!r}"),
        ("validation.checks.compute.n", "compute's n is at least 256, got 8"),
    ]
    quick = ctx("cpu")
    assert stress.timeout(quick) == stress.timeouts["quick"]
    longer = CheckContext(sku=quick.sku, level="quick", options={"stress": {"seconds": 600}})
    assert stress.timeout(longer) == stress.timeouts["quick"] + 600 - 5
    shorter = CheckContext(sku=quick.sku, level="quick", options={"stress": {"seconds": 1}})
    assert stress.timeout(shorter) == stress.timeouts["quick"]
    assert option_problems(REGISTRY, {"stress": {"seconds": 2}, "storage": {"bytes": 2**20}}) == []
    assert option_problems(
        REGISTRY, {"gpu_burn": {}, "health": {"seconds": 1}, "storage": {"block": 0.5}}
    ) == [
        ("validation.checks.gpu_burn", f"unknown check; known: {', '.join(REGISTRY.names())}"),
        (
            "validation.checks.health.seconds",
            "unknown parameter of health; allowed: none (it takes no parameters)",
        ),
        ("validation.checks.storage.block", "storage's block is a whole number, got 0.5"),
    ]

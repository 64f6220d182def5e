"""A TPU VM's burn-in: the chips it must find follow its slice (v5e/v6e 1, 4 or 8 on a one-VM slice,
4 on each VM of a larger one; v5p 4), and JAX starts on the VM alone, not waiting for the slice's
other hosts. No TPU here: the inventory check reads the raw JAX answer, the environment is read where
the backend hands over to JAX, and the real JAX runs on its CPU devices."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetforge import exitcodes
from fleetforge.cli import main
from tests.conftest import EXAMPLES, ROOT
from tests.validation.burnin.helpers import ctx, materialize
from validation.burnin import runner
from validation.burnin.backends import tpu as tpu_backend
from validation.burnin.checks import REGISTRY
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome
from validation.burnin.skuselect import detect_sku

KINDS = {"tpu-v5e": "TPU v5 lite", "tpu-v6e": "TPU v6 lite", "tpu-v5p": "TPU v5p"}
HBM_GIB = {"tpu-v5e": 15.75, "tpu-v6e": 31.25, "tpu-v5p": 95.0}


def jax_inventory(sku: str, chips: int) -> dict[str, Any]:
    """What the TPU backend's inventory() returns on a healthy VM of `chips` chips."""
    return {
        "devices": [
            {"index": i, "name": KINDS[sku], "memory_bytes": int(HBM_GIB[sku] * 2**30), "id": i}
            for i in range(chips)
        ],
        "versions": {"jax": "0.10.2", "libtpu": "0.0.17"},
        "host": {},
    }


def inventory(sku: str, chips: int, expected: int | None = None) -> CheckOutcome:
    return REGISTRY.get("inventory").parse(
        jax_inventory(sku, chips), ctx(sku, expected_accelerators=expected)
    )


# ------------------------------------------------------------------ the chips a VM must have


@pytest.mark.parametrize("chips", [1, 4, 8])
@pytest.mark.parametrize("sku", ["tpu-v5e", "tpu-v6e"])
def test_untold_a_v5e_or_v6e_vm_of_any_size_passes(sku: str, chips: int) -> None:
    # A healthy 4-chip VM of a multi-host slice (and the 1-chip VM of a 1x1) is no fault.
    out = inventory(sku, chips)
    assert out.status == "pass", out.findings
    assert out.metrics["accelerator_count"] == chips


@pytest.mark.parametrize("chips", [2, 3, 5, 7, 16])
def test_untold_a_count_no_vm_has_is_refused_naming_the_sizes(chips: int) -> None:
    out = inventory("tpu-v6e", chips)
    assert out.status == "fail"
    assert f"{chips} accelerators found; a tpu-v6e VM has 1, 4 or 8" in out.findings[0]
    assert "--spec" in out.findings[0]


def test_untold_a_v5p_vm_has_four_chips() -> None:
    assert inventory("tpu-v5p", 4).status == "pass"
    for chips in (1, 8):
        out = inventory("tpu-v5p", chips)
        assert out.status == "fail" and f"{chips} accelerators found; tpu-v5p has 4" in out.findings


@pytest.mark.parametrize(("expected", "found"), [(4, 8), (8, 4), (4, 1), (1, 4)])
def test_told_a_count_any_other_is_refused(expected: int, found: int) -> None:
    # A VM of a 4x4 slice that shows 8 chips (or a 2x4 VM that shows 4) is not what was provisioned.
    out = inventory("tpu-v6e", found, expected)
    assert out.status == "fail"
    assert (
        f"{found} accelerators found; each tpu-v6e VM of this fleet's slices has {expected}" in out.findings
    )


@pytest.mark.parametrize("chips", [1, 4, 8])
def test_told_the_count_the_vm_has_passes(chips: int) -> None:
    assert inventory("tpu-v6e", chips, chips).status == "pass"


def test_gpu_nodes_keep_their_one_count() -> None:
    raw = {
        "devices": [
            {"index": i, "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 2**30} for i in range(4)
        ],
        "versions": {},
    }
    out = REGISTRY.get("inventory").parse(raw, ctx("hgx-h100-8"))
    assert out.status == "fail" and "4 accelerators found; hgx-h100-8 has 8" in out.findings


def test_the_told_count_survives_the_trip_to_the_check_worker() -> None:
    c = ctx("tpu-v6e", expected_accelerators=4)
    assert CheckContext.from_json(c.to_json()).expected_accelerators == 4
    assert CheckContext.from_json(ctx("tpu-v6e").to_json()).expected_accelerators is None


def test_burnin_with_the_fleet_spec_is_told_the_slices_chips_per_vm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fleetforge burnin --spec` (what `fleet burnin` and `bringup` pass each node) gives the run
    the chips each VM of the spec's slice has: a v6e 4x4 slice is 4 VMs of 4 chips."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")  # the TPU SKU's library must be present to start
    doc = yaml.safe_load((EXAMPLES / "gcp-tpu-v5e-slice.yaml").read_text())
    doc.update(sku="tpu-v6e", nodes=4, tpu={"topology": "4x4"})
    spec = tmp_path / "fleet.yaml"
    spec.write_text(yaml.safe_dump(doc))
    seen: list[runner.RunOptions] = []

    def stop(opts: runner.RunOptions, progress: Any) -> Any:
        seen.append(opts)
        raise runner.RunError("stopped by the test")

    monkeypatch.setattr(runner, "run_burnin", stop)
    code = main(["burnin", "--spec", str(spec), "--out", str(tmp_path / "o"), "--node", "w0", "-q"])
    capsys.readouterr()
    assert code == exitcodes.USAGE and len(seen) == 1
    assert seen[0].sku.sku == "tpu-v6e" and seen[0].expected_accelerators == 4


# ------------------------------------------------------------------ JAX on one VM of the slice


@pytest.mark.parametrize(
    ("chips", "grid", "visible"),
    [(1, "1,1,1", "0"), (4, "2,2,1", "0,1,2,3"), (8, "2,4,1", "0,1,2,3,4,5,6,7")],
)
def test_a_vm_is_a_slice_of_one_process(chips: int, grid: str, visible: str) -> None:
    assert tpu_backend.single_vm_environment(chips) == {
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "TPU_CHIPS_PER_PROCESS_BOUNDS": grid,
        "TPU_VISIBLE_CHIPS": visible,
    }
    assert tpu_backend.single_vm_environment(3) == {}  # no VM has 3 chips: libtpu decides


def test_the_vms_chips_are_counted_from_dev(tmp_path: Path) -> None:
    vfio = materialize(
        {"vfio/0": "", "vfio/1": "", "vfio/2": "", "vfio/3": "", "vfio/vfio": ""}, tmp_path / "a"
    )
    assert tpu_backend.local_chips(vfio) == 4  # v5e/v5p/v6e: numbered IOMMU groups, not the control node
    accel = materialize({"accel0": "", "accel1": ""}, tmp_path / "b")
    assert tpu_backend.local_chips(accel) == 2
    assert tpu_backend.local_chips(tmp_path / "none") == 0


def test_the_vms_own_count_wins_over_the_told_one(tmp_path: Path) -> None:
    # An 8-chip VM where 4 were expected shows all 8 to JAX, so the inventory check sees the mismatch.
    dev = materialize({f"vfio/{i}": "" for i in range(8)}, tmp_path / "dev")
    env: dict[str, str] = {}
    assert tpu_backend.isolate_vm(env, 4, dev)["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "2,4,1"
    assert env["TPU_VISIBLE_CHIPS"] == "0,1,2,3,4,5,6,7"
    # No chip in /dev: the fleet's count; neither: nothing is set.
    env = {}
    assert tpu_backend.isolate_vm(env, 4, tmp_path / "empty")["TPU_VISIBLE_CHIPS"] == "0,1,2,3"
    assert tpu_backend.isolate_vm({}, None, tmp_path / "empty") == {}


def test_a_chip_count_no_vm_of_the_generation_has_sets_nothing(tmp_path: Path) -> None:
    # Naming a chip the VM lacks, or a grid no VM has, would stop libtpu before the inventory check
    # could say "3 accelerators found".
    three = materialize({f"vfio/{i}": "" for i in range(3)}, tmp_path / "three")
    assert tpu_backend.isolate_vm({}, 4, three, generation="v6e") == {}
    eight = materialize({f"vfio/{i}": "" for i in range(8)}, tmp_path / "eight")
    assert tpu_backend.isolate_vm({}, 4, eight, generation="v5p") == {}
    assert tpu_backend.isolate_vm({}, 4, eight, generation="v6e")["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "2,4,1"
    # Told a count no VM of the generation has, with /dev empty: nothing either.
    assert tpu_backend.isolate_vm({}, 8, tmp_path / "empty", generation="v5p") == {}
    assert (
        tpu_backend.isolate_vm({}, 4, tmp_path / "empty", generation="v5p")["TPU_VISIBLE_CHIPS"] == "0,1,2,3"
    )


@pytest.mark.parametrize(
    "name", ["TPU_VISIBLE_CHIPS", "TPU_PROCESS_BOUNDS", "TPU_HOST_BOUNDS", "TPU_VISIBLE_DEVICES"]
)
def test_a_topology_the_node_sets_is_left_alone(tmp_path: Path, name: str) -> None:
    env = {name: "0,1"}
    assert tpu_backend.isolate_vm(env, 4, tmp_path) == {} and env == {name: "0,1"}


def test_the_backend_sets_the_topology_before_it_imports_jax(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, str | None] = {}

    class NoDevices:
        numpy = None

        @staticmethod
        def local_devices() -> list[Any]:
            return []

        @staticmethod
        def default_backend() -> str:
            return "cpu"

    def fake_import() -> Any:
        seen.update({n: os.environ.get(n) for n in tpu_backend.TOPOLOGY_VARIABLES})
        return NoDevices

    monkeypatch.setattr(tpu_backend, "DEV_ROOT", tmp_path)
    monkeypatch.setattr(tpu_backend, "_import_jax", fake_import)
    with pytest.raises(RuntimeError, match="JAX sees no TPU devices"):
        tpu_backend.JaxBackend(ctx("tpu-v6e", expected_accelerators=4))
    assert seen == {
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "2,2,1",
        "TPU_VISIBLE_CHIPS": "0,1,2,3",
    }


def test_auto_sku_on_a_tpu_vm_sets_the_topology_before_asking_jax(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = materialize({f"vfio/{i}": "" for i in range(4)}, tmp_path / "dev")
    sysfs = materialize(
        {
            "class/dmi/id/sys_vendor": "Google",
            "class/dmi/id/product_name": "Google Compute Engine",
            "bus/pci/devices/0000:00:06.0/vendor": "0x1ae0",
            "bus/pci/devices/0000:00:06.0/class": "0x120000",
        },
        tmp_path / "sys",
    )
    seen: dict[str, str | None] = {}

    class FourChips:
        @staticmethod
        def local_devices(backend: str | None = None) -> list[Any]:
            seen.update({n: os.environ.get(n) for n in tpu_backend.TOPOLOGY_VARIABLES})
            return [type("Chip", (), {"device_kind": "TPU v6 lite"})() for _ in range(4)]

    class NoGpu:
        NVMLError = RuntimeError

        @staticmethod
        def nvmlInit() -> None:
            raise RuntimeError("no driver")

    monkeypatch.setitem(sys.modules, "jax", FourChips)
    assert detect_sku(sysfs, dev, nvml=NoGpu).sku == "tpu-v6e"
    assert seen["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "2,2,1" and seen["TPU_VISIBLE_CHIPS"] == "0,1,2,3"


def test_real_jax_starts_after_the_topology_is_set_and_runs_on_cpu(tmp_path: Path) -> None:
    """The backend's own import path on real JAX (its CPU devices stand in for chips; libtpu is not
    loaded, so the variables are only read back): JAX is not imported before the backend sets them."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    script = textwrap.dedent(
        f"""
        import json, os, sys
        from pathlib import Path
        from tests.validation.burnin.helpers import ctx
        from validation.burnin.backends import tpu
        before = "jax" in sys.modules
        tpu.DEV_ROOT = Path({str(tmp_path)!r})
        backend = tpu.JaxBackend(ctx("tpu-v6e", expected_accelerators=4), platform="cpu")
        env = {{n: os.environ.get(n) for n in tpu.TOPOLOGY_VARIABLES}}
        psum = backend.allreduce(1 << 12, 1) if len(backend.devices) > 1 else {{"correct": True}}
        print(json.dumps({{"jax_before": before, "env": env, "devices": len(backend.devices),
                          "correct": psum["correct"]}}))
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in tpu_backend.OPERATOR_TOPOLOGY}
    env.update(JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["jax_before"] is False and result["devices"] >= 1 and result["correct"] is True
    assert result["env"] == {
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "2,2,1",
        "TPU_VISIBLE_CHIPS": "0,1,2,3",
    }

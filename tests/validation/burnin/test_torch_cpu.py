"""The torch backend's own code (validation/burnin/probes/torch_cuda.py) on real PyTorch CPU tensors:
real bf16 / fp16 / fp8 arithmetic, real conversions and indexing, real round-off against the
compute check's tolerances. Only torch.cuda and "cuda:N" devices are stood in for
(tests/validation/burnin/torch_cpu_shim.py)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")

from tests.validation.burnin.torch_cpu_shim import CudaLikeTensor, TorchOnCpu, torch
from validation.burnin.checks.compute import TOLERANCE
from validation.burnin.probes.torch_cuda import TorchCuda

N = 96


def backend(devices: int = 2, capability: tuple[int, int] = (9, 0), shim: Any | None = None) -> TorchCuda:
    return TorchCuda(shim or TorchOnCpu(devices, capability), seed=3)


def test_true_fp32_is_requested_and_fp8_offered_only_where_tensor_cores_have_it() -> None:
    hopper = backend()
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert hopper.gemm_dtypes() == ["bf16", "fp16", "fp8", "fp32"]
    assert backend(capability=(8, 0)).gemm_dtypes() == ["bf16", "fp16", "fp32"]  # A100: no fp8


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32", "fp8"])
def test_gemm_products_verify_within_the_compute_tolerance(dtype: str) -> None:
    raw = backend().gemm([dtype], N, seconds=0.01, buffers=2)
    assert raw["unsupported"] == {} and raw["torch"] == str(torch.__version__)
    (result,) = raw["results"]
    assert result["dtype"] == dtype and len(result["devices"]) == 2
    for dev in result["devices"]:
        assert dev["nonfinite"] == 0 and dev["tflops"] > 0
        # Real round-off of the dtype: above zero, under the tolerance the compute check applies.
        assert 0 < dev["max_scaled_err"] < TOLERANCE[dtype]
    # Same seed on both devices: identical devices compute bit-identical products.
    assert result["devices"][0]["checksum"] == result["devices"][1]["checksum"]


def test_fp8_rows_are_sampled_without_indexing_an_fp8_tensor() -> None:
    # The shim refuses x[rows] on float8, as CUDA builds without fp8 index kernels do.
    a = torch.randn(8, 8).to(torch.float8_e4m3fn).as_subclass(CudaLikeTensor)
    with pytest.raises(NotImplementedError, match="index_cuda"):
        a[torch.tensor([1, 2])]
    raw = backend().gemm(["fp8"], N, seconds=0.01, buffers=1)
    assert raw["results"][0]["devices"][0]["max_scaled_err"] < TOLERANCE["fp8"]


def test_a_bad_multiplier_is_caught_by_the_verification_on_real_products() -> None:
    shim = TorchOnCpu(2)
    real_matmul = torch.matmul
    broken = {"on": False}

    def matmul(a: Any, b: Any, out: Any = None) -> Any:
        res = real_matmul(a, b, out=out)
        if broken["on"]:
            res[:, 5] += 4.0  # one column wrong: a bad multiplier
        return res

    b = backend(shim=_With(shim, matmul=matmul))
    healthy = b.gemm(["bf16"], N, seconds=0.01, buffers=1)
    assert all(d["max_scaled_err"] < TOLERANCE["bf16"] for d in healthy["results"][0]["devices"])
    broken["on"] = True
    bad = b.gemm(["bf16"], N, seconds=0.01, buffers=1)
    assert all(d["max_scaled_err"] > TOLERANCE["bf16"] for d in bad["results"][0]["devices"])


class _With:
    """The shim with one attribute replaced."""

    def __init__(self, base: Any, **override: Any) -> None:
        self._base, self._override = base, override

    def __getattr__(self, name: str) -> Any:
        return self._override[name] if name in self._override else getattr(self._base, name)


def test_device_copy_host_copies_and_load_on_real_tensors() -> None:
    b = backend()
    copy = b.mem_copy(4 * 2**20, seconds=0.01)
    assert [d["intact"] for d in copy["devices"]] == [True, True]
    assert all(d["gbps"] > 0 and d["bytes"] == 4 * 2**20 for d in copy["devices"])
    h2d = b.host_device(2**20, seconds=0.01)
    assert all(d["h2d_gbps"] > 0 and d["d2h_gbps"] > 0 for d in h2d["devices"])
    b.load_n = 64
    work = b.load(0.05, batch_seconds=0.01)
    assert all(w["flops"] > 0 and w["windows_tflops"] for w in work)

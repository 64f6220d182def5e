"""The burn-in tests' shared guard: code under test that prepares a TPU VM for JAX (the TPU backend,
`--sku auto` on a TPU) writes libtpu's topology variables into this process's environment; each
test gets them back as they were, so no test leaks a topology into the next one or into JAX."""

from __future__ import annotations

import pytest

from validation.burnin.backends.tpu import OPERATOR_TOPOLOGY


@pytest.fixture(autouse=True)
def _tpu_topology_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OPERATOR_TOPOLOGY:
        # setenv records the value to restore (or that there was none); delenv then clears it.
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)

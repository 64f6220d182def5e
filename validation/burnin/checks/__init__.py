"""The product checks. Importing this package registers every one of them in REGISTRY."""

# Imported for their @register side effect; the order here does not matter (checks carry `order`).
import validation.burnin.checks.collectives
import validation.burnin.checks.compute
import validation.burnin.checks.dcgm_diag
import validation.burnin.checks.devices
import validation.burnin.checks.efficiency
import validation.burnin.checks.fabric
import validation.burnin.checks.health
import validation.burnin.checks.host_device
import validation.burnin.checks.memory
import validation.burnin.checks.storage
import validation.burnin.checks.stress  # noqa: F401
from validation.burnin.registry import REGISTRY

__all__ = ["REGISTRY"]

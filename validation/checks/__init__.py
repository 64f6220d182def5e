"""The product checks. Importing this package registers every one of them in REGISTRY."""

# Imported for their @register side effect; the order here does not matter (checks carry `order`).
import validation.checks.collectives
import validation.checks.compute
import validation.checks.dcgm_diag
import validation.checks.efficiency
import validation.checks.fabric
import validation.checks.health
import validation.checks.host_device
import validation.checks.inventory
import validation.checks.memory
import validation.checks.storage
import validation.checks.stress  # noqa: F401
from validation.registry import REGISTRY

__all__ = ["REGISTRY"]

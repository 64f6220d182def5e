"""The replace-and-reburn loop: burn in a deployed fleet, gate it, replace the rejects through the
cloud's group, burn in only the replacements, re-gate the whole fleet, until it is READY or the
budget is spent. Every round is recorded in `<out>/bringup.json`, which `--resume` continues from.

The loop talks to the world through four small interfaces (interfaces.py): the fleet runner
(burn-in over an inventory), the inventory reader, the replacer (the cloud's replace action) and
the clock. adapters.py puts the real ones behind them: run_fleet, ansible-inventory, and the
actions AwsSetUnhealthy, GcpRecreate and AzureReplace.
"""

from validation.bringup.interfaces import (
    BurnIn,
    Clock,
    FleetRunner,
    InventoryReader,
    InventoryView,
    ReplaceOutcome,
    Replacer,
    SystemClock,
)
from validation.bringup.loop import BringupError, BringupSettings, Budget, Outcome, bring_up
from validation.bringup.record import RECORD_NAME, BringupRecord, RecordError

__all__ = [
    "RECORD_NAME",
    "BringupError",
    "BringupRecord",
    "BringupSettings",
    "Budget",
    "BurnIn",
    "Clock",
    "FleetRunner",
    "InventoryReader",
    "InventoryView",
    "Outcome",
    "RecordError",
    "ReplaceOutcome",
    "Replacer",
    "SystemClock",
    "bring_up",
]

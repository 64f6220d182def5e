"""Reports of a gate decision: JSON, JUnit XML, Prometheus text, Ansible inventory, HTML.

Each module turns a GateResult into text; `write_text` puts it on disk through fleetforge's one
atomic writer (fleet.atomic), so a reader (CI, a textfile collector running as another user, a
job launcher) never sees half a report and can read it per the umask.
"""

from __future__ import annotations

from pathlib import Path

from fleet.atomic import AtomicWriteError, write_atomic

__all__ = ["AtomicWriteError", "write_text"]


def write_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) atomically; raises AtomicWriteError (an OSError) naming the path."""
    write_atomic(path, text)

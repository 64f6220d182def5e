"""Reports of a gate decision: JSON, JUnit XML, Prometheus text, Ansible inventory, HTML.

Each module turns a GateResult into text; `write_text` puts it on disk through fleetforge's one
atomic writer (fleet.atomic), so a reader (CI, a textfile collector running as another user, a
job launcher) never sees half a report and can read it per the umask.
"""

from __future__ import annotations

from pathlib import Path

from fleet.atomic import AtomicWriteError, write_atomic

__all__ = ["AtomicWriteError", "encodable", "visible", "write_text"]


def encodable(text: str) -> str:
    """`text` with each lone surrogate (JSON's "\\ud800" decodes to one; UTF-8 cannot hold it)
    replaced by U+FFFD, so what a node wrote can never make a report impossible to write."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def visible(text: str) -> str:
    """`text` with every character that does not print (control characters, format characters,
    line and paragraph separators, lone surrogates) written as its escape, e.g. `\\x1b`, so a
    label shows what a node wrote and can neither hide text nor break a line."""
    return "".join(
        c if c.isprintable() or c in " " else c.encode("unicode_escape", "backslashreplace").decode("ascii")
        for c in text
    )


def write_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) atomically; raises AtomicWriteError (an OSError) naming the path."""
    write_atomic(path, encodable(text))

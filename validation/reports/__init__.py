"""Reports of a gate decision: JSON, JUnit XML, Prometheus text, Ansible inventory, HTML.

Each module turns a GateResult into text; `write_text` puts it on disk atomically so a reader
(CI, a textfile collector, a job launcher) never sees half a report.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

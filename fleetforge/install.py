"""Where this fleetforge is installed from: the source tree (to build the node wheel) and the
Ansible content (playbooks/ and roles/) that `fleet burnin` runs.

The front door finds them and passes them down, so validation/ never imports fleetforge.
"""

from __future__ import annotations

from pathlib import Path

import fleetforge


def source_root() -> Path | None:
    """The source tree this fleetforge runs from (a checkout or an editable install), if any."""
    root = Path(fleetforge.__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else None


def ansible_root() -> Path | None:
    """The folder holding playbooks/ and roles/: the checkout's (an editable install runs from it),
    else the copy a wheel carries inside the package (setup.py puts it at fleetforge/ansible/)."""
    for root in (source_root(), Path(fleetforge.__file__).resolve().parent / "ansible"):
        if root is not None and (root / "playbooks" / "burnin.yml").is_file() and (root / "roles").is_dir():
            return root
    return None

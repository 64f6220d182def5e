"""nvidia_driver and nvidia_container_toolkit stop before adding a repository that the host already
defines with another signing key.

apt refuses every source when two definitions of one repository disagree on Signed-By ("E:
Conflicting values set for option Signed-By regarding source .../x86_64/ /:
/usr/share/keyrings/cuda-archive-keyring.gpg != ", NVIDIA/cuda-repo-management#4; the container
toolkit's troubleshooting page, NVIDIA/libnvidia-container#194), and every later apt task on the
host fails. NVIDIA's own instructions write such definitions: the cuda-keyring package's cuda-*.list,
an `add-apt-repository` line in sources.list, the container toolkit guide's
nvidia-container-toolkit.list. Each role's own two tasks (look, then check) run under
ansible-playbook on this machine, one inventory host per case, over folders of source files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.local_play import local_hosts, play_results

CUDA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
TOOLKIT = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
ROLES: dict[str, dict[str, Any]] = {
    "nvidia_driver": {
        "url_var": "__nvidia_driver_repo_url",
        "url": CUDA,
        "own": "nvidia-cuda.sources",
        "own_var": "__nvidia_driver_repo_file",
        "dirs_var": "__nvidia_driver_apt_source_dirs",
        "foreign": (
            "cuda-ubuntu2204-x86_64.list",
            f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {CUDA}/ /\n",
        ),
    },
    "nvidia_container_toolkit": {
        "url_var": "__nvidia_container_toolkit_repo_url",
        "url": TOOLKIT,
        "own": "nvidia-container-toolkit.sources",
        "own_var": "__nvidia_container_toolkit_repo_file",
        "dirs_var": "__nvidia_container_toolkit_apt_source_dirs",
        "foreign": (
            "nvidia-container-toolkit.list",
            f"deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] {TOOLKIT} /\n",
        ),
    },
}


def _check_tasks(role: str) -> list[dict[str, Any]]:
    tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / "Debian.yml").read_text())
    start = next(
        i for i, t in enumerate(tasks) if str(t.get("name", "")).startswith("Look for other apt definitions")
    )
    return tasks[start : start + 2]


@pytest.mark.parametrize("role", sorted(ROLES))
def test_another_definition_of_the_repository_stops_the_role_naming_its_file(
    role: str, tmp_path: Path
) -> None:
    case = ROLES[role]
    url = case["url"]
    foreign_name, foreign_text = case["foreign"]
    ours = f"Types: deb\nURIs: {url}/\nSuites: /\nSigned-By: /etc/apt/keyrings/ours.asc\n"
    layouts: dict[str, dict[str, str]] = {
        "foreign_list": {
            f"sources.list.d/{foreign_name}": foreign_text,
            f"sources.list.d/{case['own']}": ours,
        },
        "in_sources_list": {
            "sources.list": f"deb http://deb.debian.org/debian bookworm main\ndeb {url}/ /\n"
        },
        "deb822_tight": {"sources.list.d/vendor.sources": f"Types: deb\nURIs:{url}\nSuites: /\n"},
        "ours_only": {f"sources.list.d/{case['own']}": ours},
        "commented_out": {f"sources.list.d/{foreign_name}": "# " + foreign_text},
        "another_repository": {"sources.list.d/other.list": foreign_text.replace(url, url + "-other")},
    }
    hosts: dict[str, dict[str, Any]] = {}
    for name, files in layouts.items():
        root = tmp_path / name
        (root / "sources.list.d").mkdir(parents=True)
        for rel, text in files.items():
            (root / rel).write_text(text)
        own_path = str(root / "sources.list.d" / case["own"])
        hosts[name] = {
            case["url_var"]: url,
            case["dirs_var"]: [str(root), str(root / "sources.list.d")],
            case["own_var"]: own_path,
        }
    tasks = _check_tasks(role)
    doc = play_results(tmp_path, {"all": {"hosts": local_hosts(hosts)}}, tasks)
    failed = {host for host, s in doc["stats"].items() if s["failures"]}
    assert failed == {"foreign_list", "in_sources_list", "deb822_tight"}, json.dumps(doc)[-3000:]
    message = doc["plays"][0]["tasks"][1]["hosts"]["foreign_list"]["msg"]
    assert str(tmp_path / "foreign_list" / "sources.list.d" / foreign_name) in message
    assert case["own"] not in message and "signing key of their own" in message, message

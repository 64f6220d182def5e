"""The fleet run's role variables reach Ansible as data: a spec path, a results folder or a --var
value holding a Jinja payload is printed verbatim by a real ansible-playbook and runs nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN
from tests.hostile.conftest import Canary
from validation.fleetrun.run import write_extravars

PLAY = """- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.debug:
        msg: "{{ {'spec': burnin_spec_src, 'fetch': burnin_fetch_dir, 'extra': burnin_extra, 'n': burnin_timeout_s} | to_json }}"
"""


def _play(tmp_path: Path, vars_file: Path) -> dict[str, object]:
    pytest.importorskip("ansible")
    (tmp_path / "play.yml").write_text(PLAY)
    env = {
        **os.environ,
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
    }
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "play.yml", "-e", f"@{vars_file}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    task = json.loads(done.stdout)["plays"][0]["tasks"][0]
    msg = task["hosts"]["localhost"]["msg"]
    return json.loads(msg) if isinstance(msg, str) else msg


@pytest.mark.parametrize("where", ["spec", "fetch", "extra"])
def test_role_variables_with_jinja_are_printed_verbatim_and_run_nothing(
    tmp_path: Path, canary: Canary, where: str
) -> None:
    payload = {"spec": "", "fetch": "/srv/results", "extra": "plain"}
    payload[where] = f"/tmp/{canary.pipe}"
    private = tmp_path / "ansible"
    private.mkdir()
    path = write_extravars(
        private,
        {
            "burnin_spec_src": payload["spec"],
            "burnin_fetch_dir": payload["fetch"],
            "burnin_extra": payload["extra"],
            "burnin_timeout_s": 900,
        },
    )
    seen = _play(tmp_path, path)
    canary.assert_untouched()
    assert seen == {**payload, "n": 900}  # numbers stay numbers, strings come back as written
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)  # readable per the umask, like every output

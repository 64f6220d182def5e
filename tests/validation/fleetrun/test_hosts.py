"""Why Ansible could not read an inventory, distilled from ansible-inventory's stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from validation.fleetrun.hosts import HostListError, list_hosts, why_unparsed

FIXTURES = Path(__file__).parent / "fixtures"


def test_each_plugins_reason_is_kept_and_the_noise_dropped() -> None:
    # Verbatim stderr of `ansible-inventory -i x.aws_ec2.yml --list` (ansible-core 2.19.14, amazon.aws
    # from the ansible 12.3.0 package), run on this project's dev machine with no AWS credentials.
    stderr = (FIXTURES / "ansible-inventory-aws_ec2-no-credentials.stderr").read_text()
    assert "DEPRECATION" in stderr and "Completely failed" in stderr
    said = why_unparsed(stderr)
    assert said.startswith("auto: Failed to describe instances: Unable to locate credentials; ")
    assert "yaml: Plugin configuration YAML file, not YAML inventory; ini: " in said
    assert "DEPRECATION" not in said and "caused by" not in said and "\n" not in said


def test_ansible_core_2_16s_wrapped_warnings_are_read_too() -> None:
    # Verbatim stderr of ansible-core 2.16.14's `ansible-inventory -i x.aws_ec2.yml --list` (the oldest
    # core the `ansible>=9` pin allows) without the amazon.aws collection, run on this project's dev
    # machine: each warning wrapped at 80 columns.
    stderr = (FIXTURES / "ansible-inventory-2.16-unknown-plugin.stderr").read_text()
    said = why_unparsed(stderr)
    assert said.startswith(
        "auto: inventory config '/tmp/gi/x.aws_ec2.yml' specifies unknown plugin 'amazon.aws.aws_ec2'; "
    )
    assert "; yaml: Plugin configuration YAML file, not YAML inventory; ini: Invalid host pattern" in said
    assert said.endswith("this character is reserved to provide a port.")


def test_without_plugin_reasons_the_end_of_stderr_is_said_on_one_line() -> None:
    assert why_unparsed("first\n" + "x" * 700 + "\n[ERROR]: gave up\n").endswith("x [ERROR]: gave up")
    assert len(why_unparsed("y" * 2000)) == 600
    assert why_unparsed("") == ""


def test_a_broken_ini_inventory_is_refused_with_the_ini_plugins_reason(tmp_path: Path) -> None:
    pytest.importorskip("ansible", reason="ansible-inventory comes with the onprem extra")
    broken = tmp_path / "hosts.ini"
    broken.write_text("[gpu\nnode1 ansible_port=notaport=\n")
    with pytest.raises(HostListError) as err:
        list_hosts(broken)
    assert str(err.value).startswith(f"--inventory {broken}: Ansible cannot read it: ")
    assert "ini: Failed to parse inventory" in str(err.value)

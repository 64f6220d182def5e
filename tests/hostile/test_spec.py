"""Hostile fleet specs through the real CLI: `spec check` and `plan` refuse each one with the same
documented exit code (65 invalid, 66 no readable file), one line naming the field, no traceback,
no hang, and nothing created.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetforge import exitcodes
from tests.conftest import EXAMPLES
from tests.hostile.conftest import Canary, CliRun, deadline, tree

P5 = (EXAMPLES / "aws-p5-fleet.yaml").read_text()
ONPREM = (EXAMPLES / "onprem-hgx-h100.yaml").read_text()
COMMANDS = (("spec", "check"), ("plan",))

BILLION_LAUGHS = "lol: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"lol{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10)
)


def replace(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def one_line(run: CliRun) -> str:
    lines = [line for line in run.err.splitlines() if line.strip()]
    assert len(lines) == 1, run.err
    return lines[0]


# (id, spec text, exit code, field the one-line error names, fragment of the reason)
TEXT_CASES: list[tuple[str, str, int, str, str]] = [
    ("billion-laughs", BILLION_LAUGHS, exitcodes.DATA, "", "anchor &a0"),
    ("alias-in-spec", P5 + "tags2: &t {owner: x}\n", exitcodes.DATA, "", "anchors are not allowed"),
    (
        "merge-key",
        replace(P5, "tags:\n", "tags:\n  <<: {owner: x}\n"),
        exitcodes.DATA,
        "tags.<<",
        "unknown key",
    ),
    ("duplicate-top-key", P5 + "nodes: 1000\n", exitcodes.DATA, "", "duplicate key 'nodes' at line"),
    (
        "duplicate-nested-key",
        replace(P5, "  owner: ml-platform\n", "  owner: a\n  owner: b\n"),
        exitcodes.DATA,
        "",
        "duplicate key 'owner'",
    ),
    ("deep-nesting", "name: " + "[" * 50_000 + "]" * 50_000 + "\n", exitcodes.DATA, "", "nested deeper than"),
    (
        "deep-block-nesting",
        "".join(" " * i + f"k{i}:\n" for i in range(500)),
        exitcodes.DATA,
        "",
        "nested deeper than",
    ),
    (
        "python-object-tag",
        "name: !!python/object/apply:os.system ['touch pwned']\n",
        exitcodes.DATA,
        "",
        "not valid YAML at line 1",
    ),
    ("nul-byte", P5 + "\x00", exitcodes.DATA, "", "NUL"),
    ("not-a-mapping", "- a\n- b\n", exitcodes.DATA, "", "a mapping of fields"),
    ("empty", "", exitcodes.DATA, "", "got NoneType"),
    ("nodes-true", replace(P5, "nodes: 16", "nodes: true"), exitcodes.DATA, "nodes", "valid integer"),
    ("nodes-underscore", replace(P5, "nodes: 16", "nodes: 1_6"), exitcodes.DATA, "nodes", "valid integer"),
    ("nodes-sexagesimal", replace(P5, "nodes: 16", "nodes: 0:16"), exitcodes.DATA, "nodes", "valid integer"),
    ("nodes-quoted", replace(P5, "nodes: 16", 'nodes: "16"'), exitcodes.DATA, "nodes", "valid integer"),
    (
        "nodes-huge",
        replace(P5, "nodes: 16", "nodes: 99999999999999999999999"),
        exitcodes.DATA,
        "nodes",
        "less than or equal to 100000",
    ),
    (
        "vpc-cidr-zero",
        replace(P5, "vpc_cidr: 10.64.0.0/16", "vpc_cidr: 0"),
        exitcodes.DATA,
        "network.vpc_cidr",
        "not an IPv4 range",
    ),
    (
        "ssh-cidr-zero",
        replace(P5, "ssh_cidr: 10.0.0.0/8", "ssh_cidr: 0"),
        exitcodes.DATA,
        "network.ssh_cidr",
        "not an IPv4 range",
    ),
    (
        "ssh-from-anywhere",
        replace(P5, "ssh_cidr: 10.0.0.0/8", "ssh_cidr: 0.0.0.0/0"),
        exitcodes.DATA,
        "network.ssh_cidr",
        "whole internet",
    ),
    (
        "ssh-from-a-slash-1",
        replace(P5, "ssh_cidr: 10.0.0.0/8", "ssh_cidr: 128.0.0.0/1"),
        exitcodes.DATA,
        "network.ssh_cidr",
        "covers public addresses",
    ),
    (
        "vpc-too-small",
        replace(P5, "vpc_cidr: 10.64.0.0/16", "vpc_cidr: 10.64.0.0/25"),
        exitcodes.DATA,
        "network.vpc_cidr",
        "/16 to /24",
    ),
    (
        "vpc-too-wide",
        replace(P5, "vpc_cidr: 10.64.0.0/16", "vpc_cidr: 10.0.0.0/8"),
        exitcodes.DATA,
        "network.vpc_cidr",
        "/16 to /24",
    ),
    (
        "region-made-up",
        replace(P5, "region: us-east-1", "region: us-east-9"),
        exitcodes.DATA,
        "region",
        "docs.aws.amazon.com",
    ),
    (
        "zone-prefix-trick",
        replace(P5, "zone: us-east-1a", "zone: us-east-1-evil"),
        exitcodes.DATA,
        "zone",
        "us-east-1a",
    ),
    (
        "mount-over-etc",
        replace(P5, "mount_point: /fsx", "mount_point: /etc"),
        exitcodes.DATA,
        "storage.filesystem.mount_point",
        "system tree",
    ),
    (
        "mount-dotdot",
        replace(P5, "mount_point: /fsx", "mount_point: /fsx/../usr"),
        exitcodes.DATA,
        "storage.filesystem.mount_point",
        "never . or ..",
    ),
    (
        "capacity-inf",
        replace(P5, "capacity_gib: 9600", "capacity_tib: .inf"),
        exitcodes.DATA,
        "storage.filesystem.capacity_tib",
        "finite",
    ),
    (
        "capacity-nan",
        replace(P5, "capacity_gib: 9600", "capacity_tib: .nan"),
        exitcodes.DATA,
        "storage.filesystem.capacity_tib",
        "finite",
    ),
    (
        "owner-control-chars",
        replace(P5, "owner: ml-platform", 'owner: "ml\\u001b[2Jplatform"'),
        exitcodes.DATA,
        "tags.owner",
        "pattern",
    ),
    (
        "onprem-host-shell",
        replace(ONPREM, "address: 10.1.0.11", "address: '10.1.0.11; reboot'"),
        exitcodes.DATA,
        "hosts.0.address",
        "RFC 1123",
    ),
    (
        "onprem-host-option",
        replace(ONPREM, "address: 10.1.0.11", "address: -oProxyCommand=id"),
        exitcodes.DATA,
        "hosts.0.address",
        "RFC 1123",
    ),
    (
        "onprem-nid-shell",
        replace(ONPREM, '"10.1.0.2@o2ib"', '"10.1.0.2@o2ib $(id)"'),
        exitcodes.DATA,
        "storage.filesystem.mgs_nids.0",
        "not a Lustre NID",
    ),
    (
        "onprem-version-braces",
        replace(ONPREM, '"570.133.20"', '"{{ 570 }}"'),
        exitcodes.DATA,
        "validation.pinned_versions.driver",
        "not a version",
    ),
    (
        "onprem-nqn-newline",
        replace(
            ONPREM,
            "    mount_point: /lustre\n",
            "    mount_point: /lustre\n  nvmeof:\n    - {transport: tcp, address: 10.1.0.9, "
            'nqn: "nqn.2020-01.com.example:a\\nb"}\n',
        ),
        exitcodes.DATA,
        "storage.nvmeof.0.nqn",
        "NVMe Qualified Name",
    ),
    (
        "key-with-escape-sequence",
        P5 + '"\\u001b[2Jx\\ny": 1\n',
        exitcodes.DATA,
        "",
        "\\x1b[2Jx\\ny: unknown key",
    ),
]


def _jinja_cases(canary: Canary) -> list[tuple[str, str, str]]:
    """(id, spec text, field) with the canary's Jinja payload in fields that reach Ansible."""
    pipe = canary.pipe.replace('"', '\\"')
    return [
        ("jinja-host", replace(ONPREM, "address: 10.1.0.11", f'address: "{pipe}"'), "hosts.0.address"),
        ("jinja-version", replace(ONPREM, '"570.133.20"', f'"{pipe}"'), "validation.pinned_versions.driver"),
        ("jinja-nid", replace(ONPREM, '"10.1.0.2@o2ib"', f'"{pipe}"'), "storage.filesystem.mgs_nids.0"),
        (
            "jinja-mount",
            replace(ONPREM, "mount_point: /lustre", f'mount_point: "{pipe}"'),
            "storage.filesystem.mount_point",
        ),
        ("jinja-image", replace(P5, "sku: p5.48xlarge", f'sku: p5.48xlarge\nimage: "{pipe}"'), "image"),
    ]


def _run_both(cli: Callable[..., CliRun], tmp_path: Path, spec: Path) -> list[CliRun]:
    before = tree(tmp_path)
    runs = []
    for command in COMMANDS:
        with deadline(20):
            runs.append(cli(*command, spec))
        assert tree(tmp_path) == before, f"{' '.join(command)} created files"
    return runs


@pytest.mark.parametrize(
    ("text", "code", "field", "fragment"), [c[1:] for c in TEXT_CASES], ids=[c[0] for c in TEXT_CASES]
)
def test_hostile_spec_is_refused_alike_by_spec_check_and_plan(
    cli: Callable[..., CliRun], tmp_path: Path, text: str, code: int, field: str, fragment: str
) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(text, encoding="utf-8")
    for run in _run_both(cli, tmp_path, spec):
        assert run.code == code, run.err
        line = one_line(run)
        assert line.startswith(f"{spec}: "), line
        if field:
            assert line.startswith(f"{spec}: {field}: "), line
        assert fragment in line, line


def test_jinja_payloads_are_refused_and_never_rendered(
    cli: Callable[..., CliRun], tmp_path: Path, canary: Canary
) -> None:
    for name, text, field in _jinja_cases(canary):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(text, encoding="utf-8")
        before = tree(tmp_path)
        for run in _run_both(cli, tmp_path, spec):
            assert run.code == exitcodes.DATA, (name, run.err)
            assert one_line(run).startswith(f"{spec}: {field}: "), (name, run.err)
        assert tree(tmp_path) == before
    canary.assert_untouched()


def test_billion_laughs_is_refused_at_its_first_anchor(cli: Callable[..., CliRun], tmp_path: Path) -> None:
    """Refused by the loader at the first anchor, before any alias could expand (the timing of it
    is a benchmark's business; the bound here only catches an expansion that would hang)."""
    spec = tmp_path / "lol.yaml"
    spec.write_text(BILLION_LAUGHS)
    for command in COMMANDS:
        start = time.perf_counter()
        run = cli(*command, spec)
        elapsed = time.perf_counter() - start
        assert run.code == exitcodes.DATA, run.err
        assert "anchor &a0 at line 1: anchors are not allowed in a spec" in run.err
        assert elapsed < 30, elapsed


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _loop(p: Path) -> None:
    p.symlink_to(p)


def _dangling(p: Path) -> None:
    p.symlink_to(p.parent / "gone.yaml")


def _directory(p: Path) -> None:
    p.mkdir()


def _unreadable(p: Path) -> None:
    p.write_text(P5)
    p.chmod(0)


# (id, how the spec path is made, exit code, fragment)
PATH_CASES: list[tuple[str, Callable[[Path], None], int, str]] = [
    ("fifo", _fifo, exitcodes.NO_INPUT, "is a FIFO, not a spec file"),
    ("directory", _directory, exitcodes.NO_INPUT, "is a directory, not a spec file"),
    ("symlink-loop", _loop, exitcodes.NO_INPUT, "a symlink loop"),
    ("dangling-symlink", _dangling, exitcodes.NO_INPUT, "no such file"),
    ("missing", lambda p: None, exitcodes.NO_INPUT, "no such file"),
]
if os.geteuid() != 0:  # root reads a mode-0 file anyway
    PATH_CASES.append(("no-permission", _unreadable, exitcodes.NO_INPUT, "Permission denied"))


@pytest.mark.parametrize(
    ("make", "code", "fragment"), [c[1:] for c in PATH_CASES], ids=[c[0] for c in PATH_CASES]
)
def test_a_path_that_is_not_a_readable_file(
    cli: Callable[..., CliRun], tmp_path: Path, make: Callable[[Path], None], code: int, fragment: str
) -> None:
    spec = tmp_path / "fleet.yaml"
    make(spec)
    for run in _run_both(cli, tmp_path, spec):
        assert run.code == code, run.err
        line = one_line(run)
        assert line.startswith(f"{spec}: ") and fragment in line, line


def test_a_device_and_a_huge_file(cli: Callable[..., CliRun], tmp_path: Path) -> None:
    with deadline(20):
        run = cli("spec", "check", "/dev/zero")
    assert run.code == exitcodes.NO_INPUT and "a character device" in one_line(run)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    for run in _run_both(cli, tmp_path, big):
        assert run.code == exitcodes.DATA and "larger than" in one_line(run)


def test_latin1_bytes(cli: Callable[..., CliRun], tmp_path: Path) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_bytes(P5.replace("ml-platform", "caf\xe9").encode("latin-1"))
    for run in _run_both(cli, tmp_path, spec):
        assert run.code == exitcodes.DATA and "not UTF-8" in one_line(run)


# Garbage: arbitrary text, and arbitrary YAML-shaped values grafted onto a valid spec's fields.
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=40),
    st.sampled_from(["0", "1_6", "0.0.0.0/0", "/etc", "{{ x }}", "*a", "&a", "!!binary", "nqn.", "@tcp"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_FIELDS = [
    "name",
    "cloud",
    "sku",
    "region",
    "zone",
    "nodes",
    "spares",
    "network",
    "storage",
    "tags",
    "validation",
    "hosts",
    "capacity",
    "image",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_garbage_text_never_gives_a_traceback(cli: Callable[..., CliRun], tmp_path: Path, text: str) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(text, encoding="utf-8")
    with deadline(20):
        run = cli("spec", "check", spec)
    assert run.code == exitcodes.DATA, run.err
    assert "\n" not in run.err.strip() or "problem(s)" in run.err


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(_FIELDS), value=_VALUES)
def test_garbage_fields_never_give_a_traceback(
    cli: Callable[..., CliRun], tmp_path: Path, field: str, value: Any
) -> None:
    doc = yaml.safe_load(P5)
    doc[field] = value
    spec = tmp_path / "fleet.yaml"
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    before = tree(tmp_path)
    for command in COMMANDS:
        with deadline(60):
            run = cli(*command, spec)
        assert run.code in (exitcodes.OK, exitcodes.DATA, exitcodes.REJECTED), run.err
    assert tree(tmp_path) == before

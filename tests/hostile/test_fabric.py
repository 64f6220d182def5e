"""Hostile pairs files for `fleetforge fabric attribute`: broken JSON, wrong shapes, forged hosts,
non-numbers, non-files. Each case runs the real CLI and asserts the exact exit code, a one-line
error, no traceback, and that nothing was created."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetforge import exitcodes
from tests.hostile.conftest import Canary, tree

Cli = Callable[..., Any]
GOOD_HOSTS = ["n1", "n2", "n3", "n4"]
GOOD_PAIRS: list[list[Any]] = [["n1", "n2", 40.0], ["n3", "n4", 41.0], ["n1", "n3", 39.5], ["n2", "n4", 40.2]]


def attribute(cli: Cli, tmp_path: Path, name: str = "pairs.json", *args: str) -> Any:
    before = tree(tmp_path)
    run = cli("fabric", "attribute", name, *args)
    assert tree(tmp_path) == before, "the command created files"
    return run


def assert_one_line(run: Any, code: int, *words: str) -> None:
    assert run.code == code, (run.code, run.err)
    line = run.err.strip()
    assert line.startswith("error: ") and "\n" not in line, run.err
    for w in words:
        assert w in line, line


MALFORMED_TEXT: list[tuple[str, str, str]] = [
    ("empty", "", "not JSON"),
    ("truncated", '{"hosts": ["n1", "n2"], "pairs": [', "not JSON"),
    ("nan", '{"hosts": ["n1", "n2"], "pairs": [["n1", "n2", NaN]]}', "NaN"),
    ("infinity", '{"hosts": ["n1", "n2"], "pairs": [["n1", "n2", -Infinity]]}', "Infinity"),
    ("huge-exponent", '{"hosts": ["n1", "n2"], "pairs": [["n1", "n2", 1e999]]}', "pairs[0].busbw_gbps"),
    ("long-integer", '{"hosts": ["n1", "n2"], "pairs": [["n1", "n2", ' + "9" * 5000 + "]]}", "not JSON"),
    ("deep-nesting", "[" * 200_000 + "]" * 200_000, "not JSON"),
    ("top-list", "[]", "top level"),
    ("top-string", '"hosts"', "top level"),
]


@pytest.mark.parametrize(("label", "text", "word"), MALFORMED_TEXT, ids=[m[0] for m in MALFORMED_TEXT])
def test_not_a_pairs_document(cli: Cli, tmp_path: Path, label: str, text: str, word: str) -> None:
    (tmp_path / "pairs.json").write_text(text)
    assert_one_line(attribute(cli, tmp_path), exitcodes.DATA, "pairs.json", word)


def test_not_utf8(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "pairs.json").write_bytes(b'{"hosts": ["n1\xff", "n2"], "pairs": []}')
    assert_one_line(attribute(cli, tmp_path), exitcodes.DATA, "not UTF-8")


def doc(hosts: Any = None, pairs: Any = None, **extra: Any) -> dict[str, Any]:
    return {
        "hosts": GOOD_HOSTS if hosts is None else hosts,
        "pairs": GOOD_PAIRS if pairs is None else pairs,
        **extra,
    }


MALFORMED_DOCS: list[tuple[str, Any, tuple[str, ...]]] = [
    ("no-hosts", {"pairs": GOOD_PAIRS}, ("hosts", "required")),
    ("no-pairs", {"hosts": GOOD_HOSTS}, ("pairs", "required")),
    ("extra-key", doc(verdict="clean"), ("verdict", "not a known key")),
    ("hosts-not-list", doc(hosts="n1,n2"), ("hosts",)),
    ("host-not-string", doc(hosts=["n1", 2]), ("hosts[1]",)),
    ("host-empty", doc(hosts=["n1", ""], pairs=[]), ("hosts[1]",)),
    ("host-too-long", doc(hosts=["n1", "x" * 300], pairs=[]), ("hosts[1]",)),
    ("one-host", doc(hosts=["n1"], pairs=[]), ("hosts",)),
    ("duplicate-host", doc(hosts=["n1", "n2", "n1"], pairs=[]), ("'n1'", "more than once")),
    ("unknown-host", doc(pairs=[*GOOD_PAIRS, ["n1", "n9", 40]]), ("pairs[4].host_b", "'n9'", "not in hosts")),
    ("self-pair", doc(pairs=[["n2", "n2", 40]]), ("pairs[0]", "itself")),
    ("busbw-string", doc(pairs=[["n1", "n2", "40"]]), ("pairs[0].busbw_gbps", "number")),
    ("busbw-bool", doc(pairs=[["n1", "n2", True]]), ("pairs[0].busbw_gbps",)),
    ("busbw-negative", doc(pairs=[["n1", "n2", -1]]), ("pairs[0].busbw_gbps", "greater than or equal to 0")),
    ("busbw-list", doc(pairs=[["n1", "n2", [40]]]), ("pairs[0].busbw_gbps",)),
    ("pair-short", doc(pairs=[["n1", "n2"]]), ("pairs[0]", "host_a, host_b, busbw_gbps")),
    ("pair-long", doc(pairs=[["n1", "n2", 40, "x", "y"]]), ("pairs[0]",)),
    ("pair-object", doc(pairs=[{"a": "n1", "b": "n2", "busbw": 4}]), ("pairs[0]",)),
    ("reason-number", doc(pairs=[["n1", "n2", None, 504]]), ("pairs[0].reason",)),
    ("host-pair-number", doc(pairs=[[1, "n2", 40]]), ("pairs[0].host_a",)),
]


@pytest.mark.parametrize(("label", "document", "words"), MALFORMED_DOCS, ids=[m[0] for m in MALFORMED_DOCS])
def test_malformed_document(
    cli: Cli, tmp_path: Path, label: str, document: Any, words: tuple[str, ...]
) -> None:
    (tmp_path / "pairs.json").write_text(json.dumps(document))
    assert_one_line(attribute(cli, tmp_path), exitcodes.DATA, "pairs.json", *words)


def test_unknown_host_message_escapes_control_characters(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "pairs.json").write_text(json.dumps(doc(pairs=[["n1", "x\x1b[2J\nfake: ok", 40]])))
    run = attribute(cli, tmp_path)
    assert_one_line(run, exitcodes.DATA, "not in hosts", "\\x1b")
    assert "\x1b" not in run.err


def test_missing_file(cli: Cli, tmp_path: Path) -> None:
    assert_one_line(
        attribute(cli, tmp_path, "absent.json"), exitcodes.NO_INPUT, "absent.json", "no such file"
    )


def test_a_folder(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "pairs.json").mkdir()
    assert_one_line(attribute(cli, tmp_path), exitcodes.NO_INPUT, "not a regular file")


def test_a_fifo_is_not_opened(cli: Cli, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pairs.json")  # opening it for reading would block forever
    assert_one_line(attribute(cli, tmp_path), exitcodes.NO_INPUT, "not a regular file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(doc()))
    path.chmod(0)
    try:
        assert_one_line(attribute(cli, tmp_path), exitcodes.NO_INPUT, "cannot read")
    finally:
        path.chmod(0o600)


def test_template_payload_names_are_data(cli: Cli, tmp_path: Path, canary: Canary) -> None:
    hosts = [canary.pipe, canary.block, "n3", "n4"]
    pairs = [[hosts[0], "n3", 40], [hosts[1], "n4", 40], [hosts[0], "n4", 40], [hosts[1], "n3", 40]]
    (tmp_path / "pairs.json").write_text(json.dumps({"hosts": hosts, "pairs": pairs}))
    run = attribute(cli, tmp_path, "pairs.json", "--json")
    assert run.code == exitcodes.OK, run.err
    assert json.loads(run.out)["verdict"] == "clean"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    hosts=st.lists(st.sampled_from(["n1", "n2", "n3", ""]) | JSON_VALUES, max_size=4),
    pairs=st.lists(st.lists(st.sampled_from(["n1", "n2", "n3"]) | JSON_VALUES, max_size=5), max_size=4),
)
def test_any_shape_is_judged_or_refused_in_one_line(cli: Cli, tmp_path: Path, hosts: Any, pairs: Any) -> None:
    (tmp_path / "pairs.json").write_text(json.dumps({"hosts": hosts, "pairs": pairs}))
    run = attribute(cli, tmp_path)
    assert run.code in {exitcodes.OK, exitcodes.REJECTED, exitcodes.DATA}, (run.code, run.err)
    if run.code == exitcodes.DATA:
        assert_one_line(run, exitcodes.DATA, "pairs.json")

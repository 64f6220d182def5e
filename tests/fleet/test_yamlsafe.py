"""fleet.yamlsafe: a spec file is read and parsed without trusting it."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fleet.spec import SpecError, load_spec
from fleet.yamlsafe import MAX_BYTES, MAX_DEPTH, RefusedYamlError, UnreadableError, loads, read_text

BILLION_LAUGHS = "a: &a ['lol','lol','lol','lol','lol','lol','lol','lol','lol']\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # YAML 1.1 would read these as 16, 80, True and 8; YAML 1.2's core schema keeps them strings/decimal.
        ("n: 1_6", {"n": "1_6"}),
        ("n: 1:20", {"n": "1:20"}),
        ("n: yes", {"n": "yes"}),
        ("n: off", {"n": "off"}),
        ("n: 010", {"n": 10}),
        ("n: 0x10", {"n": 16}),
        ("n: 0o10", {"n": 8}),
        ("n: 2026-01-01", {"n": "2026-01-01"}),
        ("n: 1.5e3", {"n": 1500.0}),
        ("n: true", {"n": True}),
        ("n: ~", {"n": None}),
        ("n:", {"n": None}),
    ],
)
def test_plain_scalars_follow_yaml_1_2_core(text: str, expected: dict[str, Any]) -> None:
    assert loads(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("nodes: 1\nnodes: 2\n", "duplicate key 'nodes' at line 2 (first at line 1)"),
        ("tags: {owner: a, owner: b}\n", "duplicate key 'owner' at line 1"),
        ("a: &x 1\nb: *x\n", "anchor &x at line 1"),
        ("a: *x\n", "alias *x at line 1"),
        ("<<: {a: 1}\n", ""),  # no merge resolver: `<<` is an ordinary (unknown) key
        ("? [1]\n: 2\n", "not a plain value"),
        ("a: !!python/object/apply:os.system ['true']\n", "not valid YAML at line 1"),
        ("a: [unclosed\n", "not valid YAML at line 2"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH}"),
        ("a: b\x00\n", "NUL"),
    ],
)
def test_refused_documents_say_what_and_where(text: str, fragment: str) -> None:
    if not fragment:
        assert loads(text) == {"<<": {"a": 1}}
        return
    with pytest.raises(RefusedYamlError) as info:
        loads(text)
    assert fragment in str(info.value)


def test_nesting_at_the_limit_is_read() -> None:
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


def test_very_deep_nesting_is_refused_not_a_recursion_error() -> None:
    with pytest.raises(RefusedYamlError):
        loads("[" * 200_000 + "]" * 200_000)
    with pytest.raises(RefusedYamlError):
        loads("".join(" " * i + f"k{i}:\n" for i in range(2000)))


def test_billion_laughs_is_refused_in_milliseconds() -> None:
    # This process's CPU time, not the wall clock: other work on the machine cannot stretch it.
    start = time.process_time()
    with pytest.raises(RefusedYamlError, match="anchor"):
        loads(BILLION_LAUGHS)
    assert time.process_time() - start < 0.1


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    raised: list[BaseException] = []

    def read() -> None:
        try:
            read_text(fifo)
        except BaseException as exc:
            raised.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)  # an open that blocks on the FIFO never returns without a writer
    if reader.is_alive():
        with contextlib.suppress(OSError):  # ENXIO: the reader left the open meanwhile
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # lets a blocked open return
        reader.join(10)
        pytest.fail("reading a FIFO blocked")
    assert len(raised) == 1 and isinstance(raised[0], UnreadableError), raised
    assert "is a FIFO, not a spec file" in str(raised[0])


def test_directory_loop_missing_and_large_files(tmp_path: Path) -> None:
    with pytest.raises(UnreadableError, match="a directory") as info:
        read_text(tmp_path)
    assert not info.value.missing
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    with pytest.raises(UnreadableError, match="symlink loop"):
        read_text(loop)
    with pytest.raises(UnreadableError) as info:
        read_text(tmp_path / "nope.yaml")
    assert info.value.missing
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_BYTES + 1))
    with pytest.raises(RefusedYamlError, match="larger than"):
        read_text(big)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(RefusedYamlError, match="not UTF-8"):
        read_text(latin)


@pytest.mark.parametrize(
    ("make", "no_input", "fragment"),
    [
        (lambda p: os.mkfifo(p), True, "FIFO"),
        (lambda p: p.mkdir(), True, "directory"),
        (lambda p: p.symlink_to(p), True, "symlink loop"),
        (lambda p: p.write_text(BILLION_LAUGHS), False, "anchor"),
        (lambda p: p.write_text("name: a\nname: b\n"), False, "duplicate key 'name' at line 2"),
    ],
)
def test_load_spec_reports_one_line_and_the_kind_of_failure(
    tmp_path: Path, make: Any, no_input: bool, fragment: str
) -> None:
    path = tmp_path / "fleet.yaml"
    make(path)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.no_input is no_input
    rendered = info.value.render()
    assert "\n" not in rendered and rendered.startswith(f"{path}: ") and fragment in rendered


def test_keys_and_paths_from_the_file_cannot_add_lines_or_escape_sequences(tmp_path: Path) -> None:
    path = tmp_path / "evil\nname.yaml"
    path.write_text('"name\\n\\u001b[2Jevil": 1\n')
    with pytest.raises(SpecError) as info:
        load_spec(path)
    rendered = info.value.render()
    assert "\x1b" not in rendered
    assert rendered.count("\n") == len(info.value.problems)  # header + one line per problem
    assert "name\\n\\x1b[2Jevil: unknown key" in rendered

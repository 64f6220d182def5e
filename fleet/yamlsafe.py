"""Reading a YAML document that someone else wrote, without trusting it.

PyYAML's `safe_load` runs no code, but it still (1) expands aliases, so a few hundred bytes of
"billion laughs" become billions of nodes once anything walks the result; (2) keeps the last of
two equal keys silently; (3) recurses once per nesting level, so deep nesting ends in a
RecursionError; and (4) resolves scalars by YAML 1.1, where `1_6` is 16, `1:20` is 80, `010` is 8
and `yes`/`on` are booleans. A fleet spec needs none of that: this loader refuses anchors and
aliases outright, refuses duplicate keys naming the key and line, caps nesting depth and document
size, and resolves plain scalars by the YAML 1.2 core schema (anything else stays a string, which
the spec's strict types then refuse with the field's name).

Reading the file is fail-closed too: it is opened non-blocking (a FIFO never hangs the reader)
and must be a regular file, checked on the open descriptor so nothing can swap it in between.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
from yaml.nodes import MappingNode, Node

# A fleet spec is a few kilobytes; anything far larger is not one.
MAX_BYTES = 1 << 20
MAX_DEPTH = 32


class UnreadableError(Exception):
    """The path cannot be read as a spec file (missing, not a regular file, a loop, no permission)."""

    def __init__(self, reason: str, *, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


class RefusedYamlError(Exception):
    """The document is not YAML this loader accepts; the message says what and where."""


def read_text(path: Path, limit: int = MAX_BYTES) -> str:
    """The file's text; UnreadableError (one short reason) for anything that is not a readable file."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UnreadableError("no such file", missing=True) from None
    except OSError as exc:
        raise UnreadableError(f"cannot read: {_os_reason(exc)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableError(f"is {_kind(mode)}, not a spec file")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise UnreadableError(f"cannot read: {_os_reason(exc)}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise RefusedYamlError(f"larger than {limit:,} bytes; a fleet spec is a few kilobytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RefusedYamlError(f"not UTF-8 text (byte {exc.start})") from None


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symlink loop"
    if exc.errno == errno.EISDIR:
        return "a directory"
    return exc.strerror or exc.__class__.__name__


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


class _SpecLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core scalars, no anchors or aliases, no duplicate keys, bounded depth."""

    yaml_implicit_resolvers: dict[Any, Any] = {}
    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent):
            raise RefusedYamlError(
                f"alias *{event.anchor} at line {_line(event)}: aliases are not allowed in a spec"
            )
        if isinstance(event, ScalarEvent | CollectionStartEvent) and event.anchor is not None:
            raise RefusedYamlError(
                f"anchor &{event.anchor} at line {_line(event)}: anchors are not allowed in a spec"
            )
        if isinstance(event, CollectionStartEvent):
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise RefusedYamlError(f"nested deeper than {MAX_DEPTH} levels at line {_line(event)}")
        try:
            return super().compose_node(parent, index)
        finally:
            if isinstance(event, CollectionStartEvent):
                self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise RefusedYamlError(f"merge key << at line {line} is not allowed in a spec")
            key = self.construct_object(key_node, deep=True)
            try:
                if key in first_line:
                    raise RefusedYamlError(
                        f"duplicate key {key!r} at line {line} (first at line {first_line[key]})"
                    )
                first_line[key] = line
            except TypeError:
                raise RefusedYamlError(f"the mapping key at line {line} is not a plain value") from None
        return super().construct_mapping(node, deep=deep)


def _line(event: Any) -> int:
    return int(event.start_mark.line) + 1


# YAML 1.2 core schema: the only plain scalars that are not strings.
_CORE_RESOLVERS = (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    ),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
)
for _tag, _pattern, _first in _CORE_RESOLVERS:
    _SpecLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


def _construct_core_int(loader: _SpecLoader, node: Node) -> int:
    text = str(loader.construct_scalar(node))  # type: ignore[arg-type]
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _construct_core_float(loader: _SpecLoader, node: Node) -> float:
    text = str(loader.construct_scalar(node)).lower()  # type: ignore[arg-type]
    return float(text.replace(".inf", "inf").replace(".nan", "nan"))


_SpecLoader.add_constructor("tag:yaml.org,2002:int", _construct_core_int)
_SpecLoader.add_constructor("tag:yaml.org,2002:float", _construct_core_float)


def yaml_error_text(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line: not valid YAML at line L, column C: the problem."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None)
    return f"not valid YAML{where}" + (f": {problem}" if problem else "")


def loads(text: str) -> Any:
    """One YAML document as Python data; RefusedYamlError with line numbers for anything refused."""
    if "\x00" in text:
        raise RefusedYamlError("holds a NUL character; not a text file")
    try:
        return yaml.load(text, Loader=_SpecLoader)  # a SafeLoader subclass: constructs no Python objects
    except RefusedYamlError:
        raise
    except yaml.YAMLError as exc:
        raise RefusedYamlError(yaml_error_text(exc)) from None
    except (RecursionError, MemoryError):
        raise RefusedYamlError("too large or too deeply nested to read") from None

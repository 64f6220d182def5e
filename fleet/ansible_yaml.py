"""YAML that Ansible reads as data, never as a template.

Ansible renders every string of an inventory or vars file as Jinja when it is used, so a node
name, a reject reason or a spec field holding `{{ lookup('pipe', ...) }}` would run a command on
the controller. Strings fleetforge writes are Unsafe: one that holds a '{' is tagged `!unsafe`
(Ansible then never templates it); one without cannot start a template (Jinja starts only at
'{{', '{%' or '{#') and is written plain, so a file without hostile values stays readable by any
YAML reader. Host names are YAML keys and cannot carry a tag: they are checked against a
character set in which no template, range pattern (`node[1:9]`) or `host:port` can be spelled.

`load` reads such files back (PyYAML's safe loader refuses the tag), keeping the tag, so a file
updated by fleetforge keeps what it wrote unsafe and what the operator wrote as it was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

UNSAFE_TAG = "!unsafe"
# Letters, digits, '.', '_', '-'; starts and ends with a letter or digit (a DNS name or a plain
# node name). Braces, '%', '#', brackets, ':' and spaces are out: no Jinja, no ranges, no ports.
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9])?")
HOST_NAME_RULE = (
    "letters, digits, '.', '_' and '-', starting and ending with a letter or digit, at most 253 characters"
)


class Unsafe(str):
    """A string Ansible must take literally: written with the `!unsafe` tag."""

    __slots__ = ()


def is_host_name(name: object) -> bool:
    return isinstance(name, str) and _HOST_NAME.fullmatch(name) is not None


def unsafe_values(value: Any) -> Any:
    """The same structure with every string value (not mapping keys) made Unsafe."""
    if isinstance(value, str):
        return Unsafe(value)
    if isinstance(value, Mapping):
        return {k: unsafe_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [unsafe_values(v) for v in value]
    return value


class _Dumper(yaml.SafeDumper):
    pass


def _represent_unsafe(dumper: yaml.SafeDumper, data: Unsafe) -> yaml.ScalarNode:
    text = str(data)
    # Jinja only starts at '{{', '{%' or '{#': a string without '{' is never templated and is
    # written plain, so every other YAML reader (a job launcher's yaml.safe_load) keeps working.
    if "{" not in text:
        return dumper.represent_str(text)
    return dumper.represent_scalar(UNSAFE_TAG, text, style="'")


_Dumper.add_representer(Unsafe, _represent_unsafe)


class _Loader(yaml.SafeLoader):
    pass


def _construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return Unsafe(loader.construct_scalar(node))
    if isinstance(node, yaml.SequenceNode):
        return [unsafe_values(v) for v in loader.construct_sequence(node, deep=True)]
    if isinstance(node, yaml.MappingNode):
        return unsafe_values(loader.construct_mapping(node, deep=True))
    raise yaml.constructor.ConstructorError(None, None, "unexpected !unsafe node", node.start_mark)


_Loader.add_constructor(UNSAFE_TAG, _construct_unsafe)


def dump(data: Any) -> str:
    """YAML text; Unsafe strings carry `!unsafe`, everything else as yaml.safe_dump writes it."""
    text: str = yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=False, width=1000
    )
    return text


def load(text: str) -> Any:
    """Parse YAML like yaml.safe_load, reading `!unsafe` strings as Unsafe."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass with one more tag

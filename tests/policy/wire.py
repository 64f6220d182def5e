"""The wire names a provider SDK class carries: what CrossGuard hands a rule for that class's values."""

from __future__ import annotations

import inspect
import re

# `@pulumi.getter(name="wireName")` or a bare `@pulumi.getter` over `def wire_name` (same on the wire).
_GETTER = re.compile(r'@pulumi\.getter(?:\(name="(\w+)"\))?\s*\n\s*def (\w+)')


def getters(cls: type) -> set[str]:
    """Every property's wire name on this class (an input Args class or an output class)."""
    return {wire or python for wire, python in _GETTER.findall(inspect.getsource(cls))}

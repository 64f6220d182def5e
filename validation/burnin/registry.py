"""The check registry: checks register themselves with a decorator; levels pick from it.

A check is a class with a name, the levels it runs at (with the timeout enforced at each level),
`applies_to(sku)` (a skip reason, or None), `collect()` (side effects, through the backend) and a
pure `parse()`. The product checks live in `validation.burnin.checks` and register into `REGISTRY`; tests
build their own `Registry` so test-only checks never reach the product.
"""

from __future__ import annotations

import importlib
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from fleet.catalog import Sku
from fleet.results import LEVELS, Level
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome

if TYPE_CHECKING:
    from validation.burnin.backends.base import Backend

Raw = dict[str, Any]
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


class Check(ABC):
    name: ClassVar[str]
    description: ClassVar[str] = ""
    # Position in a run: cheap, decisive checks first so a broken node fails fast.
    order: ClassVar[int] = 100
    # Levels this check runs at, with the timeout (seconds) enforced from outside at each.
    timeouts: ClassVar[Mapping[Level, float]]
    # Measurement parameters per level (durations, sizes); ctx.options overrides them.
    level_params: ClassVar[Mapping[Level, Mapping[str, Any]]] = {}
    # Sizes (whole numbers) a check takes when the spec gives them, each with the smallest allowed.
    # Unset, the backend sizes them to the device: a GPU's copy buffer follows its memory.
    size_params: ClassVar[Mapping[str, int]] = {}
    # A check that reads what the checks before it left behind (errors their load raised): on
    # --resume it runs again whenever any other check of the run does.
    reads_the_run: ClassVar[bool] = False

    def applies_to(self, sku: Sku) -> str | None:
        """None when the check applies to this SKU, else why it is skipped."""
        return None

    def params(self, ctx: CheckContext) -> dict[str, Any]:
        merged = dict(self.level_params.get(ctx.level, {}))
        merged.update(ctx.options.get(self.name, {}))
        return merged

    def timeout(self, ctx: CheckContext) -> float:
        """The level's limit, longer by as much as an override lengthens the measurement (`seconds`):
        a soak an operator asks to run for ten minutes is not killed at the quick level's 90 s."""
        base = float(self.timeouts.get(ctx.level, max(self.timeouts.values())))
        asked = ctx.options.get(self.name, {}).get("seconds")
        usual = self.level_params.get(ctx.level, {}).get("seconds")
        if isinstance(asked, int | float) and isinstance(usual, int | float) and asked > usual:
            base += float(asked) - float(usual)
        return base

    def param_kinds(self) -> dict[str, type]:
        """Each measurement parameter this check takes at some level, with its kind (int or float)."""
        kinds: dict[str, type] = {}
        for params in self.level_params.values():
            for key, value in params.items():
                kinds[key] = int if isinstance(value, int) and not isinstance(value, bool) else float
        kinds.update(dict.fromkeys(self.size_params, int))
        return kinds

    @abstractmethod
    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        """Measure. All side effects go through `backend`; the result is JSON-serialisable."""

    @abstractmethod
    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        """Pure: turn what collect() returned into metrics, findings and a status."""


C = TypeVar("C", bound=type[Check])


class UnknownCheckError(KeyError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(name)
        self.name = name
        self.known = known

    def __str__(self) -> str:
        return f"unknown check {self.name!r}; known: {', '.join(self.known)}"


class Registry:
    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}

    def register(self, cls: C) -> C:
        name = getattr(cls, "name", "")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"{cls.__qualname__}: check name {name!r} must match {_NAME.pattern}")
        if name in self._checks:
            raise ValueError(f"check {name!r} is registered twice")
        timeouts = getattr(cls, "timeouts", None)
        if not timeouts or set(timeouts) - set(LEVELS) or min(timeouts.values()) <= 0:
            raise ValueError(f"check {name!r}: timeouts must map levels {LEVELS} to positive seconds")
        self._checks[name] = cls()
        return cls

    def get(self, name: str) -> Check:
        try:
            return self._checks[name]
        except KeyError:
            raise UnknownCheckError(name, self.names()) from None

    def names(self) -> list[str]:
        return [c.name for c in self._ordered()]

    def for_level(self, level: Level) -> list[Check]:
        return [c for c in self._ordered() if level in c.timeouts]

    def _ordered(self) -> list[Check]:
        return sorted(self._checks.values(), key=lambda c: (c.order, c.name))

    def __contains__(self, name: object) -> bool:
        return name in self._checks


def option_problems(registry: Registry, options: Mapping[str, Mapping[str, object]]) -> list[tuple[str, str]]:
    """(field, what is wrong) for each per-check parameter override (fleet spec `validation.checks`)
    that names a check or a parameter the registry does not know, gives a fraction where the
    parameter counts (bytes, iterations), or a size below the smallest the check measures with."""
    problems: list[tuple[str, str]] = []
    for name, params in options.items():
        where = f"validation.checks.{name}"
        if name not in registry:
            problems.append((where, f"unknown check; known: {', '.join(registry.names())}"))
            continue
        check = registry.get(name)
        kinds = check.param_kinds()
        for key, value in params.items():
            if key not in kinds:
                allowed = ", ".join(sorted(kinds)) or "none (it takes no parameters)"
                problems.append((f"{where}.{key}", f"unknown parameter of {name}; allowed: {allowed}"))
            elif kinds[key] is int and not isinstance(value, int):
                problems.append((f"{where}.{key}", f"{name}'s {key} is a whole number, got {value!r}"))
            elif (
                key in check.size_params and isinstance(value, int | float) and value < check.size_params[key]
            ):
                smallest = check.size_params[key]
                problems.append((f"{where}.{key}", f"{name}'s {key} is at least {smallest}, got {value!r}"))
    return problems


REGISTRY = Registry()
PRODUCT_REGISTRY = "validation.burnin.checks:REGISTRY"


def register(cls: C) -> C:
    """Class decorator: add a product check to the product registry."""
    return REGISTRY.register(cls)


def load_registry(ref: str) -> Registry:
    """Import `module:attribute` and return the Registry it names (the worker's way in)."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"registry reference {ref!r} is not 'module:attribute'")
    found = getattr(importlib.import_module(module_name), attr, None)
    if not isinstance(found, Registry):
        raise ValueError(f"{ref} is not a validation.burnin.registry.Registry")
    return found

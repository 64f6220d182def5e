"""The house's import rules, read from the source (AST), so a violation fails here and not on a
bare node months later.

- The node side (validation/burnin/) imports only the ground floor (fleet/), itself, the standard
  library and the core dependencies: never the controller side, the CLI, Pulumi, Ansible or a cloud SDK.
- The controller side (gate, reports, actions, fleetrun, fabric) never imports the node side.
- Nothing below the front door imports `fleetforge`.
- The ground floor imports nothing above it; stacks/, policy/ and validation/ are blind to each other.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

CONTROLLER = (
    "validation.gate",
    "validation.reports",
    "validation.actions",
    "validation.fleetrun",
    "validation.fabric",
    "validation.bringup",
)
# Core dependencies a node installs (pyproject [project] dependencies), by import name.
CORE = {
    "numpy",
    "pydantic",
    "pydantic_core",
    "yaml",
    "typer",
    "rich",
    "click",
    "typing_extensions",
    "annotated_types",
}
# Optional libraries the node-side backends import lazily, inside a function, and only on hosts
# that have the accelerator: allowed there, never at module level.
NODE_OPTIONAL = {"torch", "jax", "jaxlib", "pynvml"}
WINGS = ("stacks", "policy", "validation")


def _rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(path.name)


def _package(path: Path) -> str:
    return ".".join(_rel(path).with_suffix("").parts[:-1])


@functools.cache
def _tree() -> dict[str, list[tuple[str, int, bool]]]:
    """The imports of every module of the packages the rules judge, read in a fresh interpreter
    (tests/import_graph.py says why)."""
    paths = _sources("fleet", "fleetforge", *WINGS)
    return _read_imports([(p, _package(p)) for p in paths])


def _read_imports(files: list[tuple[Path, str]]) -> dict[str, list[tuple[str, int, bool]]]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.import_graph"],
        input=json.dumps([[str(p), pkg] for p, pkg in files]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    return {
        path: [(m, line, top) for m, line, top in found] for path, found in json.loads(done.stdout).items()
    }


def _imports(path: Path, package: str | None = None) -> list[tuple[str, int, bool]]:
    """(module, line, at module level) for every import in `path`."""
    if package is None and str(path) in _tree():
        return _tree()[str(path)]
    return _read_imports([(path, package or _package(path))])[str(path)]


def _sources(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg.replace(".", "/")).rglob("*.py"))


def _under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _violations(paths: list[Path], refused: tuple[str, ...]) -> list[str]:
    return [
        f"{_rel(p)}:{line}: imports {mod}"
        for p in paths
        for mod, line, _ in _imports(p)
        if _under(mod, *refused)
    ]


def _node_side_violations(paths: list[Path], package: str | None = None) -> list[str]:
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for p in paths:
        for mod, line, top in _imports(p, package):
            root = mod.split(".")[0]
            if (
                root in stdlib
                or root == "__future__"
                or root in CORE
                or _under(mod, "fleet", "validation.burnin")
            ):
                continue
            if mod == "validation":  # `from validation.burnin import x` yields its package too
                continue
            if root in NODE_OPTIONAL and not top:
                continue
            bad.append(f"{_rel(p)}:{line}: imports {mod}")
    return bad


def test_the_node_side_imports_only_the_ground_floor_and_core_dependencies() -> None:
    bad = _node_side_violations(_sources("validation.burnin"))
    assert not bad, "\n".join(bad)


def test_the_controller_side_never_imports_the_node_side() -> None:
    assert not _violations(_sources(*CONTROLLER), ("validation.burnin",))


@pytest.mark.parametrize("wing", ["fleet", *WINGS])
def test_nothing_below_the_front_door_imports_it(wing: str) -> None:
    assert not _violations(_sources(wing), ("fleetforge",))


def test_the_ground_floor_imports_no_wing() -> None:
    assert not _violations(_sources("fleet"), WINGS)


@pytest.mark.parametrize("wing", WINGS)
def test_the_wings_are_blind_to_each_other(wing: str) -> None:
    others = tuple(w for w in WINGS if w != wing)
    assert not _violations(_sources(wing), others)


def test_the_rules_catch_a_violation(tmp_path: Path) -> None:
    """The checker itself fires (a rule that never fires is a defect): a node module importing the
    gate, a cloud SDK, the CLI through a relative import, and torch at module level."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json\nfrom validation.gate import decide\nimport boto3\nfrom ... import gate\nimport fleetforge.cli\n"
        "import torch\ndef lazy():\n    import torch\n"
    )
    found = _node_side_violations([probe], package="validation.burnin.checks")
    assert found == [
        "probe.py:2: imports validation.gate",
        "probe.py:2: imports validation.gate.decide",
        "probe.py:3: imports boto3",
        "probe.py:4: imports validation.gate",
        "probe.py:5: imports fleetforge.cli",
        "probe.py:6: imports torch",
    ]

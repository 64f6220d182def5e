"""Every import in a set of Python files, read from their AST: the data of tests/test_import_rules.py.

Run as `python -m tests.import_graph` with a JSON list of [path, package] on standard input; prints
{path: [[module, line, at module level], ...]}. The rules call it in a fresh interpreter: CPython
3.11.7 can fail any later `ast.parse` in a process with "AST constructor recursion depth mismatch"
once an earlier AST conversion in that process failed (CPython gh-106905, fixed in 3.11.8), and the
suite runs many libraries that parse Python before this test does.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Iterator
from pathlib import Path


def imports(path: Path, package: str) -> Iterator[tuple[str, int, bool]]:
    """(module, line, at module level) for every import in `path`, relative imports resolved
    against `package` (the package the file is in)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, id(node) in top_level
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            yield base, node.lineno, id(node) in top_level
            for alias in node.names:  # `from validation import burnin` imports validation.burnin
                yield f"{base}.{alias.name}", node.lineno, id(node) in top_level


def main() -> int:
    wanted = json.load(sys.stdin)
    table = {path: [list(i) for i in imports(Path(path), package)] for path, package in wanted}
    json.dump(table, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

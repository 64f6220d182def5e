"""The test hosts' bytecode cache for zip imports, run in a Python of its own (installing it here
would change how this test process imports)."""

from __future__ import annotations

import marshal
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hosts import zipimport_bytecode

IMPORT_TWICE = textwrap.dedent(
    """
    import sys, traceback
    sys.path.insert(0, {module_dir!r})
    import zipimport_bytecode
    zipimport_bytecode.CACHE_DIR = {cache!r}
    compiles = []
    compile_source = zipimport_bytecode._compile_source
    zipimport_bytecode._compile_source = lambda *a: compiles.append(a) or compile_source(*a)
    zipimport_bytecode.install()
    for zip_path in sys.argv[1:]:
        sys.path.insert(0, zip_path)
        sys.modules.pop("payload", None)
        import payload
        print(payload.Answer().value())
        try:
            payload.fail()
        except ValueError:
            print(traceback.extract_tb(sys.exc_info()[2])[-1].filename)
        sys.path.remove(zip_path)
    print(f"compiled {{len(compiles)}}")
    """
)
PAYLOAD = textwrap.dedent(
    """
    class Answer:
        def value(self):
            return 42

    def fail():
        raise ValueError("from the zip")
    """
)


def _zip(path: Path, source: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("payload.py", source)
    return path


def _run(tmp_path: Path, zip_path: Path, *more: Path | str) -> tuple[list[str], int]:
    """Import payload from each zip in turn, in a new Python (options: the strings in `more`):
    what it printed, and how many times it compiled source."""
    script = IMPORT_TWICE.format(
        module_dir=str(Path(zipimport_bytecode.__file__).parent), cache=str(tmp_path / "cache")
    )
    zips = [str(z) for z in (zip_path, *more) if isinstance(z, Path)]
    options = [o for o in more if isinstance(o, str)]
    done = subprocess.run(
        [sys.executable, *options, "-c", script, *zips], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    *lines, compiled = done.stdout.splitlines()
    return lines, int(compiled.removeprefix("compiled "))


def test_a_module_from_a_new_zip_path_comes_from_the_cache_with_that_path_in_its_code(
    tmp_path: Path,
) -> None:
    first = _zip(tmp_path / "first.zip", PAYLOAD)
    second = _zip(tmp_path / "second.zip", PAYLOAD)
    lines, compiled = _run(tmp_path, first, second)
    assert lines == [
        "42",
        str(first / "payload.py"),
        "42",
        str(second / "payload.py"),  # the cached code, renamed to the zip it was found in
    ]
    assert compiled == 1
    assert _run(tmp_path, second) == (lines[2:], 0)  # another Python reads it back from disk


def test_changed_source_is_compiled_again(tmp_path: Path) -> None:
    first = _zip(tmp_path / "first.zip", PAYLOAD)
    changed = _zip(tmp_path / "changed.zip", PAYLOAD.replace("return 42", "return 43"))
    lines, compiled = _run(tmp_path, first, changed)
    assert lines[::2] == ["42", "43"] and compiled == 2


def test_a_cache_that_cannot_be_written_only_costs_the_compile(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file where the folder should be")
    first = _zip(tmp_path / "first.zip", PAYLOAD)
    assert _run(tmp_path, first)[0][0] == "42"
    assert _run(tmp_path, first)[1] > 0  # nothing stored, so compiled again


@pytest.mark.parametrize(
    "damage",
    [lambda entry: entry.read_bytes()[:10], lambda entry: marshal.dumps(42)],
    ids=["truncated", "not-code"],
)
def test_a_damaged_entry_is_compiled_again_and_replaced(
    tmp_path: Path, damage: Callable[[Path], bytes]
) -> None:
    first = _zip(tmp_path / "first.zip", PAYLOAD)
    _run(tmp_path, first)
    (entry,) = (tmp_path / "cache").iterdir()
    entry.write_bytes(damage(entry))
    assert _run(tmp_path, first) == (["42", str(first / "payload.py")], 1)
    assert _run(tmp_path, first)[1] == 0


def test_code_compiled_without_asserts_is_not_served_to_a_run_with_them(tmp_path: Path) -> None:
    first = _zip(tmp_path / "first.zip", PAYLOAD)
    _run(tmp_path, first, "-O")
    assert _run(tmp_path, first)[1] == 1
    assert len(list((tmp_path / "cache").iterdir())) == 2

"""A bytecode cache for modules imported from zip files, installed into every local test host's
Python (harness.py copies this file and a .pth line that calls install()).

Every Ansible task runs its module from a zip (AnsiballZ) at a new temporary path, and Python never
caches bytecode for zip imports: each task compiled ansible.module_utils from source again (Python
3.11 compiles a module from a zip twice per import), 115 ms of the 280 ms of CPU the module's
Python took per trivial task on a host (process accounting). All told such a task costs the machine
202 ms of CPU without the cache and 155 ms with it, ansible-playbook's start-up left out
(benchmarks/ansible_task_cost.py, median of 3).

Keyed by the source's hash, a cached module is the same module; only the file name its code
objects carry is set to where this run found it, so tracebacks still point at the zip in use.
Test hosts only: a real node pays for the compile, and nothing under test depends on that.
"""

from __future__ import annotations

import _thread
import marshal
import os
import sys
import types
import zipimport

CACHE_DIR = "/var/cache/zipimport-bytecode"
_compile_source = getattr(zipimport, "_compile_source", None)


def install() -> None:
    """Route zipimport's compiles through the cache; a Python without that hook is left alone."""
    if _compile_source is not None:
        zipimport._compile_source = cached_compile  # type: ignore[attr-defined]


def cached_compile(pathname: str, source: bytes) -> types.CodeType:
    # Imported here, not at start-up: the .pth line runs in every Python the host starts.
    import hashlib

    assert _compile_source is not None
    # What else shapes the code: the interpreter's bytecode version, -O (which drops asserts) and
    # whether column positions are kept (no_debug_ranges drops them from tracebacks).
    no_ranges = "no_debug_ranges" in sys._xoptions or bool(os.environ.get("PYTHONNODEBUGRANGES"))
    salt = f"{sys.implementation.cache_tag}-O{sys.flags.optimize}-r{int(no_ranges)}\0".encode()
    key = hashlib.sha256(salt + source).hexdigest()
    path = os.path.join(CACHE_DIR, key)
    try:
        with open(path, "rb") as f:
            code = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError):
        code = None
    if not isinstance(code, types.CodeType):  # absent, damaged, or not code at all: a miss
        code = _compile_source(pathname, source)
        _store(path, code)
        return code  # type: ignore[no-any-return]
    return _with_filename(code, pathname)


def _store(path: str, code: types.CodeType) -> None:
    # Written aside and renamed: a process reading the cache never sees half an entry.
    tmp = f"{path}.{os.getpid()}.{_thread.get_ident()}.tmp"
    try:
        os.makedirs(CACHE_DIR, mode=0o700, exist_ok=True)
        with open(tmp, "wb") as f:
            marshal.dump(code, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written is only slower


def _with_filename(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(
        _with_filename(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts
    )
    return code.replace(co_filename=filename, co_consts=consts)

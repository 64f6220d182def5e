"""Text from a node, a spec or a file, made safe to print on one terminal line."""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` with every non-printable character (C0/C1 controls, newline, ESC, bidi overrides,
    line and paragraph separators) written as its Python escape, so it shows as itself and can
    neither add a line nor drive the terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)

"""`fleetforge plan --markdown`: the plan as GitHub-flavoured markdown for a PR comment or job summary.

Everything that comes from the spec or the recorded resources (names, types, messages, output
values) is data, not markup: a resource named `x|y` must not add a table column, and a tag
value holding `<img src=...>`, a link or an @mention must render as text in the comment.
Identifiers go into code spans, where markdown and HTML are inert; prose is escaped character
by character.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from fleetforge.plan import Plan
from policy.rules import RESOURCE_RULES, STACK_RULES

# ASCII punctuation that can start markdown syntax (emphasis, links, headings, lists, tables,
# strikethrough, mentions); CommonMark lets any ASCII punctuation be backslash-escaped.
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|~@:])")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029]+")


def _one_line(value: object) -> str:
    return _LINE_BREAKS.sub(" ", str(value)).strip()


def text(value: object) -> str:
    """Prose for a table cell or a line: shown as written, never interpreted."""
    escaped = html.escape(_one_line(value), quote=False)
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", escaped)


def code(value: object) -> str:
    """An identifier as a code span that survives any content: backticks inside get a longer
    fence, and pipes are escaped because GFM splits table rows before it parses code spans."""
    raw = _one_line(value)
    if not raw:
        return ""
    longest = max((len(run) for run in re.findall(r"`+", raw)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if raw.startswith("`") or raw.endswith("`") or longest else ""
    return f"{fence}{pad}{raw.replace('|', chr(92) + '|')}{pad}{fence}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    aligns = align or "l" * len(header)
    rule = ["---:" if a == "r" else "---" for a in aligns]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def render_markdown(plan: Plan, source: str, summary: Sequence[str] = ()) -> str:
    """The plan as markdown: verdict first, then resources by type, every policy rule's verdict,
    each violation with its rule and resource, and the full resource list folded away."""
    violations = plan.violations
    n = len(plan.resources)
    lines = [f"## fleetforge plan: {code(source)}", ""]
    if violations:
        lines.append(
            f"**Policy: FAIL**: {len(violations)} violation(s) in {n} resources; `pulumi up` would be refused."
        )
    else:
        lines.append(f"**Policy: PASS**: {n} resources, no policy violations.")
    lines.append("")
    if summary:
        lines += [f"- {text(line)}" for line in summary]
        lines.append("")

    by_type = Counter(r.type for r in plan.resources)
    lines += ["### Resources by type", ""]
    lines += _table(("type", "count"), ((code(t), str(c)) for t, c in sorted(by_type.items())), "lr")
    lines.append("")

    broken = Counter(v.rule for v in violations)
    rules = [(r.name, r.description) for r in RESOURCE_RULES] + [(r.name, r.description) for r in STACK_RULES]
    # A rule the plan reports that the pack does not list (a newer pack) still gets its row.
    known = {name for name, _ in rules}
    rules += [(name, "") for name in sorted(broken) if name not in known]
    lines += ["### Policy verdicts", ""]
    lines += _table(
        ("rule", "verdict", "what it requires"),
        (
            (code(name), f"FAIL ({broken[name]})" if broken[name] else "pass", text(description))
            for name, description in rules
        ),
    )
    lines.append("")

    if violations:
        lines += ["### Violations", ""]
        lines += _table(
            ("rule", "resource type", "resource", "message"),
            ((code(v.rule), code(v.type), code(v.name), text(v.message)) for v in violations),
        )
        lines.append("")

    lines += ["<details><summary>All resources</summary>", ""]
    lines += _table(
        ("#", "type", "name"),
        ((str(i), code(r.type), code(r.name)) for i, r in enumerate(plan.resources, 1)),
        "rll",
    )
    lines += ["", "</details>", ""]
    if plan.placeholders:
        lines.append(
            "Placeholders (made up by the mocks; the cloud assigns them at deploy time): "
            + ", ".join(code(p) for p in plan.placeholders)
        )
        lines.append("")
    if plan.warnings:
        lines += ["### Pulumi warnings", ""]
        lines += [f"- {text(w)}" for w in plan.warnings]
        lines.append("")
    return "\n".join(lines)

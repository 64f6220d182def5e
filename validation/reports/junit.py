"""JUnit XML: one testcase per node x check, classname = node, for CI test report views.

The shape is the common one CI tools read (Jenkins, GitLab, GitHub test reporters):
testsuites > testsuite > testcase, a testcase holding at most one of failure / error / skipped.
Measured problems (floor, outlier, version, fail) are failures; what the gate could not see
(missing, error, unreadable) are errors. Besides one testcase per check, every node has a
`versions` testcase (homogeneity) and a `results` testcase (readable and complete), so every
reason lands on exactly one testcase and an accepted node shows all green.

Node names, check names and reasons come from the nodes; XML 1.0 cannot hold every character
(control characters, lone surrogates, U+FFFE/U+FFFF), and ElementTree writes them unescaped,
which leaves a file no CI tool can parse. Each such character is written as its Python escape
(`\x01`, `\ud800`), so the report stays well-formed and still shows what the node wrote.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from validation.gate import INCOMPLETE_RULES, GateResult, NodeVerdict, Reason

SUITE = "fleetforge gate"
# Everything outside XML 1.0's Char production (tab, LF, CR and the ranges below are allowed).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: object) -> str:
    """`value` as text XML 1.0 can hold: each character it cannot is written as its escape."""
    return _NOT_XML.sub(
        lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), str(value)
    )


def _testcase_of(reason: Reason) -> str:
    if reason.check:
        return reason.check
    return "versions" if reason.rule == "version" else "results"


def _cases(v: NodeVerdict) -> dict[str, list[Reason]]:
    cases: dict[str, list[Reason]] = {name: [] for name in v.checks}
    cases.setdefault("versions", [])
    cases.setdefault("results", [])
    for reason in v.reasons:
        cases.setdefault(_testcase_of(reason), []).append(reason)
    return cases


def render_junit(result: GateResult) -> str:
    root = ET.Element("testsuites", name=SUITE)
    suite = ET.SubElement(root, "testsuite", name=xml_text(f"{SUITE} ({result.fleet.sku or 'unknown SKU'})"))
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("sku", result.fleet.sku),
        ("fleet", result.fleet.name),
        ("ready", result.fleet.ready),
        ("outcome", result.outcome()),
    ):
        if value is not None:
            ET.SubElement(
                props,
                "property",
                name=key,
                value=str(value).lower() if isinstance(value, bool) else xml_text(value),
            )
    tests = failures = errors = skipped = 0
    total_time = 0.0
    for v in result.nodes:
        for name, reasons in _cases(v).items():
            outcome = v.checks.get(name)
            seconds = outcome.duration_s if outcome else 0.0
            total_time += seconds
            case = ET.SubElement(
                suite, "testcase", classname=xml_text(v.node), name=xml_text(name), time=f"{seconds:.3f}"
            )
            tests += 1
            if reasons:
                incomplete = any(r.rule in INCOMPLETE_RULES for r in reasons)
                errors += incomplete
                failures += not incomplete
                first = reasons[0].message + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else "")
                element = ET.SubElement(
                    case,
                    "error" if incomplete else "failure",
                    message=xml_text(first),
                    type=xml_text(",".join(sorted({r.rule for r in reasons}))),
                )
                element.text = xml_text("\n".join(r.message for r in reasons))
            elif outcome is not None and outcome.state == "skip":
                skipped += 1
                ET.SubElement(case, "skipped", message=xml_text(outcome.detail or "skipped"))
    counts = {
        "tests": str(tests),
        "failures": str(failures),
        "errors": str(errors),
        "skipped": str(skipped),
        "time": f"{total_time:.3f}",
    }
    for element in (root, suite):
        for key, value in counts.items():
            element.set(key, value)
    if result.notes:
        ET.SubElement(suite, "system-out").text = xml_text("\n".join(result.notes))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

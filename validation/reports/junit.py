"""JUnit XML: one testcase per node x check, classname = node, for CI test report views.

The shape is the common one CI tools read (Jenkins, GitLab, GitHub test reporters):
testsuites > testsuite > testcase, a testcase holding at most one of failure / error / skipped.
Measured problems (floor, outlier, version, fail) are failures; what the gate could not see
(missing, error, unreadable) are errors. Besides one testcase per check, every node has a
`versions` testcase (homogeneity) and a `results` testcase (readable and complete), so every
reason lands on exactly one testcase and an accepted node shows all green.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from validation.gate import INCOMPLETE_RULES, GateResult, NodeVerdict, Reason

SUITE = "fleetforge gate"


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
    suite = ET.SubElement(root, "testsuite", name=f"{SUITE} ({result.fleet.sku or 'unknown SKU'})")
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
                value=str(value).lower() if isinstance(value, bool) else str(value),
            )
    tests = failures = errors = skipped = 0
    total_time = 0.0
    for v in result.nodes:
        for name, reasons in _cases(v).items():
            outcome = v.checks.get(name)
            seconds = outcome.duration_s if outcome else 0.0
            total_time += seconds
            case = ET.SubElement(suite, "testcase", classname=v.node, name=name, time=f"{seconds:.3f}")
            tests += 1
            if reasons:
                incomplete = any(r.rule in INCOMPLETE_RULES for r in reasons)
                errors += incomplete
                failures += not incomplete
                first = reasons[0].message + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else "")
                element = ET.SubElement(
                    case,
                    "error" if incomplete else "failure",
                    message=first,
                    type=",".join(sorted({r.rule for r in reasons})),
                )
                element.text = "\n".join(r.message for r in reasons)
            elif outcome is not None and outcome.state == "skip":
                skipped += 1
                ET.SubElement(case, "skipped", message=outcome.detail or "skipped")
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
        ET.SubElement(suite, "system-out").text = "\n".join(result.notes)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

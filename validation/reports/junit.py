"""JUnit XML: one testcase per node x check, classname = node, for CI test report views.

The shape is the common one CI tools read (Jenkins, GitLab, GitHub test reporters):
testsuites > testsuite > testcase, a testcase holding at most one of failure / error / skipped.
Measured problems (floor, outlier, version, fail) are failures; what the gate could not see
(missing, error, unreadable) are errors. Besides one testcase per check, every node has a
`versions` testcase (homogeneity) and a `results` testcase (readable and complete), so every
reason lands on exactly one testcase and an accepted node shows all green.

With a fleet plan (a spec) the gate's verdict is the fleet's, not the nodes': every node that
reported can pass while the fleet is short of the nodes the job needs, and the gate fails. So a
fleet-level testcase (classname `fleet <name>`, name `ready`) carries the gate's own outcome
(`GateResult.outcome(strict)`, which the exit code maps): a failure saying NOT READY and by how
many nodes, or under --strict the rejected (failure) or incomplete (error) nodes that fail the
gate although spares cover them. Without a plan readiness is unknown, the gate's outcome is the
nodes' own, and the per-node testcases already say it: no fleet testcase.

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


def _fleet_case(result: GateResult, strict: bool) -> tuple[str, str | None, str] | None:
    """The fleet testcase's classname, its problem (None when it passes: then `text` says READY)
    and its text; None without a fleet plan. Mirrors the gate's outcome and its fleet line."""
    f = result.fleet
    if f.ready is None or f.required is None:
        return None
    classname = f"fleet {f.name}" if f.name else "fleet"
    lists = [f"accepted ({len(f.accepted)}): {', '.join(f.accepted) or '-'}"]
    lists.append(f"rejected ({len(f.rejected)}): {', '.join(f.rejected) or '-'}")
    if not f.ready:
        short = f.required - len(f.accepted)
        message = f"NOT READY: {len(f.accepted)} accepted, {f.required} needed (short by {short})"
        return classname, message, "\n".join([f"{classname}: {message}", *lists])
    ready = f"READY: job on {len(f.job)} node(s), {len(f.spare)} spare(s) ({f.required} needed)"
    outcome = result.outcome(strict)
    if outcome == "ok":
        return classname, None, "\n".join([f"{classname}: {ready}", *lists])
    which = "an incomplete" if outcome == "incomplete" else "a rejected"
    message = f"--strict: {which} node fails the gate even though spares cover it"
    return classname, message, "\n".join([f"{classname}: {ready}", message, *lists])


def render_junit(result: GateResult, strict: bool = False) -> str:
    """`strict` as given to the gate (--strict): the fleet testcase follows its outcome."""
    root = ET.Element("testsuites", name=SUITE)
    suite = ET.SubElement(root, "testsuite", name=xml_text(f"{SUITE} ({result.fleet.sku or 'unknown SKU'})"))
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("sku", result.fleet.sku),
        ("fleet", result.fleet.name),
        ("ready", result.fleet.ready),
        ("outcome", result.outcome(strict)),
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
    fleet_case = _fleet_case(result, strict)
    if fleet_case is not None:
        classname, problem, text = fleet_case
        case = ET.SubElement(suite, "testcase", classname=xml_text(classname), name="ready", time="0.000")
        tests += 1
        if problem is None:
            ET.SubElement(case, "system-out").text = xml_text(text)
        else:
            incomplete = result.outcome(strict) == "incomplete"
            errors += incomplete
            failures += not incomplete
            element = ET.SubElement(
                case,
                "error" if incomplete else "failure",
                message=xml_text(problem),
                type="strict" if result.fleet.ready else "not-ready",
            )
            element.text = xml_text(text)
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

"""`fleetforge plan --markdown`: a summary a forge can render, where spec text stays text."""

from __future__ import annotations

import json
import re

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

import fleetforge.plan as planner
from fleet.spec import load_spec
from fleetforge import exitcodes
from fleetforge.cli import main
from fleetforge.plan import Plan, PlannedResource
from fleetforge.plan_markdown import code, render_markdown, text
from policy.rules import RESOURCE_RULES, STACK_RULES, Violation
from tests.conftest import EXAMPLES

P5 = str(EXAMPLES / "aws-p5-fleet.yaml")
# CommonMark plus GFM tables: the parts of GitHub's and GitLab's renderers a plan summary uses.
MD = MarkdownIt("commonmark").enable("table")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code_ = main(list(argv))
    captured = capsys.readouterr()
    return code_, captured.out, captured.err


def _cell_text(inline: Token) -> str:
    return "".join(
        child.content if child.type in {"text", "code_inline"} else " " if child.type == "softbreak" else ""
        for child in inline.children or []
    )


def tables(markdown: str) -> list[list[list[str]]]:
    """Every table as rows of cell texts (header row first), the way a renderer sees them."""
    found: list[list[list[str]]] = []
    row: list[str] = []
    tokens = MD.parse(markdown)
    for i, tok in enumerate(tokens):
        if tok.type == "table_open":
            found.append([])
        elif tok.type == "tr_open":
            row = []
        elif tok.type in {"th_open", "td_open"}:
            row.append(_cell_text(tokens[i + 1]))
        elif tok.type == "tr_close":
            found[-1].append(row)
    return found


def table_after(markdown: str, heading: str) -> list[list[str]]:
    before = markdown.split(heading, 1)[0]
    return tables(markdown)[len(tables(before))]


def test_clean_plan_counts_resources_by_type_and_passes_every_rule(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code_, out, err = run(capsys, "plan", P5, "--json")
    assert code_ == exitcodes.OK, err
    resources = json.loads(out)["resources"]
    code_, out, err = run(capsys, "plan", P5, "--markdown")
    assert code_ == exitcodes.OK, err
    assert "**Policy: PASS**" in out and f"{len(resources)} resources, no policy violations" in out
    by_type = table_after(out, "### Resources by type")
    assert by_type[0] == ["type", "count"]
    expected: dict[str, int] = {}
    for r in resources:
        expected[r["type"]] = expected.get(r["type"], 0) + 1
    assert {t: int(c) for t, c in by_type[1:]} == expected
    verdicts = table_after(out, "### Policy verdicts")
    assert [row[0] for row in verdicts[1:]] == [r.name for r in (*RESOURCE_RULES, *STACK_RULES)]
    assert {row[1] for row in verdicts[1:]} == {"pass"}
    assert "### Violations" not in out
    # The folded list holds every resource by name; the summary lines name the fleet.
    listed = table_after(out, "<details>")
    assert len(listed) == len(resources) + 1 and "llm-pretrain-p5-nodes" in {row[2] for row in listed}
    assert "fleet: llm-pretrain-p5" in MD.render(out)


def test_violations_fail_the_plan_and_name_rule_and_resource(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = [
        Violation(
            "imdsv2-required", "aws:ec2/launchTemplate:LaunchTemplate", "lt", "httpTokens is 'optional'"
        ),
        Violation("imdsv2-required", "aws:ec2/instance:Instance", "i-1", "httpTokens is 'optional'"),
    ]
    monkeypatch.setattr(planner, "check", lambda resources: found if list(resources) else [])
    code_, out, err = run(capsys, "plan", P5, "--markdown")
    assert code_ == exitcodes.REJECTED
    assert "**Policy: FAIL**: 2 violation(s)" in out and "[imdsv2-required]" in err
    verdicts = {row[0]: row[1] for row in table_after(out, "### Policy verdicts")[1:]}
    assert verdicts["imdsv2-required"] == "FAIL (2)" and verdicts["no-public-ip"] == "pass"
    assert table_after(out, "### Violations") == [
        ["rule", "resource type", "resource", "message"],
        ["imdsv2-required", "aws:ec2/launchTemplate:LaunchTemplate", "lt", "httpTokens is 'optional'"],
        ["imdsv2-required", "aws:ec2/instance:Instance", "i-1", "httpTokens is 'optional'"],
    ]


def test_json_and_markdown_together_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code_, out, err = run(capsys, "plan", P5, "--json", "--markdown")
    assert code_ == exitcodes.USAGE and out == "" and "choose one" in err


OWN_TAGS = {"h2", "h3", "p", "strong", "code", "ul", "li", "table", "thead", "tbody", "tr", "th", "td"}
OWN_TAGS |= {"details", "summary"}
HOSTILE = [
    "a|b|c",
    "`tick` ``two``",
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "[click](https://evil.example)",
    "line\nbreak\r\n| forged | row |",
    "@octo-org/admins please merge",
    "**bold** _it_ ~~gone~~ # head",
    "back\\slash\\|",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_spec_text_cannot_change_the_table_or_inject_markup(value: str) -> None:
    spec = load_spec(P5)
    plan = Plan(
        spec,
        resources=(PlannedResource(value, value, {}, "id", "urn"),),
        outputs={},
        violations=(Violation(value, value, value, value),),
        warnings=(value,),
    )
    markdown = render_markdown(plan, value, [value])
    shown = " ".join(value.replace("\r\n", "\n").split("\n")).strip()
    violations = table_after(markdown, "### Violations")
    assert violations[1:] == [[shown, shown, shown, shown]]
    assert table_after(markdown, "<details>")[1:] == [["1", shown, shown]]
    assert table_after(markdown, "### Resources by type")[1:] == [[shown, "1"]]
    rendered = MD.render(markdown)
    # Only the renderer's own structure: no tag, link, emphasis or heading from the value.
    assert set(re.findall(r"<([a-z0-9]+)", rendered)) <= OWN_TAGS
    assert rendered.count("<strong>") == 1 and rendered.count("<h2>") == 1


@pytest.mark.parametrize("value", HOSTILE)
def test_text_and_code_render_back_to_the_value(value: str) -> None:
    shown = " ".join(value.replace("\r\n", "\n").split("\n")).strip()
    for cell in (text(value), code(value)):
        (table,) = tables(f"| h |\n| --- |\n| {cell} |\n")
        assert table[1] == [shown]

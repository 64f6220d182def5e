"""Hostile node words in the gate's reports: `fleetforge gate --junit --prom --html --inventory-out`
over results whose node names and reasons hold markup, control characters, mathtext and Jinja.

Each case asserts the exact exit code, that only the asked-for reports appeared, and that every
report parses with a real reader (xml.etree, prometheus_client, html.parser, ansible-inventory).
"""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from fleetforge import exitcodes
from tests.hostile.conftest import Canary, tree
from tests.hostile.helpers import ansible_hostvars, ansible_list
from tests.validation.gate.helpers import check_record, fleet, write
from validation.reports import html as html_report

REPORTS = {"--junit": "gate.xml", "--prom": "gate.prom", "--html": "gate.html", "--inventory-out": "ok.yml"}

# Names a node gives itself through its results file's name (anything but '/' and NUL).
NAMES = [
    "ctl\x01\x1b[2J\x7f",
    "line\nbreak\rcr",
    "\ufffe\uffff",
    "]]><!--x-->",
    'q"uo\\te',
    "$\\foo$",
    "$x_{1}$",
    "<img src=x onerror=alert(1)>",
    "{{ lookup('pipe', 'touch PWNED') }}",
    "node[1:99]",
    "\u202eevil",
]


def gate_reports(cli: Any, tmp_path: Path, results: Path) -> Any:
    out = tmp_path / "reports"
    out.mkdir()
    argv: list[Any] = ["gate", results]
    for option, name in REPORTS.items():
        argv += [option, out / name]
    return cli(*argv)


def results_named(tmp_path: Path, name: str, reason: str = "slow") -> Path:
    """Three nodes; `name` (in place of node2) failed its storage check with `reason`."""
    records = fleet(3)
    records[name] = [r.model_copy(update={"node": name}) for r in records.pop("node2")]
    records[name].append(check_record(name, "storage", "fail", reason=reason))
    return write(tmp_path / "results", records)


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.handlers: list[str] = []  # on* attributes: script a node name could smuggle in
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.handlers += [k for k, _ in attrs if k.lower().startswith("on")]
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


def assert_reports_readable(folder: Path) -> None:
    ET.parse(folder / "gate.xml")
    text = (folder / "gate.prom").read_bytes().decode("utf-8")
    assert list(text_string_to_metric_families(text))
    page = _Html()
    page.feed((folder / "gate.html").read_text(encoding="utf-8"))
    assert not {"img", "iframe", "object", "embed"} & set(page.tags)
    assert not page.handlers
    # The one script is the page's own table sorter, word for word: nothing from a node ran in.
    assert page.scripts == [html_report._SORT_JS]
    ansible_list(folder / "ok.yml")


@pytest.mark.parametrize("name", NAMES, ids=ascii)
def test_a_hostile_node_name_gives_well_formed_reports(cli: Any, tmp_path: Path, name: str) -> None:
    results = results_named(tmp_path, name)
    run = gate_reports(cli, tmp_path, results)
    assert run.code == exitcodes.REJECTED, run.err
    assert tree(tmp_path / "reports") == set(REPORTS.values())
    assert_reports_readable(tmp_path / "reports")
    classnames = {c.get("classname") for c in ET.parse(tmp_path / "reports" / "gate.xml").iter("testcase")}
    assert len(classnames) == 3
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "reports" / "PWNED").exists()


@pytest.mark.parametrize("name", ["{{ x }}", "node[1:99]", "a:22"], ids=ascii)
def test_an_accepted_node_that_cannot_be_a_host_leaves_the_inventory_empty(
    cli: Any, tmp_path: Path, name: str
) -> None:
    records = fleet(3)
    records[name] = [r.model_copy(update={"node": name}) for r in records.pop("node2")]
    run = gate_reports(cli, tmp_path, write(tmp_path / "results", records))
    assert run.code == exitcodes.OK, run.err
    listed = ansible_list(tmp_path / "reports" / "ok.yml")
    assert listed["_meta"]["hostvars"] == {}


def test_a_reason_holding_jinja_is_data_in_every_report(cli: Any, tmp_path: Path, canary: Canary) -> None:
    results = results_named(tmp_path, "node2", reason=canary.pipe)
    run = gate_reports(cli, tmp_path, results)
    assert run.code == exitcodes.REJECTED, run.err
    assert_reports_readable(tmp_path / "reports")
    failure = [
        e
        for e in ET.parse(tmp_path / "reports" / "gate.xml").iter("failure")
        if canary.pipe in (e.text or "")
    ]
    assert failure
    ansible_hostvars(tmp_path / "reports" / "ok.yml")
    canary.assert_untouched()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reason=st.text(st.characters(exclude_categories=()), max_size=60))
def test_any_reason_text_leaves_the_junit_well_formed(cli: Any, tmp_path: Path, reason: str) -> None:
    if "\x00" in reason or not reason.strip():
        reason = f"x{reason.replace(chr(0), '')}"
    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # one per example: Hypothesis may replay one
    # a lone surrogate cannot reach a results file (it is not UTF-8): written escaped, read back as one
    records = fleet(3)
    records["node2"].append(
        check_record("node2", "storage", "fail", reason="slow").model_copy(update={"reason": reason})
    )
    results = write(folder / "results", records)
    # The JUnit file alone: the other reports' escaping has tests of its own (the HTML page's
    # plots cost a second per example, the XML a few milliseconds).
    run = cli("gate", results, "--junit", folder / "gate.xml")
    assert run.code in (exitcodes.REJECTED, exitcodes.INCOMPLETE), run.err
    ET.parse(folder / "gate.xml")


def test_a_report_that_cannot_be_written_is_one_line_and_leaves_the_old_file(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = results_named(tmp_path, "node2")
    out = tmp_path / "reports"
    out.mkdir()
    (out / "gate.prom").write_text("old\n")
    missing = cli("gate", results, "--prom", tmp_path / "nowhere" / "gate.prom")
    assert missing.code == exitcodes.USAGE and len(missing.err.strip().splitlines()) == 1

    def disk_full(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    run = cli("gate", results, "--prom", out / "gate.prom")
    assert run.code == exitcodes.IO_ERROR and "No space left on device" in run.err
    assert (out / "gate.prom").read_text() == "old\n" and tree(out) == {"gate.prom"}


def test_prom_is_readable_by_another_user(cli: Any, tmp_path: Path) -> None:
    results = results_named(tmp_path, "node2")
    old = os.umask(0o022)
    try:
        run = cli("gate", results, "--prom", tmp_path / "gate.prom")
    finally:
        os.umask(old)
    assert run.code == exitcodes.REJECTED
    assert (tmp_path / "gate.prom").stat().st_mode & 0o777 == 0o644

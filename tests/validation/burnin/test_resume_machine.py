"""`--resume` continues a run only on the machine that began it: the run record carries the
machine's identity (machine id or DMI product UUID, host name), and another machine's file, or one
without an identity, is refused with both named."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import validation.burnin.runner as runner
from fleet.results import read_results
from tests.validation.burnin.helpers import run_options
from validation.burnin.probes.host import machine_identity
from validation.burnin.runner import RunError, run_burnin

A = {"machine_id": "0123456789abcdef0123456789abcdef", "hostname": "node-a"}


def on(monkeypatch: pytest.MonkeyPatch, identity: dict[str, str]) -> None:
    monkeypatch.setattr(runner, "_machine_identity", lambda: dict(identity))


@pytest.mark.parametrize(
    "other",
    [
        {**A, "machine_id": "fedcba9876543210fedcba9876543210"},  # another machine, same host name
        {**A, "hostname": "node-b"},  # same id (a cloned image, or a container): another host
        {"product_uuid": "4c4c4544-0000-1111-2222-333344445555", "hostname": "node-a"},
    ],
    ids=["machine-id", "hostname", "id-unreadable"],
)
def test_resume_on_another_machine_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: dict[str, str]
) -> None:
    on(monkeypatch, A)
    first = run_burnin(
        run_options(tmp_path, only=["ok", "flaky"], options={"flaky": {"marker": str(tmp_path / "m")}})
    )
    assert read_results(first.path).runs[0].machine == A  # type: ignore[attr-defined]
    before = first.path.read_bytes()
    on(monkeypatch, other)
    with pytest.raises(RunError, match="only on the machine that began it") as exc:
        run_burnin(run_options(tmp_path, resume=True))
    assert "node-a" in str(exc.value) and all(v in str(exc.value) for v in other.values())
    assert first.path.read_bytes() == before
    # On the machine that began it, the run continues.
    on(monkeypatch, A)
    again = run_burnin(run_options(tmp_path, resume=True, options={"flaky": {"marker": str(tmp_path / "m")}}))
    assert again.run_id == first.run_id and again.kept == ["ok"] and again.verdict == "ok"


def test_resume_of_a_run_without_a_machine_identity_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on(monkeypatch, A)
    first = run_burnin(run_options(tmp_path, only=["ok"]))
    lines = first.path.read_text().splitlines()
    first.path.write_text("\n".join([lines[0].replace('"machine":', '"was_machine":'), *lines[1:]]) + "\n")
    with pytest.raises(RunError, match="no machine identity"):
        run_burnin(run_options(tmp_path, resume=True))


def test_machine_identity_reads_the_machine_id_then_the_dmi_uuid(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    dmi = tmp_path / "sys/class/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "product_uuid").write_text("4C4C4544-0000-1111-2222-333344445555\n")
    host = socket.gethostname()
    assert machine_identity(tmp_path) == {
        "product_uuid": "4c4c4544-0000-1111-2222-333344445555",
        "hostname": host,
    }
    (tmp_path / "etc/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    assert machine_identity(tmp_path) == {"machine_id": "0123456789abcdef0123456789abcdef", "hostname": host}
    assert machine_identity(tmp_path / "none") == {"hostname": host}  # nothing readable: not guessed

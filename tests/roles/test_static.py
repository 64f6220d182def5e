"""Roles and playbooks without hosts: lint (production profile), syntax, contracts, READMEs."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, ROOT
from tests.roles import role_readme

ROLES = ROOT / "roles"
# The roles issue 6 delivers; burnin (the gate's role) is checked by lint like every role.
OWN_ROLES = (
    "gpu_facts",
    "nvidia_driver",
    "cuda_toolkit",
    "nvidia_fabricmanager",
    "nvidia_container_toolkit",
    "doca_ofed",
    "nccl",
    "dcgm",
    "lustre_client",
    "beegfs_client",
    "nvmeof_initiator",
    "node_tuning",
)
GPU_ONLY = (
    "nvidia_driver",
    "cuda_toolkit",
    "nvidia_fabricmanager",
    "nvidia_container_toolkit",
    "nccl",
    "dcgm",
)


def _env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": f"{BIN}:{os.environ['PATH']}"}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _tasks(role: str) -> list[dict[str, Any]]:
    """Every task and handler of a role, blocks flattened."""
    found: list[dict[str, Any]] = []

    def walk(items: list[dict[str, Any]] | None) -> None:
        for item in items or []:
            found.append(item)
            for key in ("block", "rescue", "always"):
                walk(item.get(key))

    for sub in ("tasks", "handlers"):
        for f in sorted((ROLES / role / sub).glob("*.yml")):
            walk(_yaml(f))
    return found


def test_ansible_lint_production_profile_passes() -> None:
    done = subprocess.run(
        [
            str(BIN / "ansible-lint"),
            "--offline",
            "--profile",
            "production",
            "--nocolor",
            "roles/",
            "playbooks/",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in done.stderr + done.stdout


def test_site_playbook_syntax() -> None:
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", "playbooks/site.yml"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_site_applies_roles_by_group() -> None:
    plays = {p["hosts"]: [r["role"] for r in p["roles"]] for p in _yaml(ROOT / "playbooks/site.yml")}
    assert plays["all"] == ["gpu_facts", "node_tuning"]
    assert plays["ib_nodes"] == ["doca_ofed"]
    assert set(plays["gpu_nodes"]) == set(GPU_ONLY)
    assert plays["lustre_clients"] == ["lustre_client"]
    assert plays["beegfs_clients"] == ["beegfs_client"]
    assert plays["nvmeof_clients"] == ["nvmeof_initiator"]
    # A restart a change notified must not wait on the rest of the play succeeding.
    assert all(p.get("force_handlers") is True for p in _yaml(ROOT / "playbooks/site.yml"))


@pytest.mark.parametrize("role", OWN_ROLES)
def test_role_contract(role: str) -> None:
    base = ROLES / role
    spec = _yaml(base / "meta/argument_specs.yml")["argument_specs"]["main"]
    defaults = _yaml(base / "defaults/main.yml") or {}
    meta = _yaml(base / "meta/main.yml")
    options = spec["options"]
    # Role-prefixed variables, each documented in defaults/ and in the contract with the same default.
    assert all(name.startswith(f"{role}_") for name in options), sorted(options)
    assert set(defaults) == {n for n, o in options.items() if "default" in o}
    for name, value in defaults.items():
        assert options[name]["default"] == value, name
        assert options[name]["description"], name
    platforms = {p["name"]: p["versions"] for p in meta["galaxy_info"]["platforms"]}
    assert platforms == {"Ubuntu": ["jammy", "noble"], "EL": ["9"], "Debian": ["bookworm"]}
    tasks = _tasks(role)
    assert tasks
    for task in tasks:
        assert "ignore_errors" not in task, task.get("name")
        modules = [k for k in task if "." in k]
        for module in modules:  # fully qualified collection names
            assert module.count(".") >= 2, (role, task.get("name"), module)
        if "ansible.builtin.assert" in task:
            that = task["ansible.builtin.assert"]["that"]
            that = that if isinstance(that, list) else [that]
            assert all(str(t).strip().lower() not in {"true", "1", "yes"} for t in that), task["name"]
    # Every role that installs packages does so per OS family (Debian/Ubuntu apt, RHEL dnf).
    text = "\n".join(f.read_text() for f in (base / "tasks").glob("*.yml"))
    if "ansible.builtin.apt:" in text:
        assert "ansible.builtin.dnf:" in text and "ansible_os_family" in text, role
    else:
        assert role == "gpu_facts", f"{role} installs nothing?"  # reads /sys only: no OS split needed


@pytest.mark.parametrize("role", GPU_ONLY)
def test_gpu_roles_are_guarded_by_gpu_facts_and_say_why_they_skip(role: str) -> None:
    deps = [d["role"] for d in _yaml(ROLES / role / "meta/main.yml")["dependencies"]]
    assert deps == ["gpu_facts"] if role == "nvidia_driver" else deps == ["nvidia_driver"]
    main = _yaml(ROLES / role / "tasks/main.yml")
    skips = [t for t in main if "ansible.builtin.debug" in t and "gpu_facts_reason" in str(t)]
    assert skips, f"{role}: no visible skip reason from gpu_facts"
    guarded = [t for t in main if "block" in t]
    assert guarded and all("gpu_facts_nvidia_present" in str(t["when"]) for t in guarded)


def test_gpu_facts_and_its_fail_closed_checks_run_whatever_tags_select() -> None:
    """A run of one GPU role (--tags dcgm) guards on these facts and must not pass a node whose
    GPU count falls short of the fleet's: every task of the facts concern runs under any tag."""
    tasks = [(t, tags) for listed in _task_files(ROLES / "gpu_facts").values() for t, tags in listed]
    narrow = [t.get("name") for t, tags in tasks if "gpu_facts:facts" in tags and "always" not in tags]
    assert narrow == []
    assert any(t.get("name") == "Check the GPU count the fleet expects" for t, _ in tasks)


def test_a_fact_another_role_reads_is_set_whatever_tags_select() -> None:
    """`--tags lustre_client` runs only the always-tagged tasks of the roles before it: a fact that
    another role reads must be set by one of those, or that role sees its default instead (the
    Lustre role's guard against prebuilt modules beside DOCA passed on doca_ofed_use_doca unset)."""
    setters: list[tuple[str, str, str, frozenset[str]]] = []
    for role in OWN_ROLES:
        for listed in _task_files(ROLES / role).values():
            for task, tags in listed:
                facts = task.get("ansible.builtin.set_fact")
                if isinstance(facts, dict):
                    setters += [(fact, role, task.get("name", ""), tags) for fact in facts]
    texts = {
        role: "\n".join(
            f.read_text()
            for sub in ("tasks", "handlers", "templates")
            for f in sorted((ROLES / role / sub).glob("*"))
        )
        for role in OWN_ROLES
    }
    read_elsewhere = [
        (fact, role, name, tags)
        for fact, role, name, tags in setters
        if any(re.search(rf"\b{re.escape(fact)}\b", text) for other, text in texts.items() if other != role)
    ]
    assert any(fact == "doca_ofed_use_doca" for fact, *_ in read_elsewhere)  # the case above is seen
    narrow = [
        f"{role}: {name!r} sets {fact}" for fact, role, name, tags in read_elsewhere if "always" not in tags
    ]
    assert narrow == []


def test_every_role_readme_matches_its_argument_specs() -> None:
    assert role_readme.main(["--check"]) == 0
    for role in OWN_ROLES:
        readme = (ROLES / role / "README.md").read_text()
        for name in _yaml(ROLES / role / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]:
            assert f"`{name}`" in readme, (role, name)


def test_requirements_name_the_collections_the_roles_use() -> None:
    used = set()
    for role in OWN_ROLES:
        for task in _tasks(role):
            used |= {".".join(k.split(".")[:2]) for k in task if k.count(".") >= 2}
    declared = {c["name"] for c in _yaml(ROOT / "playbooks/requirements.yml")["collections"]}
    assert used - {"ansible.builtin"} <= declared


# ------------------------------------------------------------------ house rules for every role
# Each rule is a function over a roles folder that returns its violations, so a probe can show on a
# throwaway role that the rule catches what it is meant to catch.

OS_FACT = re.compile(r"ansible_(os_family|distribution\w*)|ansible_facts\[['\"](os_family|distribution\w*)")
# Where an OS fact may appear in a task: choosing which tasks or vars file run, and messages.
OS_FACT_KEYS = {
    "name",
    "when",
    "tags",
    "ansible.builtin.assert",
    "ansible.builtin.debug",
    "ansible.builtin.fail",
    "ansible.builtin.include_tasks",
    "ansible.builtin.import_tasks",
}
# Platforms the roles support (meta/main.yml): distribution, version, OS family.
PLATFORMS = (
    ("Ubuntu", "22.04", "Debian"),
    ("Ubuntu", "24.04", "Debian"),
    ("Debian", "12", "Debian"),
    ("RedHat", "9.4", "RedHat"),
    ("Rocky", "9.4", "RedHat"),
    ("AlmaLinux", "9.4", "RedHat"),
)
FIRST_FOUND_ORDER = (
    "{{ ansible_distribution }}-{{ ansible_distribution_version }}.yml",
    "{{ ansible_distribution }}-{{ ansible_distribution_major_version }}.yml",
    "{{ ansible_distribution }}.yml",
    "{{ ansible_os_family }}.yml",
    "main.yml",
)


def _role_dirs(roles: Path) -> list[Path]:
    return sorted(p for p in roles.iterdir() if (p / "tasks" / "main.yml").exists())


def _task_files(role: Path, sub: str = "tasks") -> dict[str, list[tuple[dict[str, Any], frozenset[str]]]]:
    return {
        f.name: role_readme.walk_tasks(yaml.safe_load(f.read_text()))
        for f in sorted((role / sub).glob("*.yml"))
    }


def _words(value: Any) -> str:
    return yaml.safe_dump(value, width=10_000)


def os_fact_violations(roles: Path) -> list[str]:
    """OS facts used as values in tasks, handlers or defaults: per-OS values belong in vars/<os>.yml."""
    found = []
    for role in _role_dirs(roles):
        for sub in ("tasks", "handlers"):
            for fname, tasks in _task_files(role, sub).items():
                for task, _ in tasks:
                    if role_readme.module_of(task) == "ansible.builtin.include_vars":
                        continue  # the first_found lookup names the OS
                    for key, value in task.items():
                        if key in OS_FACT_KEYS or key in ("block", "rescue", "always"):
                            continue
                        hit = OS_FACT.search(_words(value))
                        if hit:
                            found.append(
                                f"{role.name}/{sub}/{fname}: '{task.get('name')}' {key} reads {hit.group(0)}"
                            )
        defaults = role / "defaults" / "main.yml"
        for name, value in (
            (yaml.safe_load(defaults.read_text()) or {}) if defaults.exists() else {}
        ).items():
            hit = OS_FACT.search(_words(value))
            if hit:
                found.append(f"{role.name}/defaults/main.yml: {name} reads {hit.group(0)}")
    return found


def _vars_loader(role: Path) -> dict[str, Any] | None:
    for task, _ in _task_files(role)["main.yml"]:
        if role_readme.module_of(task) == "ansible.builtin.include_vars":
            return task
    return None


def _resolve(role: Path, files: list[str], distribution: str, version: str, family: str) -> Path | None:
    facts = {
        "ansible_distribution": distribution,
        "ansible_distribution_version": version,
        "ansible_distribution_major_version": version.split(".")[0],
        "ansible_os_family": family,
    }
    for pattern in files:
        name = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: facts[m.group(1)], pattern)
        if (role / "vars" / name).exists():
            return role / "vars" / name
    return None


def os_vars_violations(roles: Path) -> list[str]:
    """Internal per-OS values: `__<role>_*` names in vars/<os>.yml, loaded by first_found for every platform."""
    found = []
    for role in _role_dirs(roles):
        prefix = f"__{role.name}_"
        text = "\n".join(
            f.read_text()
            for sub in ("tasks", "handlers", "templates")
            for f in sorted((role / sub).glob("*"))
        )
        task_vars = {
            n for tasks in _task_files(role).values() for task, _ in tasks for n in task.get("vars") or {}
        }
        used = set(re.findall(rf"\b{prefix}\w+", text)) - task_vars
        vars_files = sorted((role / "vars").glob("*.yml"))
        if not vars_files and not used:
            continue
        loader = _vars_loader(role)
        if loader is None:
            found.append(f"{role.name}: vars/ not loaded by include_vars in tasks/main.yml")
            continue
        source = _words(loader)
        lookup = next((v for v in (loader.get("vars") or {}).values() if isinstance(v, dict)), {})
        files = list(lookup.get("files") or [])
        if "first_found" not in source or files != list(FIRST_FOUND_ORDER):
            found.append(
                f"{role.name}: include_vars must use first_found over {list(FIRST_FOUND_ORDER)}, got {files}"
            )
            continue
        for f in vars_files:
            values = yaml.safe_load(f.read_text()) or {}
            # A helper the file's other values are built from counts as used by them.
            helpers = {
                n
                for other, v in values.items()
                for n in re.findall(rf"\b{prefix}\w+", _words(v))
                if n != other
            }
            for name in sorted(values):
                if not name.startswith(prefix):
                    found.append(f"{role.name}/vars/{f.name}: {name} is not named {prefix}*")
                elif name not in used | helpers:
                    found.append(f"{role.name}/vars/{f.name}: {name} is never used")
        for distribution, version, family in PLATFORMS:
            chosen = _resolve(role, files, distribution, version, family)
            if chosen is None:
                found.append(f"{role.name}: no vars file for {distribution} {version}")
                continue
            missing = used - set(yaml.safe_load(chosen.read_text()) or {})
            if missing:
                found.append(
                    f"{role.name}/vars/{chosen.name} ({distribution} {version}) lacks {sorted(missing)}"
                )
    return found


def _concerns(role: str, tags: frozenset[str]) -> set[str]:
    return {t for t in tags if t.startswith(f"{role}:")}


def _included(role: Path, target: str) -> list[Path]:
    """Task files an include may name: OS facts in the name stand for each supported platform."""
    names = set()
    for distribution, _, family in PLATFORMS:
        name = re.sub(r"\{\{\s*ansible_(facts\[['\"]os_family['\"]\]|os_family)\s*\}\}", family, target)
        name = re.sub(
            r"\{\{\s*ansible_(facts\[['\"]distribution['\"]\]|distribution)\s*\}\}", distribution, name
        )
        names |= {p.name for p in (role / "tasks").glob(re.sub(r"\{\{.*?\}\}", "*", name))}
    return [role / "tasks" / n for n in sorted(names)]


def tag_violations(roles: Path) -> list[str]:
    """Every task tagged `<role>` and `<role>:<concern>`; a concern run alone reaches its tasks and their inputs."""
    found = []
    for role in _role_dirs(roles):
        files = _task_files(role)
        allowed = {role.name, "always"} | {f"{role.name}:{c}" for c in role_readme.CONCERNS}

        concerns = functools.partial(_concerns, role.name)

        produced: dict[str, list[tuple[str, frozenset[str]]]] = {}
        for fname, tasks in files.items():
            for task, tags in tasks:
                where = f"{role.name}/tasks/{fname}: '{task.get('name')}'"
                if role.name not in tags:
                    found.append(f"{where} lacks the tag {role.name}")
                if set(tags) - allowed:
                    found.append(f"{where} has tags outside the scheme: {sorted(set(tags) - allowed)}")
                module = role_readme.module_of(task)
                if module == "ansible.builtin.import_tasks":
                    # Every imported task inherits the import's tags: a concern there runs them all.
                    if set(tags) - {role.name}:
                        found.append(f"{where} imports with tags {sorted(set(tags) - {role.name})}")
                elif "block" not in task and not concerns(tags) and "always" not in tags:
                    found.append(f"{where} has no {role.name}:<concern> tag")
                if module == "ansible.builtin.include_tasks":
                    arg = task[module]
                    target = arg if isinstance(arg, str) else arg.get("file", "")
                    for included in _included(role, target):
                        need = set().union(*(concerns(t) for _, t in files[included.name]))
                        if need - concerns(tags):
                            found.append(
                                f"{where} does not carry {sorted(need - concerns(tags))} of {included.name}"
                            )
                names = [task["register"]] if "register" in task else []
                if module == "ansible.builtin.set_fact":
                    names += [n for n in task[module] if n != "cacheable"]
                for name in names:
                    produced.setdefault(name, []).append((where, tags))
        for fname, tasks in files.items():
            for task, tags in tasks:
                if "block" in task:
                    continue
                text = _words({k: v for k, v in task.items() if k != "register"})
                for name, producers in produced.items():
                    if not re.search(rf"\b{name}\b", text):
                        continue
                    uses = len(re.findall(rf"\b{name}\b", text))
                    guards = len(
                        re.findall(rf"\b{name}\s*\|\s*default\b|\b{name}\s+is\s+(?:not\s+)?defined", text)
                    )
                    guarded = guards == uses
                    for where, ptags in producers:
                        if where.endswith(f"'{task.get('name')}'") or "always" in ptags:
                            continue
                        gap = sorted(concerns(tags) - concerns(ptags)) + (
                            ["always"] if "always" in tags else []
                        )
                        if gap and not guarded:
                            found.append(
                                f"{role.name}/tasks/{fname}: '{task.get('name')}' reads {name} from {where}, "
                                f"which {gap} skips"
                            )
    return found


def cross_role_register_violations(roles: Path) -> list[str]:
    """A role reads another role's results only through facts that role sets, never its registered variables."""
    registered: dict[str, str] = {}
    for role in _role_dirs(roles):
        for sub in ("tasks", "handlers"):
            for tasks in _task_files(role, sub).values():
                for task, _ in tasks:
                    if "register" in task:
                        registered[task["register"]] = role.name
    found = []
    for role in _role_dirs(roles):
        for sub in ("tasks", "handlers", "templates", "defaults", "vars"):
            for f in sorted((role / sub).glob("*")):
                text = f.read_text()
                for name, owner in registered.items():
                    if owner != role.name and re.search(rf"\b{name}\b", text):
                        found.append(f"{role.name}/{sub}/{f.name} reads {name}, registered by {owner}")
    return found


def foreign_fact_violations(roles: Path) -> list[str]:
    """What a role reads of another role is that role's option or a fact it sets (listed in its README)."""
    dirs = _role_dirs(roles)
    owners = sorted((r.name for r in dirs), key=len, reverse=True)
    options = {
        r.name: set(_yaml(r / "meta/argument_specs.yml")["argument_specs"]["main"]["options"])
        if (r / "meta/argument_specs.yml").exists()
        else set()
        for r in dirs
    }
    facts = {r.name: role_readme.set_facts(r) for r in dirs}
    found = []
    for role in dirs:
        text = "\n".join(
            f.read_text()
            for sub in ("tasks", "handlers", "templates")
            for f in sorted((role / sub).glob("*"))
        )
        for name in sorted(set(re.findall(r"(?<![\w.])[a-z][a-z0-9_]*", text))):
            owner = next((o for o in owners if name.startswith(f"{o}_")), None)
            if owner is None or owner == role.name or name in options[owner]:
                continue
            if name not in facts[owner]:
                found.append(f"{role.name} reads {name}: neither an option nor a fact of {owner}")
    return found


def refresh_violations(roles: Path) -> list[str]:
    """An apt refresh keyed on its repository's change runs wherever adding the repository does: a
    concern run alone would otherwise add a repository and install from package lists without it."""
    found = []
    for role in _role_dirs(roles):
        tasks = [(task, tags) for listed in _task_files(role).values() for task, tags in listed]
        registered = {
            task["register"]: (task.get("name"), tags) for task, tags in tasks if "register" in task
        }
        for task, tags in tasks:
            args = task.get("ansible.builtin.apt")
            if not (isinstance(args, dict) and args.get("update_cache") is True and "name" not in args):
                continue
            for name in re.findall(r"\b(\w+) is changed", str(task.get("when", ""))):
                if name not in registered:
                    continue
                producer, ptags = registered[name]
                gap = _concerns(role.name, ptags) - _concerns(role.name, tags)
                if gap:
                    found.append(
                        f"{role.name}: '{task.get('name')}' skips {sorted(gap)}, which runs '{producer}'"
                    )
    return found


def _units(task: dict[str, Any]) -> str:
    """The unit names a systemd_service task acts on, as text: its name, and its loop where it loops."""
    return _words([task["ansible.builtin.systemd_service"].get("name"), task.get("loop")])


def _conjuncts(when: Any) -> set[str]:
    """A condition's parts joined by a top-level `and` (a list of conditions is one conjunction)."""
    text = " and ".join(map(str, when)) if isinstance(when, list) else str(when or "")
    text = " ".join(text.replace("| default({})", "").split())
    parts, depth, start = set(), 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and text.startswith(" and ", i):
            parts.add(text[start:i])
            start = i + len(" and ")
    return (parts | {text[start:]}) - {""}


def start_guard_violations(roles: Path) -> list[str]:
    """A unit is started or restarted only where it is enabled: in check mode on a new host the
    package that ships it is not installed, and systemd_service fails on a unit it cannot find
    even in check mode, so a start needs its enable task's guard."""
    found = []
    for role in _role_dirs(roles):
        tasks = [
            (task, sub)
            for sub in ("tasks", "handlers")
            if (role / sub).is_dir()
            for listed in _task_files(role, sub).values()
            for task, _ in listed
            if isinstance(task.get("ansible.builtin.systemd_service"), dict)
        ]
        enables = [t for t, _ in tasks if "enabled" in t["ansible.builtin.systemd_service"]]
        for task, sub in tasks:
            if "state" not in task["ansible.builtin.systemd_service"]:
                continue
            units = _units(task)
            for enable in enables:
                shared = any(u in units for u in re.findall(r"[\w@-]+\.service", _units(enable)))
                missing = _conjuncts(enable.get("when")) - _conjuncts(task.get("when"))
                if shared and missing:
                    found.append(f"{role.name}/{sub}: '{task.get('name')}' lacks {sorted(missing)}")
    return found


RULES = (
    os_fact_violations,
    os_vars_violations,
    tag_violations,
    cross_role_register_violations,
    foreign_fact_violations,
    refresh_violations,
    start_guard_violations,
)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_every_role_keeps_the_house_rules(rule: Callable[[Path], list[str]]) -> None:
    assert rule(ROLES) == []


def _probe_roles(tmp_path: Path) -> Path:
    """Two tiny roles that break every rule once."""

    def write(path: str, data: Any) -> None:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(data, sort_keys=False))

    write("alpha/defaults/main.yml", {"alpha_pkg": "{{ 'a' if ansible_os_family == 'Debian' else 'b' }}"})
    write(
        "alpha/meta/argument_specs.yml",
        {"argument_specs": {"main": {"options": {"alpha_pkg": {"type": "str", "description": "x"}}}}},
    )
    write(
        "alpha/tasks/main.yml",
        [
            {
                "name": "Install",
                "ansible.builtin.package": {"name": "{{ ansible_distribution | lower }}"},
                "register": "alpha_install",
                "tags": ["alpha", "alpha:packages"],
            },
            {
                "name": "Sideways",
                "ansible.builtin.include_tasks": "other.yml",
                "tags": ["alpha", "alpha:config"],
            },
            {"name": "Untagged", "ansible.builtin.debug": {"msg": "{{ __alpha_thing }}"}},
            {
                "name": "Always",
                "ansible.builtin.debug": {"msg": "{{ alpha_install.rc }} {{ alpha_install | default({}) }}"},
                "tags": ["alpha", "alpha:packages", "always"],
            },
            {
                "name": "Guarded",
                "ansible.builtin.debug": {"msg": "{{ alpha_install | default({}) }}"},
                "tags": ["alpha", "alpha:packages", "always"],
            },
            {
                "name": "Scratch",
                "ansible.builtin.set_fact": {"alpha_secret": 1},
                "tags": ["alpha", "alpha:config"],
            },
            {
                "name": "Leaky",
                "ansible.builtin.import_tasks": "other.yml",
                "tags": ["alpha", "alpha:service"],
            },
            {
                "name": "Add the repository",
                "ansible.builtin.deb822_repository": {"name": "alpha"},
                "register": "alpha_repo",
                "tags": ["alpha", "alpha:packages", "alpha:repo"],
            },
            {
                "name": "Refresh",
                "ansible.builtin.apt": {"update_cache": True},
                "when": "alpha_repo is changed",
                "tags": ["alpha", "alpha:repo"],
            },
            {
                "name": "Enable",
                "ansible.builtin.systemd_service": {"name": "alpha.service", "enabled": True},
                "when": "not ansible_check_mode",
                "tags": ["alpha", "alpha:service"],
            },
            {
                "name": "Start",
                "ansible.builtin.systemd_service": {"name": "alpha.service", "state": "started"},
                "tags": ["alpha", "alpha:service"],
            },
        ],
    )
    write(
        "alpha/tasks/other.yml",
        [
            {
                "name": "Reads install",
                "ansible.builtin.debug": {"msg": "{{ alpha_install }}"},
                "tags": ["alpha", "alpha:service", "beta"],
            }
        ],
    )
    write("alpha/vars/Debian.yml", {"__alpha_thing": "x", "alpha_unprefixed": "y"})
    write(
        "beta/tasks/main.yml",
        [
            {
                "name": "Peek",
                "ansible.builtin.debug": {
                    "msg": "{{ alpha_install is changed }} {{ alpha_secret }} {{ alpha_other }}"
                },
                "tags": ["beta", "beta:config"],
            }
        ],
    )
    return tmp_path


def test_the_house_rules_catch_a_role_that_breaks_them(tmp_path: Path) -> None:
    roles = _probe_roles(tmp_path)
    assert os_fact_violations(roles) == [
        "alpha/tasks/main.yml: 'Install' ansible.builtin.package reads ansible_distribution",
        "alpha/defaults/main.yml: alpha_pkg reads ansible_os_family",
    ]
    assert os_vars_violations(roles) == ["alpha: vars/ not loaded by include_vars in tasks/main.yml"]
    assert tag_violations(roles) == [
        "alpha/tasks/main.yml: 'Sideways' does not carry ['alpha:service'] of other.yml",
        "alpha/tasks/main.yml: 'Untagged' lacks the tag alpha",
        "alpha/tasks/main.yml: 'Untagged' has no alpha:<concern> tag",
        "alpha/tasks/main.yml: 'Leaky' imports with tags ['alpha:service']",
        "alpha/tasks/other.yml: 'Reads install' has tags outside the scheme: ['beta']",
        "alpha/tasks/main.yml: 'Always' reads alpha_install from alpha/tasks/main.yml: 'Install', "
        "which ['always'] skips",
        "alpha/tasks/other.yml: 'Reads install' reads alpha_install from alpha/tasks/main.yml: 'Install', "
        "which ['alpha:service'] skips",
    ]
    assert cross_role_register_violations(roles) == [
        "beta/tasks/main.yml reads alpha_install, registered by alpha"
    ]
    assert foreign_fact_violations(roles) == [
        "beta reads alpha_install: neither an option nor a fact of alpha",
        "beta reads alpha_other: neither an option nor a fact of alpha",
    ]
    assert start_guard_violations(roles) == ["alpha/tasks: 'Start' lacks ['not ansible_check_mode']"]
    assert refresh_violations(roles) == [
        "alpha: 'Refresh' skips ['alpha:packages'], which runs 'Add the repository'"
    ]


def test_vars_files_must_cover_every_platform_and_be_internal(tmp_path: Path) -> None:
    roles = _probe_roles(tmp_path)
    loader = {
        "name": "Load the OS-specific values",
        "ansible.builtin.include_vars": {
            "file": "{{ lookup('ansible.builtin.first_found', __alpha_os_vars) }}"
        },
        "vars": {"__alpha_os_vars": {"files": list(FIRST_FOUND_ORDER), "paths": ["{{ role_path }}/vars"]}},
        "tags": ["alpha", "alpha:packages"],
    }
    tasks = yaml.safe_load((roles / "alpha/tasks/main.yml").read_text())
    (roles / "alpha/tasks/main.yml").write_text(yaml.safe_dump([loader, *tasks], sort_keys=False))
    assert os_vars_violations(roles) == [
        "alpha/vars/Debian.yml: alpha_unprefixed is not named __alpha_*",
        "alpha: no vars file for RedHat 9.4",
        "alpha: no vars file for Rocky 9.4",
        "alpha: no vars file for AlmaLinux 9.4",
    ]
    (roles / "alpha/vars/RedHat.yml").write_text("---\n__alpha_other: 1\n")
    assert "alpha/vars/RedHat.yml (RedHat 9.4) lacks ['__alpha_thing']" in os_vars_violations(roles)
    assert "alpha/vars/RedHat.yml: __alpha_other is never used" in os_vars_violations(roles)
    loader["vars"]["__alpha_os_vars"]["files"] = ["{{ ansible_os_family }}.yml"]
    (roles / "alpha/tasks/main.yml").write_text(yaml.safe_dump([loader, *tasks], sort_keys=False))
    assert os_vars_violations(roles)[0].startswith("alpha: include_vars must use first_found over")

"""Write (or check) each role's README.md from its meta/argument_specs.yml, meta/main.yml and tasks.

    .venv/bin/python -m tests.roles.role_readme          # rewrite roles/*/README.md
    .venv/bin/python -m tests.roles.role_readme --check  # exit 1 if any README is stale

The argument spec is the role's contract; the README is generated from it so the two cannot drift.
The tags, the OS-specific values (vars/) and the facts other roles read are generated from the
role's files for the same reason.
An optional roles/<role>/docs/vendor.md is appended as it is under "## Vendor repository" (the
vendor's repository, packages and pins per OS, architecture and branch, with the source of each
fact), then an optional roles/<role>/docs/notes.md (design notes, what the tests cover).
A README written by hand (without the generated footer) is never overwritten; --check then only
requires it to name every variable of the spec.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
PLATFORM_NAMES = {"EL": "RHEL 9 family (RHEL, Rocky, Alma)", "Ubuntu": "Ubuntu", "Debian": "Debian"}
RELEASES = {"jammy": "22.04", "noble": "24.04", "bookworm": "12", "9": "9"}
# The one vocabulary of concerns: every task carries `<role>` and `<role>:<concern>` tags.
CONCERNS = {
    "facts": "read the host and set the facts other tasks and roles use",
    "repo": "package repositories and their signing keys",
    "packages": "pinned packages (installed, held)",
    "config": "configuration files and the commands that write them",
    "kernel": "kernel modules, kernel arguments and reboots",
    "service": "systemd units enabled at boot and started",
    "install": "install the software into its own environment",
    "run": "run the measurement",
    "collectives": "measure across nodes",
    "fetch": "bring results back to the controller",
    "verify": "read-only checks that the result works",
}
MODULE_KEY = re.compile(r"^[a-z0-9_]+\.[a-z0-9_]+\.[a-z0-9_]+$")


def walk_tasks(
    items: list[dict[str, Any]] | None, inherited: frozenset[str] = frozenset()
) -> list[tuple[dict[str, Any], frozenset[str]]]:
    """Every task of a task list, blocks flattened, with the tags it inherits from its blocks."""
    found: list[tuple[dict[str, Any], frozenset[str]]] = []
    for item in items or []:
        tags = item.get("tags") or []
        tags = frozenset([tags] if isinstance(tags, str) else tags) | inherited
        found.append((item, tags))
        for key in ("block", "rescue", "always"):
            found += walk_tasks(item.get(key), tags)
    return found


def task_files(role: Path) -> dict[str, list[tuple[dict[str, Any], frozenset[str]]]]:
    return {f.name: walk_tasks(yaml.safe_load(f.read_text())) for f in sorted((role / "tasks").glob("*.yml"))}


def module_of(task: dict[str, Any]) -> str | None:
    return next((k for k in task if MODULE_KEY.match(k)), None)


def set_facts(role: Path) -> dict[str, str]:
    """Fact name -> the name of the set_fact task that sets it."""
    out: dict[str, str] = {}
    for tasks in task_files(role).values():
        for task, _ in tasks:
            if module_of(task) == "ansible.builtin.set_fact":
                for name in task["ansible.builtin.set_fact"]:
                    if name != "cacheable":
                        out.setdefault(name, task["name"])
    return out


def _role_text(role: Path) -> str:
    return "\n".join(
        f.read_text() for sub in ("tasks", "handlers", "templates") for f in sorted((role / sub).glob("*"))
    )


def facts_for_other_roles(role: Path) -> dict[str, tuple[str, list[str]]]:
    """Facts this role sets that other roles read: name -> (what sets it, readers)."""
    out: dict[str, tuple[str, list[str]]] = {}
    others = {r.name: _role_text(r) for r in roles() if r != role}
    for name, task in set_facts(role).items():
        readers = [r for r, text in others.items() if re.search(rf"\b{re.escape(name)}\b", text)]
        if readers:
            out[name] = (task, readers)
    return out


def roles() -> list[Path]:
    return sorted(p for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").exists())


def load(role: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]
    meta = yaml.safe_load((role / "meta" / "main.yml").read_text())
    return spec, meta


def _cell(value: Any) -> str:
    if isinstance(value, str):
        text = value if value else '""'
    else:
        text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
        if text.endswith("\n..."):
            text = text[: -len("\n...")]
    return "`" + text.replace("|", "\\|").replace("\n", " ") + "`"


def _desc(value: Any) -> str:
    parts = value if isinstance(value, list) else [value]
    return " ".join(str(p).strip() for p in parts).replace("|", "\\|")


def render(role: Path) -> str:
    spec, meta = load(role)
    info = meta["galaxy_info"]
    lines = [f"# {role.name}", "", spec["short_description"], ""]
    for para in spec.get("description", []):
        lines += [para.strip(), ""]
    lines += ["## Supported systems", ""]
    for platform in info["platforms"]:
        versions = ", ".join(
            f"{RELEASES[str(v)]} ({v})" if RELEASES.get(str(v), str(v)) != str(v) else str(v)
            for v in platform["versions"]
        )
        lines.append(f"- {PLATFORM_NAMES.get(platform['name'], platform['name'])}: {versions}")
    lines.append("")
    deps = [d["role"] if isinstance(d, dict) else d for d in meta.get("dependencies") or []]
    if deps:
        lines += ["## Depends on", "", *[f"- `{d}` (runs first, once per host)" for d in deps], ""]
    lines += ["## Variables", "", "| variable | type | default | description |", "|---|---|---|---|"]
    for name, opt in spec["options"].items():
        kind = opt["type"] + (f" of {opt['elements']}" if "elements" in opt else "")
        choices = f" One of: {', '.join(map(str, opt['choices']))}." if "choices" in opt else ""
        default = "required" if opt.get("required") else _cell(opt.get("default"))
        lines.append(f"| `{name}` | {kind} | {default} | {_desc(opt['description'])}{choices} |")
        for sub, sopt in (opt.get("options") or {}).items():
            sdefault = (
                "required" if sopt.get("required") else (_cell(sopt["default"]) if "default" in sopt else "-")
            )
            schoices = f" One of: {', '.join(map(str, sopt['choices']))}." if "choices" in sopt else ""
            path = f"{name}[].{sub}" if opt["type"] == "list" else f"{name}.{sub}"
            lines.append(
                f"| `{path}` | {sopt['type']} | {sdefault} | {_desc(sopt['description'])}{schoices} |"
            )
    lines.append("")
    lines += _tags_section(role) + _os_values_section(role) + _facts_section(role)
    vendor = role / "docs" / "vendor.md"
    if vendor.exists():
        lines += ["## Vendor repository", "", vendor.read_text().strip(), ""]
    notes = role / "docs" / "notes.md"
    if notes.exists():
        lines += [notes.read_text().strip(), ""]
    lines += [
        "---",
        "Generated from meta/argument_specs.yml by `python -m tests.roles.role_readme`; edit the spec, not this file.",
        "",
    ]
    return "\n".join(lines)


def _tags_section(role: Path) -> list[str]:
    counts: dict[str, int] = {}
    for tasks in task_files(role).values():
        for _, tags in tasks:
            for tag in tags:
                if tag.startswith(f"{role.name}:"):
                    counts[tag] = counts.get(tag, 0) + 1
    if not counts:
        return []
    lines = [
        "## Tags",
        "",
        f"`--tags {role.name}` runs the whole role; one concern runs alone with its tag. Tasks that every",
        "concern needs (platform checks, OS-specific values, facts) carry all of the role's tags.",
        "",
        "| tag | what it runs |",
        "|---|---|",
    ]
    for tag in sorted(
        counts,
        key=lambda t: list(CONCERNS).index(t.split(":", 1)[1]) if t.split(":", 1)[1] in CONCERNS else 99,
    ):
        lines.append(f"| `{tag}` | {CONCERNS.get(tag.split(':', 1)[1], '?')} ({counts[tag]} tasks) |")
    always = [task["name"] for tasks in task_files(role).values() for task, tags in tasks if "always" in tags]
    if always:
        lines += [
            "",
            "Tagged `always`, so they run whatever `--tags` selects (they only read, and what they set is",
            "read by tasks of every concern or by other roles): " + "; ".join(always) + ".",
        ]
    return [*lines, ""]


def _os_values_section(role: Path) -> list[str]:
    files = sorted((role / "vars").glob("*.yml"))
    if not files:
        return []
    names = sorted({n for f in files for n in (yaml.safe_load(f.read_text()) or {})})
    return [
        "## OS-specific values",
        "",
        "Loaded first thing with `include_vars` and the `first_found` lookup: `<distribution>-<version>.yml`,",
        "`<distribution>-<major>.yml`, `<distribution>.yml`, `<os_family>.yml`, then `main.yml`, from vars/: "
        + ", ".join(f"`{f.name}`" for f in files)
        + ".",
        "Internal, not for inventories: " + ", ".join(f"`{n}`" for n in names) + ".",
        "",
    ]


def _facts_section(role: Path) -> list[str]:
    facts = facts_for_other_roles(role)
    if not facts:
        return []
    lines = ["## Facts for other roles", "", "| fact | set by the task | read by |", "|---|---|---|"]
    for name, (task, readers) in sorted(facts.items()):
        lines.append(f"| `{name}` | {task} | {', '.join(f'`{r}`' for r in readers)} |")
    return [*lines, ""]


FOOTER = "Generated from meta/argument_specs.yml by"


def main(argv: list[str]) -> int:
    stale = []
    for role in roles():
        text = render(role)
        readme = role / "README.md"
        current = readme.read_text() if readme.exists() else None
        if current is not None and FOOTER not in current:
            # Hand-written: it must still document every variable of the contract.
            names = load(role)[0]["options"]
            if any(f"`{name}`" not in current for name in names):
                stale.append(str(readme.relative_to(ROOT)))
        elif "--check" in argv:
            if current != text:
                stale.append(str(readme.relative_to(ROOT)))
        else:
            readme.write_text(text)
    if stale:
        print("stale READMEs (run python -m tests.roles.role_readme): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

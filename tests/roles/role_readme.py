"""Write (or check) each role's README.md from its meta/argument_specs.yml and meta/main.yml.

    .venv/bin/python -m tests.roles.role_readme          # rewrite roles/*/README.md
    .venv/bin/python -m tests.roles.role_readme --check  # exit 1 if any README is stale

The argument spec is the role's contract; the README is generated from it so the two cannot drift.
An optional roles/<role>/docs/notes.md is appended as it is (design notes, what the tests cover).
A README written by hand (without the generated footer) is never overwritten; --check then only
requires it to name every variable of the spec.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
PLATFORM_NAMES = {"EL": "RHEL 9 family (RHEL, Rocky, Alma)", "Ubuntu": "Ubuntu", "Debian": "Debian"}
RELEASES = {"jammy": "22.04", "noble": "24.04", "bookworm": "12", "9": "9"}


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
    notes = role / "docs" / "notes.md"
    if notes.exists():
        lines += [notes.read_text().strip(), ""]
    lines += [
        "---",
        "Generated from meta/argument_specs.yml by `python -m tests.roles.role_readme`; edit the spec, not this file.",
        "",
    ]
    return "\n".join(lines)


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

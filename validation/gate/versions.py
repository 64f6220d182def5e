"""Version homogeneity: every component a node reports must match the pin or the fleet majority.

Components are whatever the records carry (driver, cuda, vbios, firmware, ofed, nccl, kernel,
fleetforge, ...). A pinned component (spec `validation.pinned_versions`) must be reported and meet
the pin on every node (meets_pin: equal; a shorter release line such as a driver branch, 570 for
570.133.20; a package pin such as NCCL's 2.26.2-1+cuda12.8, the version the node reports with its
packaging revision and CUDA build, met by 2.26.2). An unpinned one is compared with the fleet's most common value. A tie for most
common is no majority: the gate cannot tell which side is right, and accepting both would land
the job on a mixed fleet, so every node reporting that component is rejected on it and the note
says to pin it. A component most nodes report is required of the rest; one that only a minority
reports is noted, not required. This is homogeneity, not statistics: it applies from 2 nodes up.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from validation.gate.model import GateSettings, NodeVerdict, Reason


def judge_versions(verdicts: Sequence[NodeVerdict], settings: GateSettings, notes: list[str]) -> None:
    judged = [v for v in verdicts if v.level is not None and not v.unlisted]
    components = sorted({c for v in judged for c in v.versions} | set(settings.pinned_versions))
    for component in components:
        pinned = settings.pinned_versions.get(component)
        if pinned is not None:
            _against_pin(judged, component, pinned)
        elif len(judged) >= 2:
            _against_majority(judged, component, notes)


def _conflicted(v: NodeVerdict, component: str) -> bool:
    # The node's own records disagree: already rejected for it, and its value is no vote.
    return bool(v.reasons) and any(r.rule == "version" and r.metric == component for r in v.reasons)


_RELEASE_LINE = re.compile(r"[0-9]+(\.[0-9]+)*")


def meets_pin(value: str | None, pinned: str) -> bool:
    """Whether a reported version meets its pin (the module docstring says how)."""
    if value is None:
        return False
    if value == pinned:
        return True
    version = re.split(r"[-+]", pinned, maxsplit=1)[0]
    if version != pinned:  # version-revision+build: nodes report the version alone
        return value == version
    return _RELEASE_LINE.fullmatch(pinned) is not None and value.startswith(pinned + ".")


def _against_pin(judged: Sequence[NodeVerdict], component: str, pinned: str) -> None:
    for v in judged:
        value = v.versions.get(component)
        if meets_pin(value, pinned) or _conflicted(v, component):
            continue
        shown = "not reported" if value is None else value
        v.reasons.append(
            Reason(
                "version",
                None,
                component,
                value,
                pinned,
                f"{component} {shown} is not the pinned {pinned} (spec validation.pinned_versions.{component})",
            )
        )


def _against_majority(judged: Sequence[NodeVerdict], component: str, notes: list[str]) -> None:
    voters = [v for v in judged if component in v.versions and not _conflicted(v, component)]
    counts = Counter(v.versions[component] for v in voters)
    if not counts:
        return
    ranked = counts.most_common()
    top_value, top_count = ranked[0]
    tied = [value for value, n in ranked if n == top_count]
    if len(tied) > 1:
        shown = ", ".join(f"{value} on {counts[value]}" for value in sorted(tied))
        notes.append(
            f"{component}: no majority ({shown} nodes); every node reporting it is rejected on it. "
            f"Pin validation.pinned_versions.{component} in the spec to say which is right"
        )
        for v in voters:
            v.reasons.append(
                Reason(
                    "version",
                    None,
                    component,
                    v.versions[component],
                    None,
                    f"{component} {v.versions[component]}: the fleet has no majority value ({shown} nodes)",
                )
            )
        return
    for v in voters:
        value = v.versions[component]
        if value != top_value:
            v.reasons.append(
                Reason(
                    "version",
                    None,
                    component,
                    value,
                    top_value,
                    f"{component} {value} differs from the fleet majority {top_value} "
                    f"({top_count} of {len(voters)} nodes)",
                )
            )
    reporters = sum(1 for v in judged if component in v.versions)
    silent = [v for v in judged if component not in v.versions]
    if not silent:
        return
    if reporters * 2 > len(judged):
        for v in silent:
            v.reasons.append(
                Reason(
                    "version",
                    None,
                    component,
                    None,
                    top_value,
                    f"{component} not reported; {reporters} of {len(judged)} nodes report it ({top_value} "
                    f"on {top_count})",
                )
            )
    else:
        notes.append(
            f"{component}: reported by only {reporters} of {len(judged)} nodes; not required of the others"
        )

"""fleetforge's CrossGuard policy pack: every rule of policy.rules, mandatory but the advisory ones.

    pulumi preview --policy-pack policy/      # or pulumi up --policy-pack policy/

The Pulumi policy host runs this folder in its own virtual environment (PulumiPolicy.yaml,
requirements.txt); constructing PolicyPack starts the analyzer server and blocks, which is why the
rules live in rules.py and tests call them directly.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError

if TYPE_CHECKING:  # an annotation only: the pack needs no more of pulumi_policy at run time
    from pulumi_policy import PolicyResource

try:
    from policy import rules  # a fleetforge environment (the project's venv, tests)
except ImportError:  # the pack's own venv: the host runs this folder, rules.py sits beside it
    # rules.py judges SSH sources with fleet/netpolicy.py (standard library only), so the checkout
    # above this folder goes on the path; the pack is run from a fleetforge checkout, never alone.
    sys.path.append(str(Path(__file__).resolve().parent.parent))
    import rules  # type: ignore[no-redef,import-not-found]


def _plain(value: Any) -> Any:
    """CrossGuard's props as plain dicts and lists, each value unknown at preview as rules.UNKNOWN.

    pulumi_policy's proxies raise UnknownValueError on reading an unknown value, which would end a
    rule at the first one (and pulumi_policy then reports the whole policy as "can't run"). Read
    once here, the rules see every known value and decide what an unknown one means."""
    if isinstance(value, Mapping):
        return {key: _plain(_read(value, key)) for key in value}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return [_plain(_read(value, index)) for index in range(len(value))]
    return value


def _read(container: Any, key: Any) -> Any:
    try:
        return container[key]
    except UnknownValueError:
        return rules.UNKNOWN


def _report(messages: Iterable[tuple[str | None, str]], report_violation: ReportViolation) -> None:
    """Report every decided violation; then, if some part could not be decided at preview, raise
    UnknownValueError so that pulumi_policy adds its advisory "can't run during preview" saying
    which (the decided violations stay reported, at the policy's own level)."""
    undecided: list[str] = []
    for urn, message in messages:
        if isinstance(message, rules.Undecided):
            undecided.append(message)
        else:
            report_violation(message, urn)
    if undecided:
        error = UnknownValueError(UNKNOWN_STRING_VALUE, [])
        error.message = "; ".join(undecided)  # what pulumi_policy puts in its diagnostic
        raise error


def resource_policy(
    rule: rules.ResourceRule, level: EnforcementLevel | None = None
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        # Each rule is its own policy, and rules.judge judges each part of it on its own, so an
        # unknown value leaves only the part that reads it undecided.
        messages = rules.judge(rule, args.resource_type, _plain(args.props))
        _report(((None, m) for m in messages), report_violation)

    return ResourceValidationPolicy(
        name=rule.name, description=rule.description, validate=validate, enforcement_level=level
    )


def stack_policy(rule: rules.StackRule) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [_resource(r) for r in args.resources]
        found = rules.judge_stack(rule, resources)
        _report(((c.urn if c is not None else None, m) for c, m in found), report_violation)

    return StackValidationPolicy(name=rule.name, description=rule.description, validate=validate)


def _resource(r: PolicyResource) -> rules.Resource:
    # Stack policies see outputs: the id is among the props of a created resource, and unknown
    # (None here) at preview for one not yet created. Property dependencies (URNs) are known even
    # then, so rules can tell which resource an unknown reference is to.
    props = _plain(r.props)
    id_ = props.get("id")
    dependencies = {key: [d.urn for d in deps] for key, deps in r.property_dependencies.items()}
    return rules.Resource(
        r.resource_type,
        r.name,
        props,
        id=id_ if isinstance(id_, str) and id_ else None,
        urn=r.urn,
        dependencies=dependencies,
    )


PolicyPack(
    name="fleetforge",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=[
        *(resource_policy(rule) for rule in rules.RESOURCE_RULES),
        # Warned about on every preview and update, never refused (rules.ADVISORY_RULES says why).
        *(resource_policy(rule, EnforcementLevel.ADVISORY) for rule in rules.ADVISORY_RULES),
        *(stack_policy(rule) for rule in rules.STACK_RULES),
    ],
)

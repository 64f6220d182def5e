"""fleetforge's CrossGuard policy pack: every rule of policy.rules, mandatory but the advisory ones.

    pulumi preview --policy-pack policy/      # or pulumi up --policy-pack policy/

The Pulumi policy host runs this folder in its own virtual environment (PulumiPolicy.yaml,
requirements.txt); constructing PolicyPack starts the analyzer server and blocks, which is why the
rules live in rules.py and tests call them directly.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pulumi_policy import (
    EnforcementLevel,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

if TYPE_CHECKING:  # an annotation only: the pack needs no more of pulumi_policy at run time
    from pulumi_policy import PolicyResource

try:
    from policy import rules  # a fleetforge environment (the project's venv, tests)
except ImportError:  # the pack's own venv: the host runs this folder, rules.py sits beside it
    # rules.py judges SSH sources with fleet/netpolicy.py (standard library only), so the checkout
    # above this folder goes on the path; the pack is run from a fleetforge checkout, never alone.
    sys.path.append(str(Path(__file__).resolve().parent.parent))
    import rules  # type: ignore[no-redef,import-not-found]


def resource_policy(
    rule: rules.ResourceRule, level: EnforcementLevel | None = None
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        for message in rule.check(args.resource_type, args.props):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=rule.name, description=rule.description, validate=validate, enforcement_level=level
    )


def stack_policy(rule: rules.StackRule) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        resources = [_resource(r) for r in args.resources]
        for culprit, message in rule.check(resources):
            report_violation(message, culprit.urn if culprit is not None else None)

    return StackValidationPolicy(name=rule.name, description=rule.description, validate=validate)


def _resource(r: PolicyResource) -> rules.Resource:
    # Stack policies see outputs: the id is among the props of a created resource.
    return rules.Resource(r.resource_type, r.name, r.props, id=r.props.get("id"), urn=r.urn)


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

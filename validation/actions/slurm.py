"""Action `slurm-drain`: drain a rejected node in Slurm with the gate's reasons.

Runs `scontrol update NodeName=<n> State=DRAIN Reason=fleetforge: <reasons>` with an argument
vector, never a shell: the reason is one argv element, so it needs no quoting, and the dry run
prints it shell-quoted (`shlex.join`) so it can be pasted as is. The reason is still cleaned, since
it ends up in `sinfo -R`, emails and scripts that parse them: whitespace runs become one space; every
character outside letters, digits and ` _.,:;=!<>/()%+#@[]-` (quotes, backslashes, `$`, backticks,
shell operators, control and non-ASCII characters) becomes `_`; it is cut to `reason_max` chars.
Running jobs finish; Slurm schedules nothing new on the node until an admin resumes it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence

from validation.actions.base import Action
from validation.actions.model import (
    ActionConfigError,
    Call,
    CallOutcome,
    PlannedStep,
    RejectedNode,
    StepFailed,
)

PREFIX = "fleetforge: "
_UNSAFE = re.compile(r"[^A-Za-z0-9 _.,:;=!<>/()%+#@\[\]-]")
_SPACE = re.compile(r"\s+")


def slurm_reason(reasons: Sequence[str], max_len: int = 200) -> str:
    """One line, safe characters only, at most `max_len` characters, starting with 'fleetforge: '."""
    text = PREFIX + "; ".join(r.strip() for r in reasons if r.strip())
    text = _UNSAFE.sub("_", _SPACE.sub(" ", text)).strip()
    if len(text) > max_len:
        text = text[: max_len - 3].rstrip() + "..."
    return text


class SlurmDrain(Action):
    name = "slurm-drain"
    description = "scontrol update State=DRAIN with the reasons: no new jobs on the node"
    sdk_module = None
    needs = ("slurm_node_name",)

    def __init__(self, scontrol: str = "scontrol", reason_max: int = 200, timeout_s: float = 60.0) -> None:
        if reason_max < len(PREFIX) + 8:
            raise ActionConfigError(
                f"slurm reason length must be at least {len(PREFIX) + 8}, got {reason_max}"
            )
        self.scontrol = scontrol
        self.reason_max = reason_max
        self.timeout_s = timeout_s

    def _plan_node(self, node: RejectedNode) -> PlannedStep:
        reason = slurm_reason(node.reasons, self.reason_max)
        argv = [
            self.scontrol,
            "update",
            f"NodeName={node.ids.slurm_node_name}",
            "State=DRAIN",
            f"Reason={reason}",
        ]
        return PlannedStep(
            action=self.name,
            node=node.name,
            summary=f"drain Slurm node {node.ids.slurm_node_name}",
            reasons=node.reasons,
            calls=(Call("exec", self.scontrol, "run", {"argv": argv}),),
        )

    def _execute(self, step: PlannedStep, done: list[CallOutcome]) -> str:
        (call,) = step.calls
        proc = subprocess.run(
            call.params["argv"], capture_output=True, text=True, timeout=self.timeout_s, check=False
        )
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip() or "no output"
            raise StepFailed(f"scontrol exited {proc.returncode}: {said}")
        done.append(CallOutcome(call, "exit 0"))
        return "drained"

    def _failures(self) -> tuple[type[BaseException], ...]:
        # OSError: scontrol not found or not executable; TimeoutExpired: slurmctld not answering.
        return (OSError, subprocess.TimeoutExpired)

"""Action `slurm-drain`: drain a rejected node in Slurm with the gate's reasons.

Runs `scontrol update NodeName=<n> State=DRAIN Reason=fleetforge: <reasons>` with an argument
vector, never a shell: the reason is one argv element, so it needs no quoting, and the dry run
prints it shell-quoted (`shlex.join`) so it can be pasted as is. The reason is still cleaned, since
it ends up in `sinfo -R`, emails and scripts that parse them: whitespace runs become one space; every
character outside letters, digits and ` _.,:;=!<>/()%+#@[]-` (quotes, backslashes, `$`, backticks,
shell operators, control and non-ASCII characters) becomes `_`; it is cut to `reason_max` chars.
Running jobs finish; Slurm schedules nothing new on the node until an admin resumes it.

slurmctld reads `NodeName=` as a node list: `ALL` (any case) or a NodeSet name drains many nodes.
So `ALL` is refused at plan time, and each step first runs `scontrol -o show node <name>` and drains
only when it prints exactly one node, named exactly `<name>`.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence

from validation.actions.base import Action, id_problem
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
# The first field of each line of `scontrol -o show node` (one line per node).
_NODE_NAME = re.compile(r"NodeName=(\S+)")


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

    def node_problems(self, node: RejectedNode) -> list[tuple[str, str, str]]:
        problems = super().node_problems(node)
        name = node.ids.slurm_node_name
        if id_problem(node, "slurm_node_name") is None and str(name).upper() == "ALL":
            why = f"{name!r} is Slurm's name for every node: scontrol would drain the whole cluster"
            problems.append((node.name, "slurm_node_name", why))
        return problems

    def _plan_node(self, node: RejectedNode) -> PlannedStep:
        name = node.ids.slurm_node_name
        reason = slurm_reason(node.reasons, self.reason_max)
        show = [self.scontrol, "-o", "show", "node", str(name)]
        drain = [self.scontrol, "update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}"]
        return PlannedStep(
            action=self.name,
            node=node.name,
            summary=f"drain Slurm node {name}, once scontrol shows it is that one node",
            reasons=node.reasons,
            calls=(
                Call("exec", self.scontrol, "run", {"argv": show}),
                Call("exec", self.scontrol, "run", {"argv": drain}),
            ),
        )

    def _execute(self, step: PlannedStep, done: list[CallOutcome]) -> str:
        show, drain = step.calls
        name = show.params["argv"][-1]
        lines = [line for line in self._run(show, "scontrol show node").splitlines() if line.strip()]
        first = _NODE_NAME.match(lines[0]) if len(lines) == 1 else None
        if first is None or first.group(1) != name:
            raise StepFailed(
                f"refused, nothing drained: scontrol show node {name} printed {_firsts(lines)}, "
                f"not the one line NodeName={name}"
            )
        done.append(CallOutcome(show, f"one node: {name}"))
        self._run(drain, "scontrol update")
        done.append(CallOutcome(drain, "exit 0"))
        return "drained"

    def _run(self, call: Call, what: str) -> str:
        """The command's output; StepFailed naming `what` when it exits non-zero."""
        # errors="replace": a node's Reason, set by anyone, may hold bytes that are not UTF-8.
        proc = subprocess.run(
            call.params["argv"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=self.timeout_s,
            check=False,
        )
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip() or "no output"
            raise StepFailed(f"{what} exited {proc.returncode}: {said}")
        return proc.stdout

    def _failures(self) -> tuple[type[BaseException], ...]:
        # OSError: scontrol not found or not executable; TimeoutExpired: slurmctld not answering.
        return (OSError, subprocess.TimeoutExpired)


def _firsts(lines: Sequence[str], most: int = 5) -> str:
    """What came back, short: the first field of each line (NodeName=...), at most `most` of them."""
    if not lines:
        return "nothing"
    shown = ", ".join(line.split(None, 1)[0] for line in lines[:most])
    more = f" and {len(lines) - most} more" if len(lines) > most else ""
    return f"{len(lines)} line(s): {shown}{more}"

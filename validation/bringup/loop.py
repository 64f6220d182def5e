"""The loop: burn in, gate, replace the rejects, wait for the replacements, burn in only them,
re-gate the whole fleet on the kept nodes' earlier results and the new ones, until READY or the
budget is spent.

A round:
  1. burn-in  every inventory host without results (round 1: all of them) into round-N/results/,
              beside copies of the kept hosts' results (a replaced host's are never copied again)
  2. gate     the whole inventory: kept hosts on their earlier results and reasons, new on theirs
  3. replace  every reject, unless its slot was already replaced twice for the same reason (a
              pattern: a bad rack or image that a third instance will not fix) or the budget is spent;
              a new host that did not answer over SSH yet is burned in again next round instead
  4. wait     until the group shows the replacements (re-reading the inventory) or the timeout

A name does not always name one machine: a recreated GCE instance keeps its name, and an EC2
replacement may be given the private address (the inventory name) of the instance it replaces.
Where the replace action has an identity host var (an instance id), the loop records the instance
each host was burned in on and the instance it replaced: a name showing a replaced instance is
left out of the rounds until a new one stands behind it, and a kept host whose instance changed
(the cloud healed it on its own) is burned in again.

A slot is a position in the fleet: the first round's host, then each replacement that stood in for
it. When several nodes are replaced at once the group does not say which new instance stands in
for which, so replaced and new hosts are paired in name order.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet.results import read_results
from validation.actions import default_max_replace, rejected_nodes
from validation.actions.base import ID_FORMATS
from validation.bringup.interfaces import (
    BurnIn,
    Clock,
    FleetRunner,
    InventoryReader,
    InventoryView,
    Replacer,
    SystemClock,
)
from validation.bringup.record import RECORD_NAME, BringupRecord, RecordError
from validation.fleetrun.hosts import HostListError
from validation.gate import (
    FleetPlan,
    GateInputError,
    GateResult,
    GateSettings,
    NodeVerdict,
    Reason,
    decide,
    natural_key,
)

# Replacements of one slot for the same reason after which a reject there is a pattern.
PATTERN_AFTER = 2


class _WallSpent(Exception):
    """The burn-in was cut short by --max-wall: nothing judged, the round stays at its burn-in."""


class BringupError(RuntimeError):
    """The loop cannot go on; `exit_name` names the fleetforge.exitcodes constant."""

    def __init__(self, message: str, exit_name: str) -> None:
        super().__init__(message)
        self.exit_name = exit_name


@dataclass(frozen=True)
class Budget:
    max_rounds: int = 3
    max_wall_s: float = 4 * 3600.0
    max_replacements: int | None = None  # None: as many as the first round's inventory has hosts
    # Most nodes one round replaces; None: a quarter of the round's fleet, at least 1. More rejects
    # than that in one round is a cause the fleet shares, which new machines do not fix.
    max_per_round: int | None = None

    def __post_init__(self) -> None:
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds {self.max_rounds}: allowed 1 or more")
        if self.max_wall_s <= 0:
            raise ValueError(f"max_wall_s {self.max_wall_s}: allowed more than 0")
        if self.max_replacements is not None and self.max_replacements < 0:
            raise ValueError(f"max_replacements {self.max_replacements}: allowed 0 or more")
        if self.max_per_round is not None and self.max_per_round < 1:
            raise ValueError(f"max_per_round {self.max_per_round}: allowed 1 or more")


@dataclass(frozen=True)
class BringupSettings:
    out_dir: Path
    plan: FleetPlan
    gate: GateSettings
    sku: str | None = None
    sku_from: str = "the spec"
    budget: Budget = Budget()
    strict: bool = False  # READY only when no node is rejected, even one the spares cover
    replace_timeout_s: float = 1200.0  # longest wait for the replacements of one round
    poll_s: float = 30.0
    resume: bool = False


@dataclass
class Outcome:
    status: str  # ready | budget-spent | action-failed | waiting
    reason: str | None
    result: GateResult | None  # the last gate (None when resumed into a finished bring-up)
    record: BringupRecord

    @property
    def ready(self) -> bool:
        return self.status == "ready"


def reason_keys(reasons: Sequence[Reason]) -> list[str]:
    """What a reject was for, without the measured value: the same fault on another instance of
    the slot gives the same key (outlier:gemm_fp32_tflops, missing, version:driver)."""
    keys = {r.rule + (f":{r.metric or r.check}" if (r.metric or r.check) else "") for r in reasons}
    return sorted(keys) or ["unknown"]


def bring_up(
    settings: BringupSettings,
    runner: FleetRunner,
    inventory: InventoryReader,
    replacer: Replacer,
    clock: Clock | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> Outcome:
    """Run (or with settings.resume, continue) the loop. Raises BringupError, RecordError, or what
    the runner, inventory or replacer raise before they change anything (their own error types)."""
    path = settings.out_dir / RECORD_NAME
    try:
        settings.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BringupError(
            f"--out {settings.out_dir}: cannot create it ({exc.strerror or exc})", "CANT_CREATE"
        ) from None
    if settings.resume:
        record = BringupRecord.load(path)
        if record.fleet != settings.plan.name or record.inventory != str(inventory.path):
            raise RecordError(
                f"{path}: a bring-up of fleet {record.fleet!r} over {record.inventory}, not of "
                f"{settings.plan.name!r} over {inventory.path}; resume it with the same spec and inventory"
            )
        if record.status == "ready":
            say(f"{path}: the fleet was already READY; nothing to do")
            return Outcome("ready", record.stop_reason, None, record)
        record.status = record.stop_reason = None
    else:
        if path.exists():
            raise BringupError(
                f"--out {settings.out_dir}: holds a bring-up record ({RECORD_NAME}); continue it with "
                f"--resume or choose another --out",
                "USAGE",
            )
        record = BringupRecord(fleet=settings.plan.name, inventory=str(inventory.path))
    return _Loop(settings, runner, inventory, replacer, clock or SystemClock(), say, record).run()


class _Loop:
    def __init__(
        self,
        settings: BringupSettings,
        runner: FleetRunner,
        inventory: InventoryReader,
        replacer: Replacer,
        clock: Clock,
        say: Callable[[str], None],
        record: BringupRecord,
    ) -> None:
        self.s = settings
        self.runner = runner
        self.inventory = inventory
        self.replacer = replacer
        self.clock = clock
        self.say = say
        self.rec = record
        self.path = settings.out_dir / RECORD_NAME
        self._base_s = record.elapsed_s
        self._t0 = clock.now()
        # The inventory names the fleet's members: replacements join under names no spec lists.
        self.plan = dataclasses.replace(settings.plan, hosts=())
        self.last: GateResult | None = None

    # ------------------------------------------------------------------ bookkeeping

    def elapsed(self) -> float:
        return self._base_s + (self.clock.now() - self._t0)

    def save(self) -> None:
        self.rec.elapsed_s = self.elapsed()
        try:
            self.rec.save(self.path)
        except OSError as exc:
            raise BringupError(f"{self.path}: cannot write the record ({exc})", "CANT_CREATE") from None

    def stop(self, status: str, reason: str | None) -> Outcome:
        self.rec.status, self.rec.stop_reason = status, reason
        self.save()
        return Outcome(status, reason, self.last, self.rec)

    def replacement_budget(self) -> int:
        if self.s.budget.max_replacements is not None:
            return self.s.budget.max_replacements
        first = self.rec.rounds[0].get("inventory", []) if self.rec.rounds else []
        return len(first)

    # ------------------------------------------------------------------ the loop

    def run(self) -> Outcome:
        while True:
            last = self.rec.rounds[-1] if self.rec.rounds else None
            if last is not None and last["phase"] != "done":
                current = last
                self.say(f"round {current['round']}: resuming (it did not finish)")
                if current["phase"] == "burn-in" and self.elapsed() >= self.s.budget.max_wall_s:
                    return self.stop("budget-spent", _wall_spent(self.s.budget, current["round"]))
            else:
                spent = self.spent()
                if spent:
                    return self.stop("budget-spent", spent)
                current = {"round": len(self.rec.rounds) + 1, "phase": "burn-in"}
                self.rec.rounds.append(current)
            outcome = self.round(current)
            if outcome is not None:
                return outcome

    def spent(self) -> str | None:
        b = self.s.budget
        if len(self.rec.rounds) >= b.max_rounds:
            return (
                f"--max-rounds {b.max_rounds}: {len(self.rec.rounds)} round(s) done, the fleet is not READY"
            )
        if self.elapsed() >= b.max_wall_s:
            return f"--max-wall {b.max_wall_s:g} s: {self.elapsed():.0f} s spent, the fleet is not READY"
        return None

    def round(self, r: dict[str, Any]) -> Outcome | None:
        if r["phase"] == "burn-in":
            t0 = self.clock.now()
            try:
                result = self.burn_and_gate(r)
            except _WallSpent:
                return self.stop("budget-spent", _wall_spent(self.s.budget, r["round"]))
            self.last = result
            if result.outcome(self.s.strict) == "ok":
                self.finish(r, t0)
                self.say(f"round {r['round']}: READY")
                return self.stop("ready", None)
            chosen = self.choose(result, r)
            if not chosen:
                self.finish(r, t0)
                if r["retry"]:
                    self.say(
                        f"round {r['round']}: {', '.join(x['node'] for x in r['retry'])}: not answering yet"
                    )
                    self.clock.sleep(self.s.poll_s)
                    return None
                if self.rec.pending and not (r["patterns"] or r["not_replaced"]):
                    return self.stop(
                        "waiting",
                        f"the fleet is not READY and the replacement(s) for slot(s) {', '.join(self.rec.pending)} "
                        "have not joined the inventory: --resume once they have (or once replaced by hand)",
                    )
                return self.stop("budget-spent", _nothing_left(r, self.rec.pending))
            failed = self.replace(r, chosen)
            r.setdefault("timings_s", {})["before_wait"] = round(self.clock.now() - t0, 3)
            if failed:
                return self.stop(
                    "action-failed",
                    f"the replace action failed on {', '.join(failed)}; act by hand, then --resume",
                )
        if r["phase"] == "replacing":
            self.interrupted_replacing(r)
        t0 = self.clock.now()
        self.wait(r)
        self.finish(r, t0)
        return None

    # ------------------------------------------------------------------ 1 and 2: burn-in, gate

    def burn_and_gate(self, r: dict[str, Any]) -> GateResult:
        n = r["round"]
        timings: dict[str, float] = {}
        # A burn-in that finished before an interruption (at the gate, say) is judged, not redone.
        earlier = (
            {k: r.get(k) for k in ("burned", "instances", "host_reasons")} if r.get("measured") else None
        )
        r.update(started=_stamp(), timings_s=timings, replaced=[], patterns=[], not_replaced=[], retry=[])
        r.pop("measured", None)
        view = self.read_inventory()
        listed = view.hosts
        ids = self.identities(view)
        self.require_identities(ids)
        hosts = self.without_replaced(r, listed, ids)
        for host in hosts:
            if host not in self.rec.slots and self.rec.pending:
                # A replacement that joined after its round's wait: it continues that slot's line.
                self.rec.slots[host] = self.rec.pending.pop(0)
        results = self.s.out_dir / f"round-{n}" / "results"
        instances = {h: i for h, i in ids.items() if i is not None}
        kept: list[str] = []
        changed: list[str] = []
        for host in hosts:
            if self.rec.results.get(host) is None:
                continue
            if host in self.rec.instances and ids.get(host) != self.rec.instances[host]:
                changed.append(host)  # another machine under the name: its results are not this one's
                continue
            kept.append(host)
        burn = [h for h in hosts if h not in kept]
        # Judged as measured only when the same machines stand under the same names (a file gone
        # since is judged missing: a reject, never an accept).
        resumed = earlier is not None and earlier["burned"] == burn and earlier["instances"] == instances
        if resumed and any(
            not (results / f"{h}.jsonl").is_file() and not Path(self.rec.results[h]).is_file() for h in kept
        ):
            # A kept host's results are gone: the round is burned in again, and every kept copy
            # starts over from its source, none keeping what the discarded run appended to it.
            resumed = False
        try:
            if results.exists() and not resumed:
                shutil.rmtree(results)  # an interrupted attempt's files are never judged
            results.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BringupError(
                f"{results}: cannot prepare it ({exc.strerror or exc})", "CANT_CREATE"
            ) from None
        for host in list(kept):
            if resumed and (results / f"{host}.jsonl").is_file():
                # The finished run appended to this copy (the fleet all-reduce, the fabric rounds):
                # copying the earlier round's file again would erase what it measured.
                continue
            try:
                shutil.copy2(self.rec.results[host], results / f"{host}.jsonl")
            except OSError:
                kept.remove(host)  # its results are gone: burned in again rather than judged on nothing
                burn.append(host)
                if resumed:
                    resumed = False  # burned in again after all: the finished run's files go
                    for stale in burn:
                        (results / f"{stale}.jsonl").unlink(missing_ok=True)
        r.update(inventory=listed, kept=kept, burned=burn, instances=instances)
        if changed:
            r["instance_changed"] = changed
            self.say(f"round {n}: {', '.join(changed)}: another instance since its burn-in, burned in again")
        self.save()
        reasons: dict[str, list[Reason]] = {h: self.rec.reasons_of(h) for h in kept}
        if burn and resumed and earlier is not None:
            self.say(f"round {n}: its burn-in finished before the interruption: judging its results")
            # The record's host_reasons are checked as the gate's reasons when it is loaded.
            saved = earlier["host_reasons"] or {}
            reasons.update({h: [Reason(**x) for x in saved.get(h, [])] for h in burn})
            reasons.update({h: [Reason(**x) for x in saved[h]] for h in kept if h in saved})
        elif burn:
            self.say(
                f"round {n}: burn-in on {len(burn)} host(s): {', '.join(burn)}"
                + (f" ({len(kept)} kept on their earlier results)" if kept else "")
            )
            t = self.clock.now()
            time_left = max(0.0, self.s.budget.max_wall_s - self.elapsed())
            # Limited whenever a listed host is not burned in: kept, or left out (never measured again).
            limit = () if burn == listed else tuple(burn)
            run = self.runner(self.inventory.path, results.parent, limit, time_left)
            timings["burnin"] = round(self.clock.now() - t, 3)
            r["fleet_run"] = _run_summary(run)
            if run.problem:
                # The play did not finish (time limit, no recap, cancelled): the hosts it left without
                # results were not measured, and replacing them would replace healthy nodes. The round
                # stays at its burn-in, which --resume redoes.
                self.save()
                if self.elapsed() >= self.s.budget.max_wall_s:
                    raise _WallSpent
                raise BringupError(
                    f"round {n}: the fleet run did not finish ({run.problem}); nothing was judged or "
                    f"replaced: fix the cause, then --resume",
                    "INCOMPLETE",
                )
            reasons.update({h: list(run.host_reasons.get(h, [])) for h in burn})
            # A kept host is not burned in again, but the fabric rounds still pair it: what they
            # found (unreachable mid-round, say) joins what it carried.
            for h in kept:
                reasons[h] = [*reasons[h], *run.host_reasons.get(h, [])]
            r["measured"] = True
        else:
            self.say(f"round {n}: no new host to burn in; judging the kept results again")
        r["host_reasons"] = {h: [x.as_dict() for x in reasons[h]] for h in [*burn, *kept] if reasons.get(h)}
        if r.get("measured"):
            self.save()  # from here an interruption costs the gate, not the burn-in
        t = self.clock.now()
        files = [read_results(p) for p in sorted(results.glob("*.jsonl")) if p.stem in hosts]
        try:
            result = decide(
                files,
                sku=self.s.sku,
                sku_from=self.s.sku_from,
                settings=self.s.gate,
                plan=self.plan,
                expected=hosts,
                host_reasons={h: x for h, x in reasons.items() if x},
            )
        except GateInputError as exc:
            raise BringupError(f"gate: {exc} (results in {results})", "DATA") from None
        timings["gate"] = round(self.clock.now() - t, 3)
        f = result.fleet
        r.update(
            ready=f.ready,
            outcome=result.outcome(self.s.strict),
            accepted=list(f.accepted),
            rejected=list(f.rejected),
            verdicts={
                v.node: {"verdict": v.verdict, "reasons": [x.as_dict() for x in v.reasons]}
                for v in result.nodes
            },
        )
        self.say(
            f"round {n}: gate: {len(f.accepted)} accepted, {len(f.rejected)} rejected"
            + (f" ({', '.join(f.rejected)})" if f.rejected else "")
        )
        self.save()
        return result

    def read_inventory(self) -> InventoryView:
        try:
            return self.inventory.read()
        except HostListError as exc:
            raise BringupError(str(exc), "DATA") from None

    def identities(self, view: InventoryView) -> dict[str, str | None]:
        """Each listed host's instance (the replacer's identity var); empty where it has none."""
        var = self.replacer.identity_var
        return {} if var is None else _identities(view.hosts, view.hostvars, var)

    def require_identities(self, ids: Mapping[str, str | None]) -> None:
        """Where replacements keep their names, the wait tells them apart by instance alone: every
        host needs its id before anything is burned in, not at the first replacement."""
        var = self.replacer.identity_var
        unknown = sorted((h for h, i in ids.items() if i is None), key=natural_key)
        if var is not None and self.replacer.keeps_names and unknown:
            raise BringupError(_no_identity(var, unknown), "DATA")

    def without_replaced(
        self, r: dict[str, Any], hosts: Sequence[str], ids: Mapping[str, str | None]
    ) -> list[str]:
        """The hosts to burn in and judge: not a name still showing an instance already replaced (a
        recreation not done yet, an instance not terminated yet), which is never measured again. A
        name showing a new instance is its replacement: its slot is no longer pending."""
        left_out = []
        for host in hosts:
            replaced = self.rec.retired.get(host)
            if replaced is None:
                continue
            now = ids.get(host)
            if now is None or now == replaced:
                why = (
                    "still the instance replaced earlier"
                    if now
                    else "no instance id to tell it from the one replaced"
                )
                left_out.append({"node": host, "instance": replaced, "why": why})
                continue
            del self.rec.retired[host]
            slot = self.rec.slots.get(host, host)
            if slot in self.rec.pending:
                self.rec.pending.remove(slot)
        r["left_out"] = left_out
        if left_out:
            self.say(
                f"round {r['round']}: left out, still the replaced instance: "
                + ", ".join(f"{x['node']} ({x['instance']})" for x in left_out)
            )
        out = {x["node"] for x in left_out}
        return [h for h in hosts if h not in out]

    # ------------------------------------------------------------------ 3: replace

    def choose(self, result: GateResult, r: dict[str, Any]) -> list[tuple[NodeVerdict, list[str], str]]:
        """The rejects to replace; the others go to the round's patterns or not_replaced."""
        left = self.replacement_budget() - self.rec.replacements
        last_round = r["round"] >= self.s.budget.max_rounds
        out_of_time = self.elapsed() >= self.s.budget.max_wall_s
        # A retry is per machine: a name recreated since its retry gets one again.
        earlier_retries = {
            (x["node"], x.get("instance")) for done in self.rec.rounds[:-1] for x in done.get("retry", [])
        }
        instances = r.get("instances", {})
        chosen = []
        for v in result.nodes:
            if v.accepted or v.node not in r["inventory"]:
                continue
            if (
                r["round"] > 1
                and v.node in r["burned"]
                and (v.node, instances.get(v.node)) not in earlier_retries
                and _unreachable_only(v)
                and not (last_round or out_of_time)
            ):
                # A replacement can join the group before its SSH server answers: it gets one more
                # round before it counts as a reject.
                r["retry"].append(
                    {
                        "node": v.node,
                        "instance": instances.get(v.node),
                        "why": "a new host that did not answer yet: burned in again",
                    }
                )
                continue
            keys = reason_keys(v.reasons)
            slot = self.rec.slots.get(v.node, v.node)
            same = [h for h in self.rec.history.get(slot, []) if set(h["keys"]) & set(keys)]
            if len(same) >= PATTERN_AFTER:
                common = sorted(set(keys).intersection(*(set(h["keys"]) for h in same)) or keys)
                r["patterns"].append(
                    {
                        "node": v.node,
                        "slot": slot,
                        "keys": common,
                        "replaced_before": [h["node"] for h in same],
                        "message": f"slot {slot}: {v.node} rejected for {', '.join(common)} after "
                        f"{len(same)} replacements for the same reason ({', '.join(h['node'] for h in same)}): "
                        f"a pattern (bad rack, bad image), not replaced again",
                    }
                )
                self.say(f"round {r['round']}: PATTERN: {r['patterns'][-1]['message']}")
                continue
            why = None
            if last_round:
                why = f"--max-rounds {self.s.budget.max_rounds}: no round left to burn in a replacement"
            elif out_of_time:
                why = f"--max-wall {self.s.budget.max_wall_s:g} s spent"
            elif left <= 0:
                why = f"--max-replacements {self.replacement_budget()} spent"
            if why is not None:
                r["not_replaced"].append({"node": v.node, "slot": slot, "keys": keys, "why": why})
                continue
            chosen.append((v, keys, slot))
            left -= 1
        return self.within_round_limit(r, chosen)

    def within_round_limit(
        self, r: dict[str, Any], chosen: list[tuple[NodeVerdict, list[str], str]]
    ) -> list[tuple[NodeVerdict, list[str], str]]:
        """All the chosen nodes, or none when they are more than one round may replace."""
        fleet = len(r.get("inventory", []))
        limit = self.s.budget.max_per_round
        said = f"--max-replace {limit}"
        if limit is None:
            limit, said = default_max_replace(fleet), f"a quarter of the {fleet} host(s) (--max-replace)"
        if len(chosen) <= limit:
            return chosen
        why = (
            f"{len(chosen)} rejects in one round, more than {said}: a cause the fleet shares (an "
            f"image, a driver, the fabric, a check no node ran) is not fixed by new machines"
        )
        r["not_replaced"] += [
            {"node": v.node, "slot": slot, "keys": keys, "why": why} for v, keys, slot in chosen
        ]
        self.say(f"round {r['round']}: nothing replaced: {why}")
        return []

    def replace(self, r: dict[str, Any], chosen: Sequence[tuple[NodeVerdict, list[str], str]]) -> list[str]:
        """Replace the chosen nodes; the names whose replacement failed."""
        hostvars = self.read_inventory().hostvars
        var = self.replacer.identity_var
        instances = {} if var is None else _identities([v.node for v, _, _ in chosen], hostvars, var)
        unknown = sorted((h for h, i in instances.items() if i is None), key=natural_key)
        if var is not None and unknown:
            raise BringupError(_no_identity(var, unknown) + "; nothing was replaced", "DATA")
        chosen = self.still_the_measured(r, chosen, instances)
        if not chosen:
            return []
        nodes = rejected_nodes([(v.node, [x.message for x in v.reasons]) for v, _, _ in chosen], hostvars)
        self.replacer.check(nodes)
        # Saved before the cloud is asked: an interruption from here on never asks it twice.
        r["phase"] = "replacing"
        r["replacing"] = [
            {
                "node": v.node,
                "slot": slot,
                "keys": keys,
                "reasons": [x.message for x in v.reasons],
                "instance": instances.get(v.node),
            }
            for v, keys, slot in chosen
        ]
        self.save()
        self.say(f"round {r['round']}: replacing {', '.join(n.name for n in nodes)} ({self.replacer.name})")
        t = self.clock.now()
        outcomes = {o.node: o for o in self.replacer.replace(nodes)}
        r["timings_s"]["replace"] = round(self.clock.now() - t, 3)
        failed = []
        for asked in r.pop("replacing"):
            o = outcomes.get(asked["node"])
            ok = o is not None and o.ok
            detail = o.detail if o is not None else "the replace action reported nothing for this node"
            self.replaced(r, asked, ok, detail)
            if not ok:
                failed.append(asked["node"])
        r["phase"] = "replaced"
        self.save()
        return failed

    def still_the_measured(
        self,
        r: dict[str, Any],
        chosen: Sequence[tuple[NodeVerdict, list[str], str]],
        instances: Mapping[str, str | None],
    ) -> list[tuple[NodeVerdict, list[str], str]]:
        """The chosen nodes whose name still shows the instance this round measured. A name that
        shows another (the group healed it, a private address was reused) is not replaced: the
        action would hit a machine nobody judged. Its new instance is burned in next round."""
        measured = r.get("instances", {})
        keep = []
        for v, keys, slot in chosen:
            then, now = measured.get(v.node), instances.get(v.node)
            if then is not None and now != then:
                r["retry"].append(
                    {
                        "node": v.node,
                        "instance": then,
                        "why": f"another instance ({now}) holds the name since its burn-in: not "
                        "replaced, burned in again",
                    }
                )
                self.say(f"round {r['round']}: {v.node}: {r['retry'][-1]['why']}")
                continue
            keep.append((v, keys, slot))
        self.save()
        return keep

    def replaced(self, r: dict[str, Any], asked: Mapping[str, Any], ok: bool, detail: str) -> None:
        r["replaced"].append({**asked, "action": self.replacer.name, "ok": ok, "detail": detail})
        if ok:
            if asked.get("instance") is not None:
                self.rec.retired[asked["node"]] = asked["instance"]
            self.rec.replacements += 1
            self.rec.history.setdefault(asked["slot"], []).append(
                {"round": r["round"], "node": asked["node"], "keys": asked["keys"]}
            )

    def interrupted_replacing(self, r: dict[str, Any]) -> None:
        """A round interrupted inside the replace call: the cloud may have acted on some nodes or
        none. Asking again could replace a node twice, so each counts as asked for, and the wait
        shows what joined; one that never does is pending (see wait)."""
        for asked in r.pop("replacing"):
            self.replaced(
                r,
                asked,
                True,
                "the bring-up was interrupted during the replace call: not asked again; if no "
                "replacement joins, replace the node by hand, then --resume",
            )
        r["phase"] = "replaced"
        self.save()

    # ------------------------------------------------------------------ 4: wait

    def wait(self, r: dict[str, Any]) -> None:
        replaced = {x["node"]: x.get("instance") for x in r.get("replaced", []) if x["ok"]}
        gone = sorted(replaced, key=natural_key)
        left_out = {x["node"] for x in r.get("left_out", [])}
        # The hosts the round judged: a left-out name (an old instance on its way out) may go meanwhile.
        before = [h for h in r.get("inventory", []) if h not in left_out]
        # A name seen before (the round's, an earlier round's, a replaced one) is never a new host:
        # it comes back to its own slot.
        known = set(r.get("inventory", [])) | set(self.rec.slots) | set(self.rec.retired)
        limit = max(0.0, min(self.s.replace_timeout_s, self.s.budget.max_wall_s - self.elapsed()))
        self.say(f"round {r['round']}: waiting up to {limit:.0f} s for {len(gone)} replacement(s)")
        t0 = self.clock.now()
        hosts: list[str] = before
        back: list[str] = []  # replaced names that show a new instance
        complete = False
        while True:
            try:
                view = self.inventory.read()
            except HostListError:
                view = InventoryView([], {})  # a group between instances can list none for a moment
            hosts, ids = view.hosts, self.identities(view)
            back = [h for h in gone if h in hosts and self._came_back(replaced[h], ids.get(h))]
            if self.replacer.keeps_names:
                complete = len(back) == len(gone)
            else:
                still = [h for h in gone if h in hosts and h not in back]
                complete = not still and len(hosts) >= len(before)
            waited = self.clock.now() - t0
            if complete or waited >= limit:
                break
            self.clock.sleep(min(self.s.poll_s, limit - waited))
        fresh = sorted((h for h in hosts if h not in known), key=natural_key)
        waiting = [h for h in gone if h not in back]
        for host in back:
            self.rec.retired.pop(host, None)
        for old, host in zip(waiting, fresh, strict=False):
            self.rec.slots[host] = self.rec.slots.get(old, old)
        # Replaced with no new host yet: a host that joins later takes the slot (burn_and_gate).
        self.rec.pending += [self.rec.slots.get(old, old) for old in waiting[len(fresh) :]]
        new = sorted([*back, *fresh], key=natural_key)
        r["new_hosts"] = new
        r["wait"] = {
            "seconds": round(self.clock.now() - t0, 3),
            "complete": complete,
            "message": "the replacements are in the inventory"
            if complete
            else f"after {limit:.0f} s the inventory shows {len(new)} new host(s) for {len(gone)} replaced; "
            "the next round judges what is there",
        }
        r.setdefault("timings_s", {})["wait"] = r["wait"]["seconds"]
        self.say(f"round {r['round']}: {r['wait']['message']}" + (f": {', '.join(new)}" if new else ""))

    def _came_back(self, replaced: str | None, now: str | None) -> bool:
        """Whether a replaced name that is listed again shows its replacement."""
        if replaced is None:
            return self.replacer.keeps_names  # no identity: only a name-keeping action brings it back
        return now is not None and now != replaced  # no id now: not known to be another instance

    # ------------------------------------------------------------------ end of a round

    def finish(self, r: dict[str, Any], t0: float) -> None:
        results = self.s.out_dir / f"round-{r['round']}" / "results"
        saved = r.get("host_reasons", {})
        instances = r.get("instances", {})
        for host in r.get("burned", []):
            if host in instances:
                self.rec.instances[host] = instances[host]
            else:
                self.rec.instances.pop(host, None)
            file = results / f"{host}.jsonl"
            if file.is_file():
                self.rec.results[host] = str(file)
            else:
                self.rec.results.pop(host, None)
            if saved.get(host):
                self.rec.host_reasons[host] = saved[host]
            else:
                self.rec.host_reasons.pop(host, None)
        for host in r.get("kept", []):
            # This round's copy holds what the round added to it (the fleet all-reduce, the fabric
            # rounds): the next round judges the host on that, not on the older file.
            file = results / f"{host}.jsonl"
            if file.is_file():
                self.rec.results[host] = str(file)
            if saved.get(host):
                self.rec.host_reasons[host] = saved[host]
        for x in r.get("replaced", []):
            if x["ok"]:
                self.rec.results.pop(x["node"], None)
                self.rec.host_reasons.pop(x["node"], None)
                self.rec.instances.pop(x["node"], None)
        for host in r.get("inventory", []):
            self.rec.slots.setdefault(host, host)
        r["phase"] = "done"
        r["ended"] = _stamp()
        timings = r.setdefault("timings_s", {})
        timings["total"] = round(timings.get("before_wait", 0.0) + self.clock.now() - t0, 3)
        self.save()


def _identities(
    hosts: Sequence[str], hostvars: Mapping[str, Mapping[str, Any]], var: str
) -> dict[str, str | None]:
    """Each host's `var`, where it is a well-formed identifier (ID_FORMATS); None where not."""
    fmt = ID_FORMATS.get(var)
    out: dict[str, str | None] = {}
    for host in hosts:
        value = hostvars.get(host, {}).get(var)
        text = None if isinstance(value, bool) or not isinstance(value, str | int) else str(value).strip()
        well_formed = text is not None and (
            fmt[0].fullmatch(text) is not None if fmt else 0 < len(text) <= 128 and text.isprintable()
        )
        out[host] = text if well_formed else None
    return out


def _no_identity(var: str, hosts: Sequence[str]) -> str:
    return (
        f"host var {var} missing or malformed on {', '.join(hosts)}: the bring-up tells a replacement "
        f"from the instance it replaces by it (`fleetforge inventory --stack-outputs` writes it)"
    )


def _wall_spent(budget: Budget, round_no: int) -> str:
    return (
        f"--max-wall {budget.max_wall_s:g} s spent during round {round_no}'s burn-in: nothing was "
        f"judged or replaced; --resume with a larger --max-wall redoes it"
    )


def _unreachable_only(v: NodeVerdict) -> bool:
    return bool(v.reasons) and all(
        x.rule == "missing" and x.message.startswith("unreachable: ") for x in v.reasons
    )


def _nothing_left(r: Mapping[str, Any], pending: Sequence[str] = ()) -> str:
    parts = [p["message"] for p in r.get("patterns", [])]
    parts += [f"the replacement for slot {slot} never joined the inventory" for slot in pending]
    parts += [f"{x['node']} not replaced: {x['why']}" for x in r.get("not_replaced", [])]
    return "the fleet is not READY and nothing is left to replace: " + "; ".join(parts)


def _run_summary(run: BurnIn) -> dict[str, Any]:
    keep = ("status", "rc", "problem", "timings_s", "limited_to", "artifacts")
    return {k: run.summary[k] for k in keep if k in run.summary} | {"problem": run.problem}


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")

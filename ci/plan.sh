#!/usr/bin/env bash
# ci/plan.sh SPEC OUT.md: `fleetforge spec check`, then the offline plan judged by the policy rules,
# as markdown in OUT.md for the job summary and the review comment. OUT.md is written whatever
# happens, so the reviewer always sees why a plan failed. Exit status: fleetforge's (0 clean,
# 1 policy violations, 65 invalid spec, 66 no spec, 69 Pulumi SDK missing).
set -euo pipefail

spec=${1:?usage: ci/plan.sh SPEC OUT.md}
out=${2:?usage: ci/plan.sh SPEC OUT.md}
fleetforge=${FLEETFORGE:-.venv/bin/fleetforge}

rc=0
"$fleetforge" spec check "$spec" || rc=$?
if [ "$rc" -ne 0 ]; then
  printf '## fleetforge plan\n\n**Spec check failed** (exit %s): the job log names every problem.\n' "$rc" >"$out"
  exit "$rc"
fi
"$fleetforge" plan "$spec" --markdown >"$out" || rc=$?
if [ ! -s "$out" ]; then
  printf '## fleetforge plan\n\n**Plan failed** (exit %s): see the job log.\n' "$rc" >"$out"
fi
exit "$rc"

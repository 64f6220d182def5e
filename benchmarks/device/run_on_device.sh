#!/usr/bin/env bash
# The one prepared GPU run (issue 16): on the lent H200 machine, from the repository root, with
# .whl/ carried (benchmarks/device/fetch_wheels.sh). Writes everything under $OUT:
#   burnin/device.jsonl       the standard-level burn-in's records (node "device"), one burn-in only
#   bench/figures.{jsonl,md}  ceilings before and after the burn-in, the burn-in's figures, the
#                             table; figures.jsonl is appended phase by phase as measured
#   env.txt, bench.log        versions, and the full output of the benchmark
# Exits with the benchmark's status (2: no CUDA device, 1: a burn-in figure missing, 124: timeout).
#
# Budget: one device call runs at most 600 s. Wheel install <= 30 s and env.txt <= 10 s, then the
# benchmark under `timeout 520`, killed 10 s later at worst: 570 s in all. The benchmark: ceilings
# ~45 s (each bounded at 150 s in the script), the standard level ~250-300 s (stress 120 s,
# efficiency 30 s, GEMM 4 dtypes x 5 s, copies, 2 GiB storage, start-ups), ceilings again ~45 s.
# Give the device call timeout_s=600.
set -euo pipefail
OUT="${OUT:-device-results}"
mkdir -p "$OUT/burnin" "$OUT/bench"
timeout 30 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || { echo "wheel install failed (run fetch_wheels.sh, carry .whl)"; exit 1; }
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
timeout 10 bash -c 'nvidia-smi; python3 -c "import torch, pydantic; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"pydantic\", pydantic.__version__)"' \
  > "$OUT/env.txt" 2>&1 || echo "env.txt incomplete (exit $?)" >> "$OUT/env.txt"
start=$(date +%s)
status=0
timeout -k 10 520 python3 benchmarks/device/gpu_standard_level.py --sku "${SKU:-auto}" --level standard \
  --out "$OUT" 2>&1 | tee "$OUT/bench.log" || status=${PIPESTATUS[0]}
echo "bench exit $status, wall $(( $(date +%s) - start )) s" >> "$OUT/bench.log"
echo "bench exit $status, wall $(( $(date +%s) - start )) s"
exit "$status"

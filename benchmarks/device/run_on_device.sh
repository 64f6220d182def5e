#!/usr/bin/env bash
# The one prepared GPU run (issue 16): on the lent H200 machine, from the repository root, with
# .whl/ carried (benchmarks/device/fetch_wheels.sh). Writes everything under $OUT:
#   burnin/device.jsonl     the CLI's standard-level burn-in with --sku auto (records, as on a node)
#   bench/figures.{jsonl,md}  burn-in figures beside plain-PyTorch ceilings and the catalog reference
#   env.txt, *.log          versions and the full output of each step
set -uo pipefail
OUT="${OUT:-device-results}"
mkdir -p "$OUT/burnin" "$OUT/bench"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
{ nvidia-smi; python3 -c 'import torch, pydantic; print("torch", torch.__version__, "cuda", torch.version.cuda, "pydantic", pydantic.__version__)'; } \
  > "$OUT/env.txt" 2>&1
start=$(date +%s)
timeout 300 python3 -m fleetforge.cli burnin --sku auto --level standard --out "$OUT/burnin" 2>&1 | tee "$OUT/burnin.log"
echo "burnin exit ${PIPESTATUS[0]}, wall $(( $(date +%s) - start )) s" | tee -a "$OUT/burnin.log"
timeout 240 python3 benchmarks/device/gpu_standard_level.py --sku "${SKU:-auto}" --level standard --out "$OUT/bench" 2>&1 \
  | tee "$OUT/bench.log"
echo "bench exit ${PIPESTATUS[0]}" | tee -a "$OUT/bench.log"

#!/usr/bin/env bash
# Issue 57's GPU checks on a machine with a CUDA GPU (docs/benchmarks/performance.md, "On a
# GPU"): the device benchmark (cuda, then the CPU) and a kin40k sweep of the device back end's
# methods on cuda (SWEEP_DEVICES=cuda,cpu adds the CPU: minutes more). About 10 minutes in all
# on an H200. Run from the repository's root:
#   bash scripts/gpu_check.sh <out_dir>
# Packages the machine lacks can be given as wheels in .whl/ (installed into /tmp/site).
# Each part has a time limit (BENCH_SECONDS, SWEEP_SECONDS); what it printed is kept either way,
# and the benchmark's rows measured so far too (it writes figures.json after each row). On an
# H200 the cuda part, to 131 072 rows, takes about 5 minutes and the CPU's 2-3: give
# BENCH_SECONDS=600 for both, or BENCH_ARGS="devices=[cuda]" for the GPU alone.
set -uo pipefail
out=${1:-outputs/gpu_check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, numpy, scipy, gpytorch, os
print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name(0))
print('numpy', numpy.__version__, 'scipy', scipy.__version__, 'gpytorch', gpytorch.__version__)
print('CPU cores', os.cpu_count())"
} 2>&1 | tee "$out/device.txt"
timeout "${BENCH_SECONDS:-480}" python3 -m pipeline.bench.device ${BENCH_ARGS:-} 2>&1 | tee "$out/bench_device.log"
cp outputs/bench_device/figures.json "$out/bench_device.json" 2>/dev/null
cp outputs/bench_device/device_seconds.png "$out/" 2>/dev/null
timeout "${SWEEP_SECONDS:-150}" python3 -m pipeline -m \
  algorithm=exact,cg,nystrom,sgma,gpytorch_sgpr algorithm.max_basis=512 dataset=kin40k \
  device="${SWEEP_DEVICES:-cuda}" sweep=kin40k_device cluster.n_workers=1 2>&1 \
  | tee "$out/kin40k_device.log"
python3 - "$out" <<'PY' 2>&1 | tee -a "$out/kin40k_device.log"
import sys
from pipeline.results.consolidate import load
ds = load("outputs/kin40k_device/results.zarr")
names = [v for v in ("status", "final_test_rmse", "final_test_nlpd", "final_seconds",
                     "final_cpu_seconds") if v in ds]
table = ds[names].to_dataframe().reset_index()
table.to_csv(f"{sys.argv[1]}/kin40k_device.csv", index=False)
print(table.to_string())
PY

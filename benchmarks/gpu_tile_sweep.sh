#!/usr/bin/env bash
# A short sweep of the tile size on the lent GPU machine: benchmarks/ict_cost.py's section (a)
# (TRL 1.16's fused head, the naive path and ours, side by side in each run) at the 1.5B and 0.5B
# shapes, once for each TOKENSxVOCAB given (default: the Triton default 4096x32768, then 151,936
# split evenly into 5 vocabulary tiles of 30,464 ids (a multiple of 128) at 4,096, 8,192 and 2,048
# rows, then 4 tiles of 38,016). Each run is bounded by RUN_LIMIT seconds (default 40), its
# --budget 4/5 of that (its timed rounds stop in time; a run cut short by the limit still prints
# and saves the models it finished); the whole by the run's own limit. Lands in $OUT:
# tile_sweep.log (all output), tiles_<size>.json and, where nvidia-smi exists, gpu_clocks.csv
# (the SM clock and power every 20 ms; per row: python benchmarks/gpu_clocks.py tiles_<size>.json
# gpu_clocks.csv).
#   run(command="bash benchmarks/gpu_tile_sweep.sh", carry=[".whl"], timeout_s=200)
# On a CPU, tiny: OUT=/tmp/out bash benchmarks/gpu_tile_sweep.sh --tiny --device cpu --models tiny
# (sizes from TILE_SIZES, e.g. TILE_SIZES="8x1000 16x500").
# benchmarks/gpu_recheck.sh runs it with its own sizes, more rounds and PROFILE_PATHS (below).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/tile_sweep_out}
source benchmarks/gpu_env.sh  # $OUT, the scratch folder, the wheels, the environment, log_clocks
log_clocks "$OUT/gpu_clocks.csv"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--device cuda --models 1.5b,0.5b)
read -r -a sizes <<< "${TILE_SIZES:-4096x32768 4096x30464 8192x30464 2048x30464 4096x38016}"
limit=${RUN_LIMIT:-40}
status=0
for size in "${sizes[@]}"; do
  echo "## --tile-size $size" | tee -a "$OUT/tile_sweep.log"
  timeout -k 5 "$limit" python3 benchmarks/ict_cost.py --sections a --tile-size "$size" --budget $(( limit * 4 / 5 )) \
    --json "$OUT/tiles_$size.json" "${args[@]}" 2>&1 | tee -a "$OUT/tile_sweep.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
# then, with PROFILE_PATHS set (e.g. grpo,trl,grpo,trl), the torch profiler over those calls in that
# order at the 1.5B shape (PROFILE_ARGS, default --width 1536), into stats_profile.log: whether a
# call's kernels run slower for the call before it
if [ -n "${PROFILE_PATHS:-}" ]; then
  read -r -a profile_args <<< "${PROFILE_ARGS:---width 1536}"
  timeout -k 5 "$limit" python3 benchmarks/stats_profile.py --rows 8 --paths "$PROFILE_PATHS" \
    "${profile_args[@]}" > "$OUT/stats_profile.log" 2>&1 || status=1
fi
exit "$status"

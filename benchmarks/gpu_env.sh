# Sourced by the scripts a lent GPU machine runs (gpu_run.sh, gpu_tile_sweep.sh, gpu_recheck.sh),
# from the repository root: makes $OUT and the scratch folder (GPU_RUN_SCRATCH, default /tmp),
# installs the wheels carried in GPU_RUN_WHEELS (default .whl; none: the packages installed here)
# into $SCRATCH/site, once for a script and the scripts it starts (GPU_ENV_SITE says where they
# went), and exports the environment every step runs in (offline, unbuffered).
SCRATCH=${GPU_RUN_SCRATCH:-/tmp}
WHEELS=${GPU_RUN_WHEELS:-.whl}
mkdir -p "$OUT" "$SCRATCH"
if [ "${GPU_ENV_SITE:-}" = "$SCRATCH/site" ]; then
  :  # installed by the script that started this one
elif compgen -G "$WHEELS/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SCRATCH/site" \
    "$WHEELS"/*.whl || { echo "wheel install failed"; exit 1; }
else
  echo "no wheels in $WHEELS/: the packages installed here"
fi
export GPU_ENV_SITE=$SCRATCH/site PYTHONPATH=$SCRATCH/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1

# log_clocks FILE: nvidia-smi's samples of the GPU's SM clock (MHz), power (W) and temperature (C)
# every 20 ms, timestamps in UTC, into FILE while the script runs (where nvidia-smi exists), for
# benchmarks/gpu_clocks.py to set beside each row's timed calls.
log_clocks() {
  command -v nvidia-smi > /dev/null || { echo "no nvidia-smi: no clock log"; return 0; }
  TZ=UTC nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits \
    -lms 20 > "$1" 2>&1 &
  CLOCKS_PID=$!
  trap 'kill "$CLOCKS_PID" 2> /dev/null' EXIT
}

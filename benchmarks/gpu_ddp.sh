#!/usr/bin/env bash
# Data-parallel PPO on the GPU machine: 1 rank, then 2 ranks (torchrun, NCCL) sharing the one
# GPU, about SECONDS each; prints and saves frames/s (all ranks) from each run's metrics.csv.
#
#   OUT=gpu_results SECONDS_PER_RUN=60 bash benchmarks/gpu_ddp.sh
#   DEVICE=cpu SECONDS_PER_RUN=20 bash benchmarks/gpu_ddp.sh   # smoke test without a GPU (gloo)
#
# Each run is stopped with SIGTERM after SECONDS_PER_RUN (the recipe checkpoints and exits
# 143), so the figure is the run's own perf/fps at its last logged update.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_results}
DEVICE=${DEVICE:-cuda}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-60}
PY=${PY:-python}
mkdir -p "$OUT"
cores=$(nproc)

common=(--env.game Pong --total-frames 1000000000 --device "$DEVICE" --log.no-progress
        --log.no-tensorboard --log.eval-episodes 0 --log.checkpoint-every-frames 1000000000)

run() {  # name ranks envs-per-rank
    local name=$1 ranks=$2 envs=$3 dir="$OUT/ddp-$1"
    rm -rf "$dir"
    local args=("${common[@]}" --env.num-envs "$envs" --collector.steps-per-batch $((envs * 128))
                --threads.sim-threads $((cores / ranks)) --run-dir "$dir")
    if [ "$ranks" = 1 ]; then
        timeout -s TERM "$SECONDS_PER_RUN" "$PY" recipes/ppo_atari.py "${args[@]}" \
            > "$dir.log" 2>&1
    else
        timeout -s TERM "$SECONDS_PER_RUN" "$PY" -m torch.distributed.run \
            --nproc-per-node "$ranks" recipes/ppo_atari.py "${args[@]}" > "$dir.log" 2>&1
    fi
    "$PY" - "$dir" "$name" "$ranks" <<'EOF' | tee -a "$OUT/ddp_fps.txt"
import csv, sys
run_dir, name, ranks = sys.argv[1:]
rows = list(csv.DictReader(open(f"{run_dir}/metrics.csv")))
last = rows[-1]
print(f"{name}: {ranks} rank(s), {last['frames']} frames in {float(last['time_s']):.0f} s, "
      f"{float(last['perf/fps']):.0f} frames/s (all ranks), {len(rows)} updates")
EOF
}

: > "$OUT/ddp_fps.txt"
run one-rank 1 $((cores))
run two-ranks 2 $((cores / 2))

#!/usr/bin/env bash
# One prepared GPU benchmark run: under 8 minutes on a 16-core H200 machine, no internet needed.
#
#   bash benchmarks/gpu.sh                      # results in ./gpu_results
#   OUT=/some/dir bash benchmarks/gpu.sh
#   DEVICE=cpu QUICK=1 bash benchmarks/gpu.sh   # smoke test on a CPU-only machine (~3 min)
#
# 1. env, collection and PPO/A2C training throughput with the policy and learner on $DEVICE and
#    as many simulators as cores, and bf16 against fp32 (PPO and DQN updates, the acting step;
#    benchmarks.precision) (python -m benchmarks.run; table in run.txt, rows in run.json);
# 2. with the time left (BUDGET_S in all, minus a margin), PPO on Pong until the mean return of
#    the last 100 episodes reaches 18 (python -m benchmarks.time_to_score; time_to_score.json,
#    metrics.csv, episodes.csv);
# 3. SCALING=1 adds the simulators x workers scan (scaling.csv, scaling.png) before step 2;
# 4. COMPILE=1 adds PPO's learner speed eager vs --compile.loss vs --compile.policy vs
#    --compile.cudagraphs next to the plain loop (python -m benchmarks.learner_speed;
#    compile.txt, compile.json; about 4-5 minutes, so raise BUDGET_S or expect a shorter step 2).
#
# Knobs (environment): OUT, DEVICE (cuda), QUICK (0), BUDGET_S (470), SIMS (cores),
# WORKERS (4), PONG_ENVS (2 x cores), PONG_TARGET (18), SCALING (0), COMPILE (0),
# PYTHON (.venv/bin/python if present).
# Every file lands flat in $OUT (at most 10 files): gpu.log, run.txt, run.json,
# time_to_score.json, metrics.csv, episodes.csv, with SCALING=1 scaling.csv, scaling.png, and
# with COMPILE=1 compile.txt, compile.json.
set -uo pipefail

OUT=$(realpath -m "${OUT:-./gpu_results}")  # relative to the caller's folder
cd "$(dirname "$0")/.." || exit 1
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
BUDGET_S=${BUDGET_S:-470}
CORES=$(nproc)
SIMS=${SIMS:-$CORES}
WORKERS=${WORKERS:-4}
PONG_ENVS=${PONG_ENVS:-$((2 * CORES))}
PONG_TARGET=${PONG_TARGET:-18}
SCALING=${SCALING:-0}
COMPILE=${COMPILE:-0}
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
mkdir -p "$OUT"
LOG="$OUT/gpu.log"
: >"$LOG"
say() { echo "[gpu.sh $((SECONDS))s] $*" | tee -a "$LOG"; }
left() { echo $((BUDGET_S - SECONDS)); }

say "OUT=$OUT DEVICE=$DEVICE QUICK=$QUICK BUDGET_S=$BUDGET_S cores=$CORES sims=$SIMS workers=$WORKERS"
{
    date -u
    uname -a
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    "$PYTHON" -c "import torch, torchrl, ale_py; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'torchrl', torchrl.__version__, 'ale_py', ale_py.__version__)"
} >>"$LOG" 2>&1

# 1. throughput: env, collection, PPO/A2C training (one table).
if [ "$QUICK" = 1 ]; then
    RUN_ARGS=(--quick --sections env collect train precision --recipes ppo a2c)
    RUN_LIMIT=240
else
    W=$WORKERS
    [ "$W" -gt "$SIMS" ] && W=$SIMS
    RUN_ARGS=(--sections env collect train precision --games Pong --num-envs "$SIMS" --workers "$W"
        --seconds 4 --collect-rounds 4 --train-rounds 1 --recipes ppo a2c --train-envs "$SIMS")
    RUN_LIMIT=300
fi
say "benchmarks.run ${RUN_ARGS[*]} (limit ${RUN_LIMIT}s)"
timeout -k 10 "$RUN_LIMIT" "$PYTHON" -m benchmarks.run --device "$DEVICE" "${RUN_ARGS[@]}" \
    --json "$OUT/run.json" >"$OUT/run.txt" 2>>"$LOG"
say "benchmarks.run exit $? ($(left)s left)"

# 3. optional scaling scan.
if [ "$SCALING" = 1 ]; then
    if [ "$QUICK" = 1 ]; then SC_ARGS=(--quick); else SC_ARGS=(--max-sims $((4 * CORES)) --workers 0 2 4 8 --seconds 2); fi
    say "benchmarks.scaling ${SC_ARGS[*]}"
    SC_TMP=$(mktemp -d)
    timeout -k 10 150 "$PYTHON" -m benchmarks.scaling --device "$DEVICE" --out "$SC_TMP" "${SC_ARGS[@]}" >>"$LOG" 2>&1
    say "benchmarks.scaling exit $?"
    cp "$SC_TMP"/scaling.csv "$SC_TMP"/scaling.png "$OUT"/ 2>/dev/null
    rm -rf "$SC_TMP"
fi

# 4. optional compile comparison (PPO, SpaceInvaders, learner and policy on $DEVICE).
if [ "$COMPILE" = 1 ]; then
    CONFIGS=("plain@$CORES" recipe recipe+compile recipe+compile-policy)
    [[ "$DEVICE" == cuda* ]] && CONFIGS+=(recipe+cudagraphs recipe+eager)
    BATCHES=6
    [ "$QUICK" = 1 ] && BATCHES=3
    say "learner_speed compile comparison: ${CONFIGS[*]}"
    timeout -k 10 330 "$PYTHON" -m benchmarks.learner_speed --algos ppo --device "$DEVICE" \
        --batches "$BATCHES" --warmup 2 --only "${CONFIGS[@]}" --json "$OUT/compile.json" \
        >"$OUT/compile.txt" 2>>"$LOG"
    say "learner_speed exit $? ($(left)s left)"
fi

# 2. PPO Pong to a mean return of $PONG_TARGET with the time left.
PONG_BUDGET=$(($(left) - 30))
[ "$QUICK" = 1 ] && [ "$PONG_BUDGET" -gt 40 ] && PONG_BUDGET=40
if [ "$PONG_BUDGET" -ge 30 ]; then
    if [ "$QUICK" = 1 ]; then
        PONG_FLAGS=(--env.num-envs 8 --collector.steps-per-batch 256 --ppo.minibatches 4)
    else
        # The paper's deterministic ALE (no sticky actions); T = 128 steps per simulator.
        PONG_FLAGS=(--env.num-envs "$PONG_ENVS" --collector.steps-per-batch $((PONG_ENVS * 128))
            --ppo.minibatches 4 --env.sticky-actions 0 --total-frames 10000000)
    fi
    TTS_TMP=$(mktemp -d)
    say "time_to_score: PPO Pong to $PONG_TARGET within ${PONG_BUDGET}s: ${PONG_FLAGS[*]}"
    timeout -k 10 $((PONG_BUDGET + 40)) "$PYTHON" -m benchmarks.time_to_score --out "$TTS_TMP" \
        --algo ppo --game Pong --target "$PONG_TARGET" --budget-s "$PONG_BUDGET" \
        --device "$DEVICE" --python "$PYTHON" -- "${PONG_FLAGS[@]}" >>"$LOG" 2>&1
    say "time_to_score exit $?"
    cp "$TTS_TMP"/time_to_score.json "$TTS_TMP"/metrics.csv "$TTS_TMP"/episodes.csv "$OUT"/ 2>/dev/null
    tail -n 30 "$TTS_TMP/recipe.log" >>"$LOG" 2>/dev/null
    rm -rf "$TTS_TMP"
else
    say "no time left for the Pong run (${PONG_BUDGET}s)"
fi
say "done in ${SECONDS}s; files: $(find "$OUT" -maxdepth 1 -type f -printf '%f ')"

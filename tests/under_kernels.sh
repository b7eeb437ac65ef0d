#!/usr/bin/env bash
# Runs tests under each CPU kernel setting this machine can use, to show that no result depends
# on the kernel a host picks: ATEN_CPU_CAPABILITY=default, avx2 and avx512 (where the CPU has
# it), oneDNN capped at SSE4.1 (ONEDNN_MAX_CPU_ISA: convolutions), and two torch threads
# (ACCELRL_TEST_THREADS=2; the suite runs with one otherwise).
#
#   bash tests/under_kernels.sh              the tests marked `numerics` (about a minute each)
#   bash tests/under_kernels.sh --all        the whole default suite under each setting
#   bash tests/under_kernels.sh -- ARGS...   these pytest arguments under each setting
#
# PYTHON picks the interpreter (default: .venv/bin/python, else python3). Exits non-zero when
# any setting fails, after running them all; the last lines list each setting's result.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}

case "${1:-}" in
    --all) shift; args=(-q "$@") ;;
    --) shift; args=("$@") ;;
    "") args=(-q -m "numerics and not slow") ;;
    *) echo "usage: bash tests/under_kernels.sh [--all | -- PYTEST_ARGS...]" >&2; exit 2 ;;
esac

settings=("ATEN_CPU_CAPABILITY=default" "ATEN_CPU_CAPABILITY=avx2")
if grep -q avx512f /proc/cpuinfo 2>/dev/null; then
    settings+=("ATEN_CPU_CAPABILITY=avx512")
fi
settings+=("ONEDNN_MAX_CPU_ISA=SSE41" "ACCELRL_TEST_THREADS=2")

results=()
status=0
for setting in "${settings[@]}"; do
    echo "== $setting: $PYTHON -m pytest ${args[*]}"
    if env "$setting" "$PYTHON" -m pytest "${args[@]}"; then
        results+=("passed  $setting")
    else
        results+=("FAILED  $setting")
        status=1
    fi
done
printf '%s\n' "${results[@]}"
exit $status

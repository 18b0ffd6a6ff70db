#!/usr/bin/env bash
# The fault suite: run every scenario in tests/faults/scenarios (or those named as
# arguments), each with a time bound, within a total budget; print one line per scenario
# and "N passed, M failed" (", K skipped"). Exit non-zero if any failed.
#
# Each scenario builds its own cluster in network namespaces (see lib.sh), logs its seed
# (replay a run with FX_SEED=...), and keeps its temp dir (daemon logs, histories) on
# failure. Output of scenario X goes to $FAULTS_LOG_DIR/X.log.
#
# A scenario that exits 77 is skipped, or failed in strict mode (CI=true, CAIRN_STRICT=1)
# unless it printed a SKIP-KERNEL line naming a VM scenario (tests/support/skips.sh). When
# scenarios ran and all of them skipped, the suite exits 77 too (never a pass), repeating
# a SKIP-KERNEL line only if every skip was one.
#
# Env: CAIRN_BIN_DIR, FAULTS_TIMEOUT (per scenario, default 150 s), FAULTS_BUDGET (total,
#      default 900 s: nine scenarios of 25-120 s on a loaded 2-core machine), FAULTS_LOG_DIR (default build/test-logs/faults), FX_SEED.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export CAIRN_BIN_DIR=${CAIRN_BIN_DIR:-$repo/backend/target/debug}
timeout_s=${FAULTS_TIMEOUT:-150}
budget=${FAULTS_BUDGET:-900}
logdir=${FAULTS_LOG_DIR:-$repo/build/test-logs/faults}
mkdir -p "$logdir"
# shellcheck source=tests/support/skips.sh
. "$repo/tests/support/skips.sh"

# The checker's own tests first: a broken checker would pass anything.
if ! (cd "$here" && python3 -m unittest -q test_lincheck >"$logdir/test_lincheck.log" 2>&1); then
    echo "FAIL lincheck unit tests (see $logdir/test_lincheck.log)"
    exit 1
fi

scenarios=()
if (($#)); then
    for s in "$@"; do
        [[ -f $s ]] || s=$here/scenarios/${s%.sh}.sh
        scenarios+=("$s")
    done
else
    scenarios=("$here"/scenarios/*.sh)
fi

# Scenarios of features not built yet, each with its reason (reviewed; remove a line once
# the feature lands). Listed scenarios still run when named on the command line.
known=$here/known-failures.txt
passed=0 failed=0 skipped=0 start=$SECONDS kernel_skips=()
for s in "${scenarios[@]}"; do
    name=$(basename "$s" .sh)
    if ((!$#)) && [[ -f $known ]] && grep -q "^${name}[[:space:]]*#" "$known"; then
        echo "skip $name (known failure: $(grep "^${name}[[:space:]]*#" "$known" | sed 's/^[^#]*# *//'))"
        skipped=$((skipped + 1))
        continue
    fi
    left=$((budget - (SECONDS - start)))
    if ((left < 30)); then
        echo "FAIL $name (not run: the suite's ${budget}s budget is spent)"
        failed=$((failed + 1))
        continue
    fi
    t=$timeout_s
    ((t > left)) && t=$left
    t0=$SECONDS
    # SIGTERM first so the scenario's trap tears its namespaces down.
    export FX_ID=$$$((passed + failed + skipped))
    timeout -k 20 "$t" bash "$s" >"$logdir/$name.log" 2>&1
    rc=$?
    # A scenario killed before its trap finished leaves namespaces (and the daemons in
    # them) behind: stop and delete them.
    for ns in $(ip netns list 2>/dev/null | awk -v p="cf$FX_ID-" 'index($1, p) == 1 { print $1 }'); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    dt=$((SECONDS - t0))
    seed=$(grep -o 'seed=[0-9]*' "$logdir/$name.log" | head -1)
    case $rc in
    0)
        echo "ok   $name (${dt}s, $seed)"
        passed=$((passed + 1))
        ;;
    77)
        if why=$(skips_kernel_line "$logdir/$name.log" "$repo"); then
            echo "skip $name: ${why#SKIP-KERNEL: }"
            kernel_skips+=("$why")
            skipped=$((skipped + 1))
        elif skips_strict; then
            echo "FAIL $name: skipped, and a skip fails under CI/CAIRN_STRICT unless it is SKIP-KERNEL naming a VM scenario: $(grep -m1 '^SKIP' "$logdir/$name.log")"
            failed=$((failed + 1))
        else
            echo "skip $name: $(grep -m1 '^SKIP' "$logdir/$name.log")"
            skipped=$((skipped + 1))
        fi
        ;;
    *)
        why=$(grep -m1 '^FAIL - ' "$logdir/$name.log")
        ((rc == 124)) && why="timed out after ${t}s"
        echo "FAIL $name (${dt}s, $seed): ${why:-exit $rc} -- log $logdir/$name.log"
        failed=$((failed + 1))
        ;;
    esac
done
summary="$passed passed, $failed failed"
((skipped)) && summary+=", $skipped skipped"
echo "$summary ($((SECONDS - start))s)"
((failed == 0)) || exit 1
if ((passed == 0 && skipped > 0)); then
    # Nothing ran: a skip, not a pass (tests/run-all.sh then decides whether it may pass).
    if ((${#kernel_skips[@]} == skipped)); then
        echo "${kernel_skips[0]}"
    else
        echo "SKIP - every fault scenario skipped (see above)"
    fi
    exit 77
fi

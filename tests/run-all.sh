#!/usr/bin/env bash
# Run every test suite under tests/ and print one line per suite, then a closing line
# "N passed, M failed" (", K skipped" when some skipped). Exit non-zero if any failed.
#
# A suite is a *.sh file directly in one of SUITE_DIRS (default: integration posix nfs smb iscsi ha faults appliance), not
# named lib*.sh or _*.sh. It passes with exit 0, is skipped with exit 77 (the automake
# convention: what it needs is missing here), and fails otherwise, or after SUITE_TIMEOUT
# seconds (a suite that needs longer says so in a line "# suite-timeout: SECONDS" of its
# own; one with a line "# run-by: make TARGET" runs only when named). Each suite's output goes to build/test-logs/DIR-NAME.log; a failure prints its
# tail. Arguments, if any, name suites to run (paths or DIR/NAME).
#
# Strict mode (CI=true, or CAIRN_STRICT=1; CAIRN_STRICT=0 turns it off): a skip fails the
# run, unless the suite printed, before exiting 77, a line
#     SKIP-KERNEL: <what this kernel lacks> (covered by make vm-test SCENARIO=<name>)
# naming an existing tests/vm/scenarios/<name>.sh (`skip_kernel` in tests/integration/lib.sh
# prints it). A missing package, tool or privilege is a plain `skip`: counted as skipped
# on a developer's machine, failed in CI. See tests/support/skips.sh, docs/operations.md.
#
# Env: CAIRN_BIN_DIR (dir with cairnd, cairn, mount-cairn; default backend/target/debug),
#      SUITE_DIRS, SUITE_TIMEOUT (default 1200), TEST_LOG_DIR, VERBOSE=1 (stream output),
#      CI, CAIRN_STRICT.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# shellcheck source=scripts/common.sh
. "$repo/scripts/common.sh"
CAIRN_LOG_TAG=run-all
export CAIRN_BIN_DIR=${CAIRN_BIN_DIR:-$repo/backend/target/debug}
SUITE_DIRS=${SUITE_DIRS:-integration posix nfs smb iscsi ha faults appliance}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-1200}
TEST_LOG_DIR=${TEST_LOG_DIR:-$repo/build/test-logs}
TEST_TMP_ROOT=${TEST_TMP_ROOT:-$repo/build/test-tmp}
mkdir -p "$TEST_LOG_DIR" "$TEST_TMP_ROOT"
# TLS (docs/security.md): every cairnd a suite starts takes its node certificate from one
# test cluster CA, which the first one creates here with the admin credential; clients
# (cairn, mount.cairn, the gateways' libcairn) connect with that admin credential.
export CAIRN_CA_DIR=${CAIRN_CA_DIR:-$TEST_TMP_ROOT/ca}
export CAIRN_CREDENTIALS=${CAIRN_CREDENTIALS:-$CAIRN_CA_DIR/admin.pem}

# sweep DIR: after a suite, unmount whatever is still mounted under DIR and stop every
# process whose command line names DIR (a suite killed by the timeout had no chance to
# run its own cleanup). Returns 1 if it found anything.
sweep() {
    local dir=$1 found=0 m pid
    while read -r m; do
        found=1
        fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r)
    for pid in /proc/[0-9]*; do
        pid=${pid#/proc/}
        [[ $pid != "$$" ]] || continue
        tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$dir/" || continue
        found=1
        stop_pid "$pid" "$dir/" 10 || true
    done
    return $((found))
}

# shellcheck source=tests/support/skips.sh
. "$repo/tests/support/skips.sh"
strict=0
skips_strict && strict=1

suites=()
if (($#)); then
    for s in "$@"; do
        [[ -f $s ]] || s=$repo/tests/$s
        [[ -f $s ]] || s=$s.sh
        [[ -f $s ]] || {
            echo "run-all: no suite $1" >&2
            exit 2
        }
        suites+=("$s")
    done
else
    for d in $SUITE_DIRS; do
        for s in "$repo/tests/$d"/*.sh; do
            [[ -f $s ]] || continue
            case $(basename "$s") in lib*.sh | _*) continue ;; esac
            # A suite with a line "# run-by: make TARGET" runs only when named (that
            # target names it): the appliance image build and boot take too long for CI.
            grep -q '^# run-by: make ' "$s" && continue
            suites+=("$s")
        done
    done
fi

passed=0 failed=0 skipped=0 failed_names=()
for s in "${suites[@]}"; do
    name=$(basename "$(dirname "$s")")/$(basename "$s" .sh)
    log=$TEST_LOG_DIR/${name//\//-}.log
    start=$SECONDS
    # Suites that use tests/integration/lib.sh put their temp dirs here, so that a suite
    # killed by the timeout can be cleaned up after.
    tmp=$TEST_TMP_ROOT/${name//\//-}
    rm -rf "$tmp"
    mkdir -p "$tmp"
    export CAIRN_TEST_TMP=$tmp
    limit=$SUITE_TIMEOUT
    own=$(sed -n 's/^# suite-timeout: \([0-9][0-9]*\)$/\1/p' "$s" | head -n1)
    [[ -z $own ]] || limit=$own
    if [[ ${VERBOSE:-} == 1 ]]; then
        timeout -k 30 "$limit" bash "$s" </dev/null 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
    else
        timeout -k 30 "$limit" bash "$s" </dev/null >"$log" 2>&1
        rc=$?
    fi
    took=$((SECONDS - start))
    if ! sweep "$tmp"; then
        echo "run-all: $name left mounts or processes behind (cleaned up)" >>"$log"
        ((rc == 0)) && rc=1
    fi
    case $rc in
    0)
        passed=$((passed + 1))
        echo "PASS  $name (${took}s)"
        ;;
    77)
        if why=$(skips_kernel_line "$log" "$repo"); then
            skipped=$((skipped + 1))
            echo "SKIP  $name: ${why#SKIP-KERNEL: }"
        elif ((strict)); then
            failed=$((failed + 1))
            failed_names+=("$name")
            echo "FAIL  $name (skipped, and a skip fails under CI/CAIRN_STRICT unless it is SKIP-KERNEL naming a VM scenario: $(grep -m1 -i 'skip' "$log" || echo 'exit 77'); log $log)"
        else
            skipped=$((skipped + 1))
            echo "SKIP  $name: $(grep -m1 -i 'skip' "$log" || echo 'exit 77')"
        fi
        ;;
    *)
        failed=$((failed + 1))
        failed_names+=("$name")
        [[ $rc == 124 || $rc == 137 ]] && why="timed out after ${limit}s" || why="exit $rc"
        echo "FAIL  $name ($why, ${took}s; log $log)"
        if [[ ${VERBOSE:-} != 1 ]]; then
            # The suite's own verdict first (the daemon logs dumped on failure would
            # push it out of the tail), then the tail.
            grep -E '^(FAIL - |passes on stock|not ok )' "$log" | head -n 20 | sed 's/^/    ! /'
            tail -n 40 "$log" | sed 's/^/    | /'
        fi
        ;;
    esac
done

((failed)) && echo "failed suites: ${failed_names[*]}"
if ((skipped)); then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
((failed == 0))

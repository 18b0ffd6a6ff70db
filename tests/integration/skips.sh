#!/usr/bin/env bash
# A skip must not pass CI: tests/run-all.sh and tests/faults/run.sh run on stand-in suites
# and scenarios (a pass, a skip for a missing tool, a SKIP-KERNEL naming a VM scenario that
# exists, one naming none) with and without strict mode (CI=true, CAIRN_STRICT=1), and
# their verdicts and closing lines are checked. See tests/support/skips.sh. A few seconds.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

T=$(mktemp -d "${CAIRN_TEST_TMP:-${TMPDIR:-/tmp}}/skips.XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/fake" "$T/logs" "$T/tmp"
stand_in() { # NAME LINE RC
    printf '#!/usr/bin/env bash\necho "%s"\nexit %s\n' "$2" "$3" >"$T/fake/$1.sh"
}
stand_in pass "ok - nothing to do" 0
stand_in plain "SKIP - frobnicate is not installed (a stand-in tool)" 77
stand_in kernel "SKIP-KERNEL: target_core_user (covered by make vm-test SCENARIO=iscsi)" 77
stand_in nocover "SKIP-KERNEL: a kernel feature (covered by make vm-test SCENARIO=no-such-scenario)" 77
stand_in guest "SKIP-KERNEL: a kernel feature (covered by make vm-test SCENARIO=iscsi-guest)" 77
fakes=("$T"/fake/{pass,plain,kernel,nocover,guest}.sh)

# run_all ENV...: tests/run-all.sh on the stand-ins (those in $fakes); prints its output
# and "rc=N".
run_all() {
    local rc=0 out
    out=$(env -u CI -u CAIRN_STRICT "$@" TEST_LOG_DIR="$T/logs" TEST_TMP_ROOT="$T/tmp" \
        bash "$CL_REPO/tests/run-all.sh" "${fakes[@]}" 2>&1) || rc=$?
    printf '%s\nrc=%s\n' "$out" "$rc"
}

out=$(run_all)
assert_eq "1 passed, 0 failed, 4 skipped" "$(tail -n 2 <<<"$out" | head -n 1)" "run-all, not strict: every skip is a skip"
assert_eq rc=0 "$(tail -n 1 <<<"$out")" "run-all, not strict: passes"

for mode in CI=true CAIRN_STRICT=1; do
    out=$(run_all "$mode")
    assert_eq "1 passed, 3 failed, 1 skipped" "$(tail -n 2 <<<"$out" | head -n 1)" "run-all, $mode: the closing line"
    assert_eq rc=1 "$(tail -n 1 <<<"$out")" "run-all, $mode: fails"
    grep -q '^FAIL  fake/plain (skipped' <<<"$out" || fail "run-all, $mode: a skip for a missing tool did not fail: $out"
    grep -q '^FAIL  fake/nocover (skipped' <<<"$out" || fail "run-all, $mode: a SKIP-KERNEL naming no VM scenario did not fail"
    grep -q '^FAIL  fake/guest (skipped' <<<"$out" || fail "run-all, $mode: a SKIP-KERNEL naming a guest helper did not fail"
    grep -qF 'SKIP  fake/kernel: target_core_user (covered by make vm-test SCENARIO=iscsi)' <<<"$out" ||
        fail "run-all, $mode: the kernel skip is not reported as a skip: $out"
done
pass "run-all, CI=true / CAIRN_STRICT=1: only SKIP-KERNEL naming a VM scenario may skip"
fakes=("$T"/fake/{pass,plain}.sh)
out=$(run_all CI=true CAIRN_STRICT=0)
assert_eq rc=0 "$(tail -n 1 <<<"$out")" "run-all, CI=true CAIRN_STRICT=0: strict mode off"

# tests/faults/run.sh: scenarios are run by path; its own checker tests run first.
faults() { # ENV... -- SCENARIOS...
    local envs=() rc=0 out
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    out=$(env -u CI -u CAIRN_STRICT "${envs[@]}" FAULTS_LOG_DIR="$T/flogs" \
        bash "$CL_REPO/tests/faults/run.sh" "$@" 2>&1) || rc=$?
    printf '%s\nrc=%s\n' "$out" "$rc"
}
last() { tail -n "$1" <<<"$2" | head -n 1 | sed 's/ ([0-9]*s)$//'; }

out=$(faults -- "$T/fake/plain.sh" "$T/fake/kernel.sh")
assert_eq rc=77 "$(tail -n 1 <<<"$out")" "faults, not strict, every scenario skipped: a skip, not a pass"
assert_eq "0 passed, 0 failed, 2 skipped" "$(last 3 "$out")" "faults, not strict: the closing line"
out=$(faults -- "$T/fake/pass.sh" "$T/fake/plain.sh")
assert_eq rc=0 "$(tail -n 1 <<<"$out")" "faults, not strict, one passed and one skipped: passes"
assert_eq "1 passed, 0 failed, 1 skipped" "$(last 2 "$out")" "faults, not strict: passed and skipped counted"
out=$(faults CI=true -- "$T/fake/pass.sh" "$T/fake/plain.sh")
assert_eq rc=1 "$(tail -n 1 <<<"$out")" "faults, CI=true: a skip for a missing tool fails"
assert_eq "1 passed, 1 failed" "$(last 2 "$out")" "faults, CI=true: the closing line"
out=$(faults CI=true -- "$T/fake/kernel.sh")
assert_eq rc=77 "$(tail -n 1 <<<"$out")" "faults, CI=true, only kernel skips: exit 77"
assert_eq "SKIP-KERNEL: target_core_user (covered by make vm-test SCENARIO=iscsi)" "$(last 2 "$out")" \
    "faults, CI=true, only kernel skips: the SKIP-KERNEL line for run-all"
finish

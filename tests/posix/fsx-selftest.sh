#!/usr/bin/env bash
# Self-test of fsx.py on a local directory: a clean run must pass, and runs that corrupt
# one byte of the file under test behind fsx's back must be reported (exit 1, with the
# failing op number and a hex diff).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/fsx-selftest.XXXXXX")
trap 'rm -rf "$dir"' EXIT
pass=0 fail=0
check() { # NAME EXPECTED_RC [PATTERN] -- fsx args
    local name=$1 want=$2 pat=$3
    shift 4
    out=$(python3 "$here/tools/fsx.py" "$@" 2>&1)
    rc=$?
    if [[ $rc -eq $want ]] && { [[ -z $pat ]] || grep -q -- "$pat" <<<"$out"; }; then
        echo "ok   $name"; pass=$((pass + 1))
    else
        echo "FAIL $name (rc=$rc, want $want${pat:+, output matching \"$pat\"})"
        echo "$out" | tail -20; fail=$((fail + 1))
    fi
}
check "clean run passes" 0 "2000 ops passed" -- "$dir" --seed 1 --ops 2000
check "corruption at the last op is caught" 1 "FAILED at op" -- "$dir" --seed 2 --ops 500 --corrupt-at 500
check "mid-run corruption is caught with a hex diff" 1 "first difference at file offset" -- "$dir" --seed 9 --ops 3000 --corrupt-at 1500
check "failure names the seed" 1 "seed=3" -- "$dir" --seed 3 --ops 300 --corrupt-at 300
check "bad directory is a usage error" 2 "" -- /nonexistent-dir-for-fsx --seed 1 --ops 1
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]

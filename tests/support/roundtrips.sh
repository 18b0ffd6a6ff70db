# shellcheck shell=bash
# Round-trip budgets for tests/nfs/roundtrips.sh and tests/smb/roundtrips.sh: run a
# tests/bench/*-rt.sh script with RT_SUMMARY and check its per-file counts. Needs
# tests/integration/lib.sh (pass, fail, skip) sourced first.

RT_OUT=
RT_SUMMARY_FILE=

# rt_run SCRIPT FILES: run tests/bench/SCRIPT over FILES files; a skip of it is ours.
rt_run() {
    local rc
    RT_SUMMARY_FILE=$(mktemp "${TMPDIR:-/tmp}/cairn-rt.XXXXXX")
    RT_OUT=$(BENCH_FILES=$2 RT_SUMMARY=$RT_SUMMARY_FILE bash "$CL_REPO/tests/bench/$1" 2>&1)
    rc=$?
    echo "$RT_OUT" | grep -v '^lib: '
    ((rc != 77)) || skip "$1 skipped: $(tail -n 1 <<<"$RT_OUT")"
    ((rc == 0)) || fail "$1 failed ($rc): $(tail -n 5 <<<"$RT_OUT")"
    [[ -s $RT_SUMMARY_FILE ]] || fail "$1 wrote no round-trip summary"
}

# rt_of PHASE CALL: per-file round trips of CALL (or "total") in PHASE; 0 if absent.
rt_of() {
    awk -v p="$1" -v c="$2" '$1 == p && $2 == c { v = $3 } END { print v + 0 }' "$RT_SUMMARY_FILE"
}

# rt_budget PHASE CALL MAX WHAT: the per-file round trips of CALL in PHASE are at most MAX.
rt_budget() {
    local v
    v=$(rt_of "$1" "$2")
    if awk -v v="$v" -v m="$3" 'BEGIN { exit !(v <= m) }'; then
        pass "$4: $1 $2 $v <= $3 round trips per file"
    else
        fail "$4: $1 $2 $v round trips per file, budget $3"
    fi
}

rt_cleanup() { rm -f "$RT_SUMMARY_FILE"; }

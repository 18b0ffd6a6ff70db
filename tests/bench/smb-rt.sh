#!/usr/bin/env bash
# Backend round trips per small-file SMB operation through vfs_cairn (not part of make
# test): smbd runs with 'cairn:trace round trips = yes', which logs every libcairn call
# with the module function that made it and the round trips it cost. One smbclient
# session per phase (create = mput, read = mget, stat = ls, delete = del) over
# BENCH_FILES (50) 4 KiB files in one directory; a session doing only 'cd' is subtracted
# so the numbers are per file. Prints, per phase, the total and the breakdown by
# (module function, libcairn call).
#
# Env: BENCH_FILES (50), RT_SUMMARY=FILE: also write "PHASE total ROUND_TRIPS" and
# "PHASE CALL ROUND_TRIPS" lines (per file, CALL the libcairn call summed over the module
# functions) there (tests/smb/roundtrips.sh asserts on them).
set -uo pipefail
export SMB_CAIRN_EXTRA="cairn:trace round trips = yes"
# TLS (docs/security.md): the clusters' CA and the admin credential, as tests/run-all.sh sets them.
export CAIRN_CA_DIR=${CAIRN_CA_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)/build/bench-tmp/ca}
export CAIRN_CREDENTIALS=${CAIRN_CREDENTIALS:-$CAIRN_CA_DIR/admin.pem}
# shellcheck source=tests/smb/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../smb/lib.sh"
N=${BENCH_FILES:-50}

smb_up 1
work=$CL_DIR/rt
mkdir -p "$work/small" "$work/back"
for i in $(seq 1 "$N"); do head -c 4096 /dev/urandom >"$work/small/f$i"; done
smbc vol0 "mkdir small" >/dev/null || fail "mkdir small"

# trace_lines: every cairn-rt line logged so far by any smbd of this run
trace_lines() { cat "$SMB_DIR"/log/log.* "$SMB_LOG" 2>/dev/null | grep -h 'cairn-rt: ' ; }

# phase NAME CMDS: run one session, keep its trace lines in $work/NAME.rt
phase() {
    local name=$1 cmds=$2 before
    before=$(trace_lines | wc -l)
    smbc vol0 "$cmds" >"$work/$name.out" 2>&1 || fail "$name: $(tail -n 2 "$work/$name.out")"
    sleep 0.5 # the session's smbd logs its disconnect
    trace_lines | tail -n +"$((before + 1))" >"$work/$name.rt"
}
phase base "cd small"
phase create "cd small; lcd $work/small; prompt off; mput f*"
phase read "cd small; lcd $work/back; prompt off; mget f*"
phase stat "cd small; ls"
phase delete "cd small; del f*"

python3 - "$work" "$N" "${RT_SUMMARY:-}" <<'PY'
import collections, re, sys
work, n, summary = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = open(summary, "w") if summary else None
def load(name):
    c = collections.Counter()
    for line in open(f"{work}/{name}.rt"):
        m = re.search(r"cairn-rt: (\S+) (\S+) (\d+)", line)
        if m:
            c[(m.group(1), m.group(2))] += int(m.group(3))
    return c
base = load("base")
for ph in ("create", "read", "stat", "delete"):
    c = load(ph)
    c.subtract(base)
    total = sum(c.values())
    print(f"{ph}: {total / n:.2f} round trips per file ({n} files)")
    for (fn, call), v in sorted(c.items(), key=lambda kv: -kv[1]):
        if v > 0:
            print(f"    {v / n:6.2f}  {fn:28} {call}")
    if out:
        print(ph, "total", f"{total / n:.2f}", file=out)
        by_call = collections.Counter()
        for (fn, call), v in c.items():
            by_call[call] += v
        for call, v in by_call.items():
            print(ph, call, f"{v / n:.2f}", file=out)
PY
finish

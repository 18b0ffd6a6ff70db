#!/usr/bin/env bash
# Backend round trips per small-file NFS operation through Ganesha and FSAL_CAIRN (not part
# of make test; the NFS counterpart of smb-rt.sh). ganesha.nfsd runs with
# CAIRN_TRACE_RT=FILE, so libcairn logs every call the FSAL makes with the round trips it
# cost (docs/libcairn.md); tests/nfs/nfsbench.c (libnfs, NFSv3, one session) creates
# (CREATE + WRITE + COMMIT at close), stats, reads (open + READ + close) and deletes
# BENCH_FILES (100) 4 KiB files in 4-level paths on a 2 x 2 volume, and gives each phase's
# start and end, which split the trace. Prints, per phase, the round trips and libcairn
# calls per file and the breakdown by call.
#
# Env: BENCH_FILES (100), CAIRN_BIN_DIR (default: the debug build, as the test suites),
#      RT_SUMMARY=FILE: also write "PHASE total ROUND_TRIPS" and "PHASE CALL ROUND_TRIPS"
#      lines (per file) there (tests/nfs/roundtrips.sh asserts on them).
set -uo pipefail
# TLS (docs/security.md): the clusters' CA and the admin credential, as tests/run-all.sh sets them.
export CAIRN_CA_DIR=${CAIRN_CA_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)/build/bench-tmp/ca}
export CAIRN_CREDENTIALS=${CAIRN_CREDENTIALS:-$CAIRN_CA_DIR/admin.pem}
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../nfs/lib.sh"
N=${BENCH_FILES:-100}
[[ -f /usr/include/nfsc/libnfs.h ]] || skip "libnfs-dev is not installed"

nfs_suite_up vol0
NB=$CL_DIR/nfsbench
cc -Wall -Werror -O2 -pthread -o "$NB" "$CL_REPO/tests/nfs/nfsbench.c" -lnfs ||
    fail "building tests/nfs/nfsbench.c against libnfs-dev"
nfs_exports_default vol0 >"$CL_DIR/exports.conf"
TRACE=$CL_DIR/rt.trace
: >"$TRACE"
CAIRN_TRACE_RT=$TRACE nfs_gw_start g1 "$CL_DIR/exports.conf"
"$NB" small "$(nfs_url g1 /vol0)" "$N" 1 >"$CL_DIR/phases.jsonl" 2>"$CL_DIR/log/nfsbench.err" ||
    fail "nfsbench: $(tail -n 3 "$CL_DIR/log/nfsbench.err")"

python3 - "$TRACE" "$CL_DIR/phases.jsonl" "$N" "${RT_SUMMARY:-}" <<'PY'
import collections, json, re, sys
trace, phases, n, summary = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
out = open(summary, "w") if summary else None
lines = []
for line in open(trace):
    m = re.match(r"cairn-rt: (\S+) (\S+) (\d+) (\d+)", line)
    if m:
        lines.append((float(m.group(1)), m.group(2), int(m.group(3))))
for p in map(json.loads, open(phases)):
    rt, calls = collections.Counter(), collections.Counter()
    for t, op, k in lines:
        if p["t0"] <= t <= p["t1"]:
            rt[op] += k
            calls[op] += 1
    print(f"{p['op']}: {sum(rt.values()) / n:.2f} round trips, "
          f"{sum(calls.values()) / n:.2f} libcairn calls per file ({n} files)")
    for op, c in sorted(calls.items(), key=lambda kv: (-rt[kv[0]], -kv[1])):
        print(f"    {rt[op] / n:6.2f} rt {c / n:6.2f} calls  {op}")
    if out:
        print(p["op"], "total", f"{sum(rt.values()) / n:.2f}", file=out)
        for op in calls:
            print(p["op"], op, f"{rt[op] / n:.2f}", file=out)
PY
finish

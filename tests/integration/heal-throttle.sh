#!/usr/bin/env bash
# Heal throttling and resumable full crawls.
#
# 1. cluster.heal-bandwidth: n2 is killed, files are written, n2 comes back and catches up
#    at 256 KiB/s: the volume still converges (replicas identical) and the statistics of
#    n2's index crawl show the data copied, the limit and time spent waiting for it.
# 2. A full crawl cut by kill -9 continues from its saved position: n2's copies diverge
#    behind Cairn's back (a full heal copies only what differs), `heal full` at
#    128 KiB/s, n2 killed once its crawl saved a position, restarted: its crawl finishes
#    with "resumed after N directories" (N > 0) and counts every directory exactly once.
#
# Layout: 2 nodes, volume hv = one replica set of 2 bricks (b0 on n1, b1 on n2).
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_up 2 hv 2 2
mnt=$CL_MNT
b1=$CL_DIR/bricks/hv-b1

# stats_of_n2 PY_EXPR: PY_EXPR with `b` = n2's brick heal statistics (JSON).
stats_of_n2() { cl_heal_stats hv n2 "$1"; }
all_up() { cl_all_up hv; }

# write_tree DIR NDIRS NFILES: NDIRS directories of NFILES 64 KiB files each.
write_tree() {
    python3 - "$1" "$2" "$3" <<'PY' || fail "writing $1"
import os, sys
root, nd, nf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(root, exist_ok=True)
for d in range(nd):
    os.makedirs(f"{root}/d{d}", exist_ok=True)
    for f in range(nf):
        with open(f"{root}/d{d}/f{f}", "wb") as fh:
            fh.write(os.urandom(64 << 10))
            os.fsync(fh.fileno())
PY
}

replicas_identical() {
    diff -r "$CL_DIR/bricks/hv-b0/data" "$b1/data" >"$CL_DIR/diff.txt" 2>&1 ||
        fail "$1: bricks differ: $(head -5 "$CL_DIR/diff.txt")"
    pass "$1: replicas identical"
}

# --- bad values are refused ----------------------------------------------------------------
for bad in 10X fast -1M; do
    if cairn_cli volume set hv cluster.heal-bandwidth "$bad" 2>/dev/null; then
        fail "cluster.heal-bandwidth $bad was accepted"
    fi
done
pass "cluster.heal-bandwidth refuses 10X, fast and -1M"

# --- 1. throttled catch-up converges -------------------------------------------------------
cairn_cli volume set hv cluster.heal-bandwidth 256K || fail "volume set cluster.heal-bandwidth 256K"
cairn_cli volume info hv | grep -q 'cluster.heal-bandwidth: 256K' ||
    fail "volume info does not show cluster.heal-bandwidth: $(cairn_cli volume info hv)"
kill -9 "${CL_PID[n2]}"
CL_PID[n2]=
write_tree "$mnt/late" 4 6 # 1.5 MiB missed by n2
pass "wrote 24 files (1.5 MiB) with n2 down"
t0=$SECONDS
cl_start_node n2
wait_until 120 all_up || fail "n2's brick did not heal: $(cairn_cli volume status hv)"
echo "# catch-up of 1.5 MiB at 256 KiB/s took $((SECONDS - t0)) s (including n2's start)"
replicas_identical "throttled catch-up"
read -r bytes bw waited < <(stats_of_n2 \
    '" ".join(str(c[k]) for c in b["crawls"] if c["kind"] == "index" and c["ended"] for k in ("bytes", "bandwidth", "throttled_ms"))')
echo "# index crawl of n2: $bytes bytes copied, limit $bw bytes/s, waited $waited ms"
((bytes >= 24 * 65536)) || fail "index crawl copied $bytes bytes, expected >= 1.5 MiB"
assert_eq 262144 "$bw" "statistics show the bandwidth limit"
((waited > 1000)) || fail "the catch-up waited only $waited ms for the limit"
pass "the catch-up was throttled (waited $waited ms)"
cairn_cli volume heal hv statistics | grep -q 'Bandwidth limit (cluster.heal-bandwidth): 262144 bytes/s' ||
    fail "heal statistics do not show the limit"

# --- 2. a full crawl cut by kill -9 continues where it was ---------------------------------
write_tree "$mnt/tree" 30 2 # 31 directories with the root and late/ ... counted below
ndirs=$(find "$mnt" -type d | wc -l)
# A full heal copies only data that differs: make n2's copies of tree/ differ behind
# Cairn's back (n2 stopped; each file rewritten and marked dirty, so n2 rebuilds its
# checksums from the new bytes when it opens, as after a crash), so its crawl has data to
# copy at the limit.
wait_until 60 all_up || fail "bricks not up before diverging n2"
cl_stop_node n2 || fail "stop n2"
python3 - "$b1" <<'PY' || fail "diverging n2's copies"
import os, sys
b1 = sys.argv[1]
for d, _, files in os.walk(f"{b1}/data/tree"):
    for f in files:
        p = os.path.join(d, f)
        with open(p, "r+b") as fh:
            fh.write(os.urandom(os.path.getsize(p)))
        # Listed in the brick's checksum dirty log (16-byte ids), as a cut change is.
        with open(f"{b1}/.cairn/csum/dirty/log.0", "ab") as log:
            log.write(os.getxattr(p, "trusted.cairn.id"))
PY
cl_start_node n2
wait_until 60 all_up || fail "n2 not up after diverging its copies"
pass "n2's copies of tree/ diverged (not recorded anywhere)"
cairn_cli volume set hv cluster.heal-bandwidth 128K || fail "volume set 128K"
cairn_cli volume heal hv full || fail "heal full"
pos=$b1/.cairn/full-heal-position.json
saved_dirs() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["dirs_done"])' "$pos" 2>/dev/null || echo 0; }
saved_enough() { (($(saved_dirs) >= 3)); }
wait_until 60 saved_enough || fail "n2's full crawl saved no position: $(cairn_cli volume heal hv statistics)"
saved=$(saved_dirs)
left=$(stats_of_n2 'b["crawls"][0]["dirs_left"]')
kill -9 "${CL_PID[n2]}"
CL_PID[n2]=
pass "killed n2 during its full crawl (position saved after $saved of $ndirs directories, $left left)"
cl_start_node n2
crawl_done() {
    [[ $(stats_of_n2 '(not b["full_pending"]) and any(c["kind"] == "full" and c["ended"] for c in b["crawls"])') == True ]]
}
wait_until 120 crawl_done || fail "n2's full crawl did not finish: $(cairn_cli volume heal hv statistics)"
read -r resumed ndone failed < <(stats_of_n2 \
    '" ".join(str(c[k]) for c in b["crawls"] if c["kind"] == "full" and c["ended"] for k in ("resumed_after", "dirs_done", "failed"))')
echo "# n2's full crawl: resumed after $resumed directories, $ndone done in all, $failed failed"
((resumed >= saved && resumed > 0)) || fail "the full crawl restarted from the root (resumed_after $resumed, saved $saved)"
pass "the full crawl continued from its saved position ($resumed directories were done)"
assert_eq "$ndirs" "$ndone" "every directory counted exactly once across the restart"
assert_eq 0 "$failed" "no inode failed"
[[ ! -e $pos ]] || fail "the position file outlived the finished crawl"
cairn_cli volume heal hv statistics | grep -q "Resumed from its saved position after $resumed directories" ||
    fail "heal statistics do not show the resumed crawl"
wait_until 60 all_up || fail "bricks not up after the full crawl"
# n1's crawl too: the files n2 heads are n2's copies to take, and while n2 was killed n1's
# crawl left them for when n2 is back (it does not compare against its own copy).
n1_done() {
    [[ $(cl_heal_stats hv n1 '(not b["full_pending"]) and any(c["kind"] == "full" and c["ended"] for c in b["crawls"])') == True ]]
}
wait_until 180 n1_done || fail "n1's full crawl did not finish: $(cairn_cli volume heal hv statistics)"
replicas_identical "resumed full crawl"
finish

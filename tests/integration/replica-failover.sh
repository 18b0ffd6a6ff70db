#!/usr/bin/env bash
# Kill one brick of each replica set while a writer runs: every write the writer saw
# acknowledged (fsync returned) must read back afterwards, writes must continue on the
# survivors, and once the dead node is back its bricks must be healed to identical copies.
#
# Layout: 2 nodes, volume 2 x 2 with each set's bricks on different nodes; kill -9 of n2's
# cairnd takes down one brick of every set at once.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_up 2 fo 2 4
mnt=$CL_MNT
mkdir -p "$mnt/w"
acked=$CL_DIR/acked.txt

# Writer: numbered files, each fsynced before it counts as acknowledged.
python3 - "$mnt/w" "$acked" 25 >"$CL_DIR/writer.log" 2>&1 <<'PY' &
import os, sys, time, hashlib
d, acked, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
end = time.time() + secs
i = errors = 0
with open(acked, "w") as log:
    while time.time() < end:
        data = hashlib.sha256(str(i).encode()).digest() * (64 + i % 200)
        try:
            fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            os.write(fd, data)
            os.fsync(fd)
            os.close(fd)
            log.write(f"{i}\n")
            log.flush()
        except OSError as e:
            errors += 1
            print(f"write {i}: {e}", flush=True)
        i += 1
print(f"writer: {i} attempted, {errors} errors", flush=True)
PY
writer=$!

sleep 4
kill -9 "${CL_PID[n2]}"
CL_PID[n2]=
pass "killed n2 (one brick of each set) with the writer running"
wait "$writer" || fail "writer crashed: $(cat "$CL_DIR/writer.log")"
tail -1 "$CL_DIR/writer.log"
n_acked=$(wc -l <"$acked")
((n_acked > 20)) || fail "only $n_acked writes were acknowledged: $(tail -5 "$CL_DIR/writer.log")"

verify() { # LABEL
    python3 - "$mnt/w" "$acked" <<'PY' || fail "$1: acknowledged data lost or wrong"
import hashlib, sys
d, acked = sys.argv[1], sys.argv[2]
bad = 0
for line in open(acked):
    i = int(line)
    want = hashlib.sha256(str(i).encode()).digest() * (64 + i % 200)
    try:
        got = open(f"{d}/f{i}", "rb").read()
    except OSError as e:
        print(f"f{i}: {e}"); bad += 1; continue
    if got != want:
        print(f"f{i}: {len(got)} bytes, want {len(want)}"); bad += 1
sys.exit(1 if bad else 0)
PY
    pass "$1: all $n_acked acknowledged files read back"
}
verify "with n2 dead"

# Writes after the failure were accepted by the survivors.
late=$(awk 'END {print $1}' "$acked")
grep -q "^$late\$" "$acked" && pass "writes continued after the kill (last acknowledged: f$late)"

cl_start_node n2
all_up() {
    cairn_cli volume status fo --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
bricks = [b for v in d["volumes"] for b in v["bricks"]]
sys.exit(0 if bricks and all(b["state"].lower() == "up" for b in bricks) else 1)'
}
wait_until 60 all_up || fail "n2's bricks did not come back up: $(cairn_cli volume status fo)"
pass "n2's bricks healed and up"
verify "after heal"

# Every replica pair holds identical data.
for set in "0 1" "2 3"; do
    read -r a b <<<"$set"
    da=$(ls -d "$CL_DIR"/bricks/fo-b"$a")
    db=$(ls -d "$CL_DIR"/bricks/fo-b"$b")
    diff -r "$da/data" "$db/data" >"$CL_DIR/diff.txt" 2>&1 ||
        fail "bricks $a and $b differ after heal: $(head -5 "$CL_DIR/diff.txt")"
done
pass "replica pairs are identical after heal"

# --- the brick that missed writes must not serve when it comes back first ------------------
brick_states() {
    cairn_cli_at "$1" volume status fo --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(" ".join(b["node"] + ":" + b["state"].lower() for v in d["volumes"] for b in v["bricks"]))'
}
kill -9 "${CL_PID[n2]}"
CL_PID[n2]=
# Sixteen files: both replica sets get some (names hash over the sets).
python3 -c 'import os, sys
for i in range(16):
    fd = os.open(f"{sys.argv[1]}{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"written while n2 was down\n" * 100); os.fsync(fd); os.close(fd)' "$mnt/w/late" ||
    fail "write with n2 down"
pass "wrote w/late0..15 with n2 down (n2's bricks missed them)"
kill -9 "${CL_PID[n1]}"
CL_PID[n1]=
cl_start_node n2
sleep 12
states=$(brick_states n2)
echo "$states" | grep -q "n2:up" &&
    fail "a brick that missed acknowledged writes came up with no peer to heal from: $states"
pass "n2's stale bricks stay out of service while n1 is down ($states)"
cl_start_node n1
wait_until 60 all_up || fail "bricks did not come back: $(brick_states n1)"
for i in $(seq 0 15); do
    got=$(head -c 25 "$mnt/w/late$i") || fail "read w/late$i after both nodes returned"
    assert_eq "written while n2 was down" "$got" "w/late$i after n1 returned"
done
for set in "0 1" "2 3"; do
    read -r a b <<<"$set"
    diff -r "$CL_DIR/bricks/fo-b$a/data" "$CL_DIR/bricks/fo-b$b/data" >"$CL_DIR/diff.txt" 2>&1 ||
        fail "bricks $a and $b differ: $(head -5 "$CL_DIR/diff.txt")"
done
pass "replicas identical again"
finish

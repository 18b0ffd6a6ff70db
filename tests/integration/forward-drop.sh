#!/usr/bin/env bash
# Chain forwards whose TCP connection drops between two live nodes (docs/failure-model.md,
# "Writes": a dropped forward). Revoking a live node's certificate, a peer session closed
# by a certificate reload or a TCP reset all cut the connections a head forwards on while
# both nodes are alive; on replica 2 both bricks then marked each other stale, heal had no
# source, and a FUSE writer got ESTALE.
#
# Layout: 2 nodes, volume 2 x 2 with each set's bricks on different nodes, so each node
# heads about half of the inodes and forwards to the other. Four writers create, write and
# fsync files through a mount while, for 15 s, every node-to-node connection between n1
# and n2 is reset (`ss -K`, an RST to both ends) every 0.3 s. Checks: no writer sees an
# error; no brick leaves service during the resets (the head sends a forward whose
# connection dropped again on a new connection instead of demoting a live replica: with
# the old rule bricks of both nodes were demoted over and over); every brick is up after;
# every acknowledged file reads back; the replicas are identical. About 70 s.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

command -v ss >/dev/null || skip "ss (iproute2) is not installed"

cluster_up 2 fd 2 4
mnt=$CL_MNT
mkdir -p "$mnt/w"
acked=$CL_DIR/acked stop=$CL_DIR/stop

# peer_conns: "LOCAL_PORT REMOTE_PORT" of every established connection a cairnd of n1 or
# n2 opened to the other one (its peer pool; not the mount's connections).
peer_conns() {
    local a b pid port
    for a in n1 n2; do
        b=n1
        [[ $a == n1 ]] && b=n2
        pid=${CL_PID[$a]} port=${CL_PORT[$b]}
        ss -tnpH state established "( dport = :$port )" |
            awk -v pid="pid=$pid," -v port="$port" 'index($0, pid) {
                n = split($3, l, ":"); print l[n], port }'
    done
}

# reset_peer_conns: RST every connection peer_conns lists; prints how many.
reset_peer_conns() {
    local n=0 lport rport
    while read -r lport rport; do
        ss -K -tnH state established "( sport = :$lport and dport = :$rport )" >/dev/null 2>&1 && n=$((n + 1))
    done < <(peer_conns)
    echo "$n"
}

# The peer connections exist once a write went through both nodes.
echo warm >"$mnt/w/warm" || fail "write through the mount"
wait_until 10 test -n "$(peer_conns)" || fail "no connection between n1 and n2: $(ss -tnpH)"
probe=$(reset_peer_conns)
((probe > 0)) || fail "ss -K reset no peer connection (kernel without INET_DIAG_DESTROY?)"
pass "ss -K resets the connections between n1 and n2 ($probe)"

# Writers: 4 processes, each creating, writing and fsyncing numbered files (several
# forwards in flight at once, in both directions); a file is acknowledged once all three
# returned. An error of any kind (ESTALE, EIO, ...) is counted and printed.
writer() { # K
    acked_writer "$mnt/w" "$acked.$1" "$stop" "$1" >"$CL_DIR/writer-$1.log" 2>&1
}
writers=()
for k in 1 2 3 4; do
    writer "$k" &
    writers+=($!)
done
acked_count() { cat "$acked".* 2>/dev/null | wc -l; }
wait_until 30 test -s "$acked.4" || fail "the writers wrote nothing: $(cat "$CL_DIR"/writer-*.log)"

brick_states() {
    cairn_cli volume status fd --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(" ".join(b["node"] + ":" + b["state"].lower() for v in d["volumes"] for b in v["bricks"]))'
}

# Reset the connections every 0.3 s for 15 s, noting every brick state seen meanwhile.
before=$(acked_count)
resets=0 end=$((SECONDS + 15)) seen=
while ((SECONDS < end)); do
    resets=$((resets + $(reset_peer_conns)))
    seen="$seen $(brick_states)"
    sleep 0.3
done
during=$(($(acked_count) - before))
pass "reset $resets connections between n1 and n2 over 15 s; $during files acknowledged meanwhile"
((during > 10)) || fail "the writers stalled while the connections were reset: $(tail -qn3 "$CL_DIR"/writer-*.log)"

# Go on writing a few seconds with the connections left alone, then stop the writers.
sleep 3
touch "$stop"
errors=0
for pid in "${writers[@]}"; do
    wait "$pid" || errors=$((errors + 1))
done
((errors == 0)) || fail "$errors writers saw errors: $(grep -hv '^writer' "$CL_DIR"/writer-*.log | head -5)"
n_acked=$(acked_count)
pass "no write failed ($(tail -qn1 "$CL_DIR"/writer-*.log | tr '\n' ' '))"

# A reset between two live nodes is not a missed write: the head sends the forward again
# on a new connection, and no brick leaves service for it.
demoted=$(tr ' ' '\n' <<<"$seen" | grep -v -e ':up$' -e '^$' | sort | uniq -c | tr '\n' ' ' || true)
[[ -z $demoted ]] || fail "bricks left service during the resets (state: count): $demoted"
redials=$(cat "$CL_DIR"/log/cairnd-n*.log | grep -c "forward sent again on a new connection" || true)
((redials > 0)) || fail "no reset cut a forward in flight (no forward was sent again): the test proved nothing"
pass "no brick left service during the resets; $redials forwards cut by a reset were sent again on a new connection"

wait_until 30 cl_all_up fd ||
    fail "bricks not all up 30 s after the resets stopped: $(brick_states); $(cairn_cli volume heal fd info 2>&1 | head -20)"
pass "every brick is up ($(brick_states))"

cat "$acked".* >"$CL_DIR/acked-all"
python3 - "$mnt/w" "$CL_DIR/acked-all" <<'PY' || fail "acknowledged data lost or wrong"
import hashlib, sys
d, acked = sys.argv[1], sys.argv[2]
bad = 0
for line in open(acked):
    name, i = line.split()
    want = hashlib.sha256(name.encode()).digest() * (16 + int(i) % 300)
    try:
        got = open(f"{d}/f{name}", "rb").read()
    except OSError as e:
        print(f"f{name}: {e}"); bad += 1; continue
    if got != want:
        print(f"f{name}: {len(got)} bytes, want {len(want)}"); bad += 1
sys.exit(1 if bad else 0)
PY
pass "all $n_acked acknowledged files read back"

# Every replica pair holds identical data (a heal still running is waited for).
same() {
    diff -r "$CL_DIR/bricks/fd-b0/data" "$CL_DIR/bricks/fd-b1/data" >"$CL_DIR/diff.txt" 2>&1 &&
        diff -r "$CL_DIR/bricks/fd-b2/data" "$CL_DIR/bricks/fd-b3/data" >>"$CL_DIR/diff.txt" 2>&1
}
wait_until 30 same || fail "replicas differ: $(head -5 "$CL_DIR/diff.txt")"
pass "replica pairs are identical"
finish

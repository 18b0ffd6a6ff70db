#!/usr/bin/env bash
# Revoking a live node's certificate while clients write (docs/security.md, "Revocation"):
# the trusted node keeps serving, the revoked node stops serving and its bricks are marked
# stale, and writers see no error.
#
# Layout: 2 nodes, volume 2 x 2 with each set's bricks on different nodes, so each node
# heads about half of the inodes and forwards to the other. Four writers create, write and
# fsync files through a mount while n2's node certificate is revoked. n1 then refuses n2
# (its sessions closed, new handshakes refused), and n2's forwards to n1 fail. Before, n2
# took that for writes n1 missed and demoted n1's bricks, and kept serving its own.
# Checks: no writer sees an error; n1's bricks never leave service; n2's bricks are out
# (healing, marked stale) within seconds; n2 says once that its certificate is revoked and
# does not retry heals meanwhile; every acknowledged file reads back. Then n2 is given a new
# certificate: it reloads it, its bricks catch up and come back, and the replicas are
# identical. About 60 s.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_up 2 rn 2 4
mnt=$CL_MNT
mkdir -p "$mnt/w"
acked=$CL_DIR/acked stop=$CL_DIR/stop
n2log=$CL_DIR/log/cairnd-n2.log

# Writers: 4 processes, each creating, writing and fsyncing numbered files; a file is
# acknowledged once all three returned. An error of any kind is counted and printed.
writer() { # K
    acked_writer "$mnt/w" "$acked.$1" "$stop" "$1" >"$CL_DIR/writer-$1.log" 2>&1
}
writers=()
# The writers end before the harness unmounts, on success or failure.
rn_cleanup() {
    local rc=$? pid
    touch "$stop"
    for pid in "${writers[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    ((${#writers[@]} == 0)) || wait "${writers[@]}" 2>/dev/null || true
    (exit "$rc")
    cl_cleanup
}
trap rn_cleanup EXIT
for k in 1 2 3 4; do
    writer "$k" &
    writers+=($!)
done
acked_count() { cat "$acked".* 2>/dev/null | wc -l; }
wait_until 30 test -s "$acked.4" || fail "the writers wrote nothing: $(cat "$CL_DIR"/writer-*.log)"

brick_states() {
    cairn_cli volume status rn --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(" ".join(b["node"] + ":" + b["state"].lower() for v in d["volumes"] for b in v["bricks"]))'
}
assert_eq "n1:up n2:up n1:up n2:up" "$(brick_states)" "brick states before the revocation"

n2serial=$(cairn_cli --json client certificate list | python3 -c '
import json, sys
print([c["serial"] for c in json.load(sys.stdin)["certificates"]
       if c["name"] == "n2" and c["role"] == "node" and c["revoked_at"] is None][-1])')
sleep 2
before=$(acked_count)
cairn_cli client certificate revoke "$n2serial" >/dev/null || fail "revoke n2's certificate"
t0=$SECONDS

# For 10 s: n1's bricks stay up; n2's go out.
seen='' out_after='' end=$((SECONDS + 10))
while ((SECONDS < end)); do
    s=$(brick_states)
    seen="$seen $s"
    if [[ -z $out_after ]] && ! grep -q "n2:up" <<<"$s"; then out_after=$((SECONDS - t0)); fi
    sleep 0.3
done
during=$(($(acked_count) - before))
n1_out=$(tr ' ' '\n' <<<"$seen" | grep '^n1:' | grep -v ':up$' | sort | uniq -c | tr '\n' ' ' || true)
[[ -z $n1_out ]] || fail "the trusted node's bricks left service after n2 was revoked (state: count): $n1_out"
[[ -n $out_after ]] || fail "n2's bricks still serve 10 s after its certificate was revoked: $(brick_states)"
pass "n1's bricks stayed up; n2's left service ${out_after} s after the revocation ($(brick_states)); $during files acknowledged meanwhile"
((during > 10)) || fail "the writers stalled after the revocation: $(tail -qn3 "$CL_DIR"/writer-*.log)"

# n2 says it once, and does not retry heals meanwhile.
said=$(grep -c "this node's certificate is revoked" "$n2log" || true)
assert_eq 1 "$said" "n2's messages that its certificate is revoked"
retries=$(sed -n "/this node's certificate is revoked/,\$p" "$n2log" | grep -c "heal failed; will retry\|heal incomplete" || true)
((retries <= 2)) || fail "n2 retried heals $retries times after it knew it was revoked: $(grep -m3 'heal failed\|heal incomplete' "$n2log")"
aside=$(grep -c "a replica refused this node's revoked certificate" "$n2log" || true)
pass "n2 said once that its certificate is revoked; $retries heal retries after; $aside writes it headed were refused by n1 and retried elsewhere"

# Go on writing a few seconds, then stop the writers.
sleep 3
touch "$stop"
errors=0
for pid in "${writers[@]}"; do
    wait "$pid" || errors=$((errors + 1))
done
((errors == 0)) || fail "$errors writers saw errors: $(grep -hv '^writer' "$CL_DIR"/writer-*.log | head -5)"
n_acked=$(acked_count)
pass "no write failed ($(tail -qn1 "$CL_DIR"/writer-*.log | tr '\n' ' '))"

cat "$acked".* >"$CL_DIR/acked-all"
readback() {
    python3 - "$mnt/w" "$CL_DIR/acked-all" <<'PY'
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
}
readback || fail "acknowledged data lost or wrong while n2 is revoked"
pass "all $n_acked acknowledged files read back (n2 revoked)"

# A new certificate for n2: it reloads it and its bricks catch up.
out=$(cairn_cli client certificate issue n2 --role node --out "$CL_DIR/state/n2/node.pem") ||
    fail "issue n2 a new node certificate: $out"
wait_until 60 cl_all_up rn ||
    fail "n2's bricks not back 60 s after its new certificate: $(brick_states); $(tail -5 "$n2log")"
grep -q "this node's certificate is valid again" "$n2log" || fail "n2 does not say its certificate is valid again"
pass "n2 reloaded a new certificate; every brick is up ($(brick_states))"
readback || fail "acknowledged data lost or wrong after n2 came back"
same() {
    diff -r "$CL_DIR/bricks/rn-b0/data" "$CL_DIR/bricks/rn-b1/data" >"$CL_DIR/diff.txt" 2>&1 &&
        diff -r "$CL_DIR/bricks/rn-b2/data" "$CL_DIR/bricks/rn-b3/data" >>"$CL_DIR/diff.txt" 2>&1
}
wait_until 30 same || fail "replicas differ: $(head -5 "$CL_DIR/diff.txt")"
pass "all $n_acked files read back; replica pairs are identical"
finish

#!/usr/bin/env bash
# Certificate revocation (docs/security.md, "Revocation"): an issued certificate is
# recorded and listed; `client certificate revoke` (admin only, audited) makes every node
# refuse it at the handshake and closes its live sessions (a FUSE mount through another
# node than the one that took the revocation) within seconds, while other clients go on;
# a removed peer's node certificate is revoked the same way.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_up 2 rv 2 2
cli=$CAIRN_BIN_DIR/cairn
echo "kept" >"$CL_MNT/f" || fail "write through the admin mount"

cairn_cli client certificate issue laptop --volumes rv --out "$CL_DIR/laptop.pem" >"$CL_DIR/issue.out" ||
    fail "issue a client certificate: $(cat "$CL_DIR/issue.out")"
serial=$(grep -o 'serial [0-9a-f]*' "$CL_DIR/issue.out" | cut -d' ' -f2)
[[ -n $serial ]] || fail "issue does not print the serial: $(cat "$CL_DIR/issue.out")"
cairn_cli client certificate issue laptop2 --out "$CL_DIR/laptop2.pem" >/dev/null || fail "issue laptop2"
list=$(cairn_cli client certificate list) || fail "client certificate list: $list"
grep -Eq "^$serial +laptop +client +rv .*valid" <<<"$list" || fail "laptop not listed as valid: $list"
grep -Eq " n1 +node .*valid" <<<"$list" || fail "n1's node certificate not listed: $list"
grep -Eq " admin +admin .*valid" <<<"$list" || fail "the admin credential not listed: $list"
cairn_cli --json client certificate list | python3 -c '
import json, sys
d = json.load(sys.stdin)["certificates"]
c = [c for c in d if c["name"] == "laptop"]
assert len(c) == 1 and c[0]["volumes"] == ["rv"] and c[0]["revoked_at"] is None, c
' || fail "client certificate list --json"
pass "issued certificates are recorded: list shows laptop ($serial), the nodes and the admin"

# Only an admin lists or revokes.
out=$("$cli" --host "$(cl_node_addr n1)" --credentials "$CL_DIR/laptop2.pem" client certificate revoke laptop 2>&1) &&
    fail "a client certificate revoked one: $out"
grep -q "needs role admin" <<<"$out" || fail "refusal does not say why: $out"
pass "a client certificate cannot revoke ($out)"

# laptop mounts through n2 and keeps a session there; laptop2 mounts too.
mkdir -p "$CL_DIR/m-laptop" "$CL_DIR/m-laptop2"
setsid "$CAIRN_BIN_DIR/mount-cairn" "$(cl_node_addr n2):/rv" "$CL_DIR/m-laptop" -o "credentials=$CL_DIR/laptop.pem" \
    </dev/null >>"$CL_DIR/log/mount-laptop.log" 2>&1 &
CL_MOUNTS[$CL_DIR/m-laptop]=rv
wait_mount "$CL_DIR/m-laptop" $! 30 || fail "laptop: mount failed"
setsid "$CAIRN_BIN_DIR/mount-cairn" "$(cl_node_addr n2):/rv" "$CL_DIR/m-laptop2" -o "credentials=$CL_DIR/laptop2.pem" \
    </dev/null >>"$CL_DIR/log/mount-laptop2.log" 2>&1 &
CL_MOUNTS[$CL_DIR/m-laptop2]=rv
wait_mount "$CL_DIR/m-laptop2" $! 30 || fail "laptop2: mount failed"
assert_eq kept "$(cat "$CL_DIR/m-laptop/f")" "read through laptop's mount"

# Revoked through n1: n2 closes laptop's live sessions within seconds.
t0=$(date +%s)
out=$(cairn_cli client certificate revoke laptop) || fail "client certificate revoke laptop: $out"
grep -q "serial $serial revoked" <<<"$out" || fail "revoke does not name the serial: $out"
closed() { grep -q "closed a session: its certificate is revoked.*laptop[^2]" "$CL_DIR/log/cairnd-n2.log"; }
wait_until 10 closed || fail "n2 did not close laptop's sessions: $(tail -5 "$CL_DIR/log/cairnd-n2.log")"
pass "n2 closed laptop's live session $(($(date +%s) - t0)) s after the revocation at n1"
if out=$(timeout 20 cat "$CL_DIR/m-laptop/f" 2>&1) && [[ $out == kept ]]; then
    # The kernel may answer from its page cache: a new file needs the server.
    if timeout 20 tee "$CL_DIR/m-laptop/new-$RANDOM" <<<x >/dev/null 2>&1; then
        fail "laptop still writes after its certificate was revoked"
    fi
fi
assert_eq kept "$(cat "$CL_DIR/m-laptop2/f")" "laptop2 reads on"
echo more >"$CL_DIR/m-laptop2/g" || fail "laptop2 writes on"
pass "laptop's mount no longer reaches the volume; laptop2's goes on"

# Every node refuses it at the handshake, saying why.
for n in n1 n2; do
    out=$("$cli" --host "$(cl_node_addr "$n")" --credentials "$CL_DIR/laptop.pem" volume info rv 2>&1) &&
        fail "$n accepted a revoked certificate: $out"
    grep -q "revoked" <<<"$out" || fail "$n: refusal does not say revoked: $out"
done
mkdir -p "$CL_DIR/m-again"
out=$(timeout 60 "$CAIRN_BIN_DIR/mount-cairn" "$(cl_node_addr n1):/rv" "$CL_DIR/m-again" -o "credentials=$CL_DIR/laptop.pem" 2>&1) &&
    fail "a revoked certificate mounted: $out"
pass "n1 and n2 refuse the revoked certificate at the handshake (${out##*: })"
list=$(cairn_cli client certificate list)
grep -Eq "^$serial +laptop .*revoked .* by admin" <<<"$list" || fail "laptop not listed as revoked by admin: $list"
grep -q '"CertRevoke"' "$CL_DIR/log/audit.log" || fail "revocation not in the audit log"
pass "list shows laptop revoked by admin; the audit log records it"

# A removed peer: revoke n2's node certificate, by serial. n1 refuses n2's certificate.
n2serial=$(cairn_cli --json client certificate list | python3 -c '
import json, sys
print([c["serial"] for c in json.load(sys.stdin)["certificates"] if c["name"] == "n2" and c["role"] == "node"][0])')
cairn_cli client certificate revoke "$n2serial" >/dev/null || fail "revoke n2's certificate"
out=$("$cli" --host "$(cl_node_addr n1)" --credentials "$CL_DIR/state/n2/node.pem" volume info rv 2>&1) &&
    fail "n1 accepted n2's revoked node certificate: $out"
grep -q "revoked" <<<"$out" || fail "n1: refusal of n2's certificate does not say revoked: $out"
# n2 learns of its own revocation too, and refuses its peer's... and a revoked serial
# that was never recorded is accepted by revoke.
cairn_cli client certificate revoke 0badc0ffee >/dev/null || fail "revoke an unrecorded serial"
pass "a removed peer's node certificate is revoked by serial and refused by n1"

finish

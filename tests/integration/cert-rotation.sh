#!/usr/bin/env bash
# Node certificates rotate without downtime (docs/security.md, "Rotation"): while a FUSE
# client writes continuously, each node's certificate is re-issued into its node.pem;
# cairnd reloads it without a restart (a new connection is shown the new certificate;
# the record is listed); the writer sees no I/O error and every acknowledged byte reads
# back. Then the CA is rotated under the same writer (`cairn cluster ca rotate`: both CAs
# trusted, the nodes re-issue their certificates under the new one; `--finish`: the old
# one retired): still no I/O error, and afterwards a certificate of the old CA is refused.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cl_init
# A CA of this suite's own: the rotation replaces it.
export CAIRN_CA_DIR=$CL_DIR/ca
export CAIRN_CREDENTIALS=$CAIRN_CA_DIR/admin.pem
cluster_up 2 rot 2 2
node_serial() {
    cairn_cli --json client certificate list | python3 -c '
import json, sys
c = [c for c in json.load(sys.stdin)["certificates"] if c["name"] == sys.argv[1] and c["role"] == "node" and not c["revoked_at"]]
print(c[-1]["serial"] if c else "")' "$1"
}
declare -A old
for n in n1 n2; do
    old[$n]=$(node_serial "$n")
    [[ -n ${old[$n]} ]] || fail "$n's node certificate is not recorded"
done

# The writer: 64 KiB files, each fsynced; a file is acknowledged once dd returned 0.
mkdir -p "$CL_MNT/w"
acked=$CL_DIR/acked stop=$CL_DIR/stop
: >"$acked"
(
    i=0
    while [[ ! -e $stop ]]; do
        i=$((i + 1))
        head -c 65536 /dev/urandom >"$CL_DIR/chunk"
        if ! err=$(dd if="$CL_DIR/chunk" of="$CL_MNT/w/f$i" bs=65536 conv=fsync status=none 2>&1); then
            echo "write f$i failed: $err" >"$CL_DIR/writer-error"
            exit 1
        fi
        echo "f$i $(sha256sum <"$CL_DIR/chunk" | cut -d' ' -f1)" >>"$acked"
    done
) &
writer=$!
wait_until 30 test -s "$acked" || fail "the writer wrote nothing"

rotated() { grep -q "reloaded this node's certificate.*serial=$2" "$CL_DIR/log/cairnd-$1.log"; }
for n in n1 n2; do
    out=$(cairn_cli client certificate issue "$n" --role node --out "$CL_DIR/state/$n/node.pem") ||
        fail "re-issue $n's node certificate: $out"
    issued=$(grep -o 'serial [0-9a-f]*' <<<"$out" | cut -d' ' -f2)
    wait_until 15 rotated "$n" "$issued" || fail "$n did not reload its node.pem ($issued): $(tail -3 "$CL_DIR/log/cairnd-$n.log")"
    new=$(node_serial "$n")
    assert_eq "$issued" "$new" "$n's newest recorded node certificate"

    [[ -n $new && $new != "${old[$n]}" ]] || fail "$n: no new node certificate recorded (old ${old[$n]}, now $new)"
    # What a new connection is shown (the server's certificate comes before the client's).
    shown=$(openssl s_client -connect "$(cl_node_addr "$n")" -cert "$CAIRN_CREDENTIALS" -key "$CAIRN_CREDENTIALS" \
        </dev/null 2>/dev/null | openssl x509 -noout -serial | cut -d= -f2 | tr A-F a-f)
    [[ ${shown#0} == "${new#0}" ]] || fail "$n presents serial '$shown' to a new connection, not its new $new"
    pass "$n reloaded its new node certificate $new without a restart (was ${old[$n]})"
done
n=$(wc -l <"$acked")
sleep 3
(($(wc -l <"$acked") > n)) || fail "the writer stalled after the rotation"
cairn_cli volume status rot >/dev/null || fail "volume status after the rotation"
pass "the cluster and the writer go on"

# The CA. A client certificate of the old CA, issued before, for the checks below.
cairn_cli client certificate issue old-client --out "$CL_DIR/old-client.pem" >/dev/null || fail "issue old-client"
before=$(cat "$CAIRN_CA_DIR/ca.pem")
out=$("$CAIRN_BIN_DIR/cairn" cluster ca rotate) || fail "cluster ca rotate: $out"
[[ $(cat "$CAIRN_CA_DIR/ca.pem") != "$before" ]] || fail "cluster ca rotate: ca.pem unchanged"
retrusted() { grep -q "now trusts the CA certificate" "$CL_DIR/log/cairnd-$1.log"; }
for n in n1 n2; do
    wait_until 15 retrusted "$n" || fail "$n did not take the trust bundle"
done
sleep 3
cairn_cli volume status rot >/dev/null || fail "the new admin credential (new CA, bundle) manages"
# During the transition a certificate of either CA is accepted (a client may not list
# volumes: what counts is that the handshake passed and the request was judged by role).
for c in old-client new-client; do
    [[ $c == old-client ]] || cairn_cli client certificate issue new-client --out "$CL_DIR/new-client.pem" >/dev/null ||
        fail "issue new-client"
    out=$("$CAIRN_BIN_DIR/cairn" --host "$(cl_node_addr n2)" --credentials "$CL_DIR/$c.pem" volume list 2>&1) || true
    grep -q "permission denied for client $c" <<<"$out" || fail "during the transition $c was not judged by role: $out"
done
assert_eq 3 "$(grep -c 'BEGIN CERTIFICATE' "$CL_DIR/new-client.pem")" "certificates in a credential issued during the rotation"
pass "cluster ca rotate: the nodes trust both CAs; certificates of the old and the new CA are accepted"

n=$(wc -l <"$acked")
out=$("$CAIRN_BIN_DIR/cairn" cluster ca rotate --finish) || fail "cluster ca rotate --finish: $out"
reissued() { grep -q "re-issued this node's certificate: its CA was retired" "$CL_DIR/log/cairnd-$1.log"; }
for n2 in n1 n2; do
    wait_until 15 reissued "$n2" || fail "$n2 did not re-issue its certificate under the new CA"
done
sleep 3
for n2 in n1 n2; do
    out=$("$CAIRN_BIN_DIR/cairn" --host "$(cl_node_addr "$n2")" --credentials "$CL_DIR/old-client.pem" volume list 2>&1) &&
        fail "$n2 accepted a certificate of the retired CA: $out"
    grep -q "not signed by" <<<"$out" || fail "$n2: refusal of the old CA's certificate does not say why: $out"
    out=$("$CAIRN_BIN_DIR/cairn" --host "$(cl_node_addr "$n2")" --credentials "$CL_DIR/new-client.pem" volume list 2>&1) || true
    grep -q "permission denied for client new-client" <<<"$out" || fail "$n2: new-client after the rotation: $out"
done
cairn_cli volume status rot >/dev/null || fail "the admin credential after the old CA was retired"
(($(wc -l <"$acked") > n)) || fail "the writer stalled during the CA rotation"
pass "cluster ca rotate --finish: the nodes re-issued their certificates; a certificate of the old CA is refused by n1 and n2; the admin, new-client and the writer go on"

touch "$stop"
wait "$writer" || fail "the writer saw an I/O error: $(cat "$CL_DIR/writer-error" 2>/dev/null)"
total=$(wc -l <"$acked")
while read -r f sum; do
    got=$(sha256sum <"$CL_MNT/w/$f" | cut -d' ' -f1)
    [[ $got == "$sum" ]] || fail "$f: acknowledged content lost or changed after the rotation"
done <"$acked"
pass "no I/O error; all $total acknowledged files ($((total * 64)) KiB) read back intact"

finish

#!/usr/bin/env bash
# Node certificates rotate without downtime (docs/security.md, "Rotation"): while a FUSE
# client writes continuously, each node's certificate is re-issued into its node.pem;
# cairnd reloads it without a restart (a new connection is shown the new certificate;
# the record is listed); the writer sees no I/O error and every acknowledged byte reads
# back. Then the CA is rotated under the same writer (`cairn cluster ca rotate`: both CAs
# trusted, the nodes re-issue their certificates under the new one; `--finish`: the old
# one retired): still no I/O error, and afterwards a certificate of the old CA is refused.
# Two client-only processes write all along with credentials of their own: a FUSE mount
# (mount.cairn -o credentials=, a client certificate) and a libcairn client (the gateways'
# library, its `credentials` option, a gateway certificate). During the CA rotation the
# admin re-issues the FUSE client's file, and the gateway renews its own through n2
# (`cairn client certificate renew --if-due`, no CA key there); after it their old
# certificates are revoked, which closes their sessions: they reconnect with the new
# files, read again without a restart, and see no error.
# Only n1 holds the CA: n2 runs with a CA dir of its own, without the key, and a node
# certificate 10 days from its end. It renews that from n1 on its own (it nears its end),
# and through the CA rotation takes the trust bundle and then its certificate of the new
# CA from n1 (`CertRenew` over its node connection), nothing by hand.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cl_init
# A CA of this suite's own: the rotation replaces it.
export CAIRN_CA_DIR=$CL_DIR/ca
export CAIRN_CREDENTIALS=$CAIRN_CA_DIR/admin.pem
cl_start_etcd
cl_start_node n1
mkdir -p "$CL_DIR/state/n2" "$CL_DIR/ca-n2"
out=$(cairn_cli client certificate issue n2 --role node --days 10 --out "$CL_DIR/state/n2/node.pem") ||
    fail "issue n2's node certificate: $out"
CAIRN_CA_DIR=$CL_DIR/ca-n2 cl_start_node n2
cl_peer_probe n2
cl_create_volume rot 2 2
cl_mount rot
[[ ! -e $CL_DIR/ca-n2/ca.key ]] || fail "n2 holds a CA key"
# n2's certificate ends within 30 days: renewed from n1, and reloaded.
first_cert() { openssl x509 -in "$1"; }
end_days() { echo $((($(date -d "$(openssl x509 -in "$1" -noout -enddate | cut -d= -f2)" +%s) - $(date +%s)) / 86400)); }
renewed() { grep -q "renewed this node's certificate from the CA node: $2" "$CL_DIR/log/cairnd-$1.log"; }
wait_until 75 renewed n2 "it nears its end" || fail "n2 did not renew its certificate from n1: $(tail -3 "$CL_DIR/log/cairnd-n2.log")"
(($(end_days "$CL_DIR/state/n2/node.pem") > 300)) || fail "n2's renewed certificate ends in $(end_days "$CL_DIR/state/n2/node.pem") days"
grep -q "renewed a certificate with the cluster CA holder=node n2" "$CL_DIR/log/cairnd-n1.log" || fail "n1 did not say it renewed n2's certificate"
wait_until 15 grep -q "reloaded this node's certificate" "$CL_DIR/log/cairnd-n2.log" || fail "n2 did not reload its renewed certificate"
pass "n2 (no CA key) renewed its certificate, 10 days from its end, from n1 on its own"
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

# The client-only processes, each with a client certificate of its own (volume rot).
issue_client() {
    local out
    out=$(cairn_cli client certificate issue "$1" --role "${2:-client}" --volumes rot --out "$CL_DIR/$1.pem") ||
        fail "issue $1's certificate: $out"
    grep -o 'serial [0-9a-f]*' <<<"$out" | cut -d' ' -f2
}
fuse_serial=$(issue_client fuse-client)
lib_serial=$(issue_client gw1 gateway)
mkdir -p "$CL_MNT/c" "$CL_MNT/l"
admin_mnt=$CL_MNT
CL_MOUNT_OPTS=credentials=$CL_DIR/fuse-client.pem cl_mount rot "$CL_DIR/mnt/fc"
CL_MNT=$admin_mnt
: >"$CL_DIR/acked-c"
(
    i=0
    while [[ ! -e $stop ]]; do
        i=$((i + 1))
        head -c 65536 /dev/urandom >"$CL_DIR/chunk-c"
        if ! err=$(dd if="$CL_DIR/chunk-c" of="$CL_DIR/mnt/fc/c/f$i" bs=65536 conv=fsync status=none 2>&1); then
            echo "write c/f$i failed: $err" >"$CL_DIR/writer-c-error"
            exit 1
        fi
        echo "f$i $(sha256sum <"$CL_DIR/chunk-c" | cut -d' ' -f1)" >>"$CL_DIR/acked-c"
    done
) &
writer_c=$!
python3 "$(dirname "${BASH_SOURCE[0]}")/libcairn_writer.py" "$CAIRN_BIN_DIR/libcairn.so" \
    "$(cl_node_addr n2)" rot "$CL_DIR/gw1.pem" /l "$CL_DIR/acked-l" "$stop" \
    >"$CL_DIR/log/libcairn-writer.log" 2>&1 &
writer_l=$!
wait_until 30 test -s "$CL_DIR/acked-c" || fail "the FUSE client (fuse-client) wrote nothing"
wait_until 30 test -s "$CL_DIR/acked-l" ||
    fail "the libcairn client (gateway gw1) wrote nothing: $(cat "$CL_DIR/log/libcairn-writer.log")"
pass "a FUSE client (client certificate) and a libcairn client (gateway certificate) write with credentials of their own"
# The gateway's own renewal (no CA key needed): not due yet.
gw_renew() { "$CAIRN_BIN_DIR/cairn" --host "$(cl_node_addr n2)" --credentials "$CL_DIR/gw1.pem" client certificate renew --if-due; }
out=$(gw_renew) || fail "gw1: renew --if-due: $out"
grep -q "not due" <<<"$out" || fail "gw1: renew --if-due before the rotation: $out"

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
# n2 keeps its certificate (of the old CA) and holds one of the new CA for --finish.
first_cert "$CL_DIR/state/n2/node-next.pem" | openssl verify -CAfile "$CAIRN_CA_DIR/ca.pem" >/dev/null 2>&1 ||
    fail "n2 holds no certificate of the new CA in node-next.pem"
assert_eq 3 "$(grep -c 'BEGIN CERTIFICATE' "$CL_DIR/state/n2/node.pem")" "certificates in n2's node.pem during the rotation (its own, both CAs)"
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
# The client-only processes' files are re-issued under the new CA (trusting both): the
# FUSE client's by the admin, the gateway's by itself through n2 (no CA key there), from n1.
fuse_serial2=$(issue_client fuse-client)
out=$(gw_renew) || fail "gw1: renew --if-due during the rotation: $out"
lib_serial2=$(grep -o 'serial [0-9a-f]*' <<<"$out" | cut -d' ' -f2)
[[ -n $lib_serial2 && $lib_serial2 != "$lib_serial" ]] || fail "gw1: not renewed during the rotation: $out"
grep -q "cairn:role=gateway;volumes=rot" <<<"$out" || fail "gw1's renewed certificate lost its limits: $out"
assert_eq 3 "$(grep -c 'BEGIN CERTIFICATE' "$CL_DIR/gw1.pem")" "certificates in gw1's renewed credential (its own, both CAs)"
first_cert "$CL_DIR/gw1.pem" | openssl verify -CAfile "$CAIRN_CA_DIR/ca.pem" >/dev/null 2>&1 ||
    fail "gw1's renewed certificate is not of the new CA"
pass "cluster ca rotate: the nodes trust both CAs; certificates of the old and the new CA are accepted"

n=$(wc -l <"$acked")
out=$("$CAIRN_BIN_DIR/cairn" cluster ca rotate --finish) || fail "cluster ca rotate --finish: $out"
reissued() { grep -q "re-issued this node's certificate: its CA was retired" "$CL_DIR/log/cairnd-$1.log"; }
for n2 in n1 n2; do
    wait_until 15 reissued "$n2" || fail "$n2 did not re-issue its certificate under the new CA"
done
first_cert "$CL_DIR/state/n2/node.pem" | openssl verify -CAfile "$CAIRN_CA_DIR/ca.pem" >/dev/null 2>&1 ||
    fail "n2's node.pem is not a certificate of the new CA after --finish"
[[ ! -e $CL_DIR/state/n2/node-next.pem ]] || fail "n2 kept node-next.pem after switching to it"
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

# The client-only processes' sessions were opened with their old certificates (of the
# retired CA); revoking those closes them, and each process reconnects with the file
# re-issued under the new CA: no error, and they write on.
nc=$(wc -l <"$CL_DIR/acked-c") nl=$(wc -l <"$CL_DIR/acked-l")
cairn_cli client certificate revoke "$fuse_serial" >/dev/null || fail "revoke fuse-client's old certificate"
cairn_cli client certificate revoke "$lib_serial" >/dev/null || fail "revoke gw1's old certificate"
grows() { (($(wc -l <"$1") > $2 + 3)); }
wait_until 30 grows "$CL_DIR/acked-c" "$nc" ||
    fail "the FUSE client stopped writing after its old certificate was revoked: $(cat "$CL_DIR/writer-c-error" 2>/dev/null)"
wait_until 30 grows "$CL_DIR/acked-l" "$nl" ||
    fail "the libcairn client stopped writing after its old certificate was revoked: $(cat "$CL_DIR/log/libcairn-writer.log")"
# Their sessions are closed within seconds of the revocation (each node's 2 s tick):
# then they must have reconnected with the new files, and written on after that.
closed() { grep -q "closed a session: its certificate is revoked" "$CL_DIR"/log/cairnd-n*.log; }
wait_until 20 grep -q "reloaded the credentials file.*serial=$fuse_serial2" "$CL_DIR/log/mount-rot-fc.log" ||
    fail "the FUSE client did not say it reloaded its credentials ($fuse_serial2)"
wait_until 20 closed || fail "no node closed the sessions of the revoked certificates"
sleep 3
nc=$(wc -l <"$CL_DIR/acked-c") nl=$(wc -l <"$CL_DIR/acked-l")
wait_until 30 grows "$CL_DIR/acked-c" "$nc" ||
    fail "the FUSE client stopped writing after its sessions were closed: $(cat "$CL_DIR/writer-c-error" 2>/dev/null)"
wait_until 30 grows "$CL_DIR/acked-l" "$nl" ||
    fail "the libcairn client stopped writing after its sessions were closed: $(cat "$CL_DIR/log/libcairn-writer.log")"
pass "after the old CA was retired and their old certificates revoked, the FUSE and libcairn clients reconnected with their re-issued files ($fuse_serial2, $lib_serial2) and write on"

touch "$stop"
wait "$writer" || fail "the writer saw an I/O error: $(cat "$CL_DIR/writer-error" 2>/dev/null)"
wait "$writer_c" || fail "the FUSE client saw an I/O error: $(cat "$CL_DIR/writer-c-error" 2>/dev/null)"
wait "$writer_l" || fail "the libcairn client saw an error: $(cat "$CL_DIR/log/libcairn-writer.log")"
for k in c l; do
    while read -r f sum; do
        got=$(sha256sum <"$CL_MNT/$k/$f" | cut -d' ' -f1)
        [[ $got == "$sum" ]] || fail "$k/$f: acknowledged content lost or changed after the rotation"
    done <"$CL_DIR/acked-$k"
done
pass "the FUSE and libcairn clients: no error; $(wc -l <"$CL_DIR/acked-c") and $(wc -l <"$CL_DIR/acked-l") acknowledged files read back intact"
total=$(wc -l <"$acked")
while read -r f sum; do
    got=$(sha256sum <"$CL_MNT/w/$f" | cut -d' ' -f1)
    [[ $got == "$sum" ]] || fail "$f: acknowledged content lost or changed after the rotation"
done <"$acked"
pass "no I/O error; all $total acknowledged files ($((total * 64)) KiB) read back intact"

finish

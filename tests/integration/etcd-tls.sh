#!/usr/bin/env bash
# etcd with client TLS and auth (the harness default): the cluster works through it, and
# everything else is refused: plain HTTP, TLS without a client certificate, a certificate
# of another CA, a certificate of the right CA whose CN is no etcd user, cairnd's own user
# outside the cluster's key prefix, and a cairnd started without a client certificate.
# The CA and certificate keys are 0600.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $CL_ETCD_TLS == 1 ]] || fail "run with CL_ETCD_TLS=1 (the default)"
cluster_up 1 tvol 1 1
echo through-tls >"$CL_MNT/f" || fail "write through the mount"
assert_eq through-tls "$(cat "$CL_MNT/f")" "the cluster works with etcd over TLS with auth"

tlsdir=$CL_DIR/etcd-tls
url=$(cl_etcd_url)
for k in ca-key server-key root-key cairn-key; do
    assert_eq 600 "$(stat -c %a "$tlsdir/$k.pem")" "$k.pem is mode 0600"
done

# refused KIND CMD...: CMD must fail.
refused() {
    local what=$1
    shift
    if "$@" >"$CL_DIR/refused.out" 2>&1; then
        fail "$what was not refused: $(head -c 300 "$CL_DIR/refused.out")"
    fi
    pass "$what refused"
}
range='{"key":"L2NhaXJu","range_end":"L2NhaXJv"}' # /cairn .. /cairo
refused "plain HTTP to etcd" curl -fsS --max-time 3 -X POST -d "$range" "http://127.0.0.1:$CL_ETCD_PORT/v3/kv/range"
refused "TLS to etcd without a client certificate" \
    curl -fsS --max-time 3 --cacert "$tlsdir/ca.pem" -X POST -d "$range" "$url/v3/kv/range"

etcd_tls_make "$CL_DIR/other-ca" || fail "second CA"
refused "a client certificate of another CA" \
    env ETCDCTL_API=3 etcdctl --endpoints "$url" --cacert "$tlsdir/ca.pem" \
    --cert "$CL_DIR/other-ca/cairn.pem" --key "$CL_DIR/other-ca/cairn-key.pem" \
    --dial-timeout 3s --command-timeout 5s get /cairn --prefix --keys-only

(
    umask 077
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=intruder \
        -keyout "$CL_DIR/intruder-key.pem" -out "$CL_DIR/intruder.csr" 2>/dev/null &&
        printf 'extendedKeyUsage=clientAuth\n' >"$CL_DIR/intruder.ext" &&
        openssl x509 -req -in "$CL_DIR/intruder.csr" -CA "$tlsdir/ca.pem" -CAkey "$tlsdir/ca-key.pem" \
            -CAcreateserial -days 1 -extfile "$CL_DIR/intruder.ext" -out "$CL_DIR/intruder.pem" 2>/dev/null
) || fail "intruder certificate"
refused "a certificate of the cluster's CA whose CN is no etcd user" \
    env ETCDCTL_API=3 etcdctl --endpoints "$url" --cacert "$tlsdir/ca.pem" \
    --cert "$CL_DIR/intruder.pem" --key "$CL_DIR/intruder-key.pem" \
    --dial-timeout 3s --command-timeout 5s get /cairn --prefix --keys-only
out=$(ETCDCTL_API=3 etcdctl --endpoints "$url" --cacert "$tlsdir/ca.pem" --cert "$tlsdir/cairn.pem" \
    --key "$tlsdir/cairn-key.pem" --dial-timeout 3s --command-timeout 5s get /cairn/volumes/tvol \
    --keys-only 2>&1) || true
grep -q /cairn/volumes/tvol <<<"$out" || fail "user cairn cannot read its own keys: $out"
refused "user cairn outside the cluster's prefix" \
    env ETCDCTL_API=3 etcdctl --endpoints "$url" --cacert "$tlsdir/ca.pem" \
    --cert "$tlsdir/cairn.pem" --key "$tlsdir/cairn-key.pem" \
    --dial-timeout 3s --command-timeout 5s put /elsewhere x

# A node's own etcd identity: certificate cairn-n2 (CN = its etcd user, role cairn).
etcd_tls_client "$tlsdir" cairn-n2 || fail "etcd_tls_client cairn-n2"
assert_eq 600 "$(stat -c %a "$tlsdir/cairn-n2-key.pem")" "cairn-n2-key.pem is mode 0600"
mapfile -t n2_args < <(etcd_tls_cairnd_args "$tlsdir" cairn-n2)
mkdir -p "$CL_DIR/state/n2"
refused "cairnd with its own certificate before its etcd user exists" \
    timeout 20 "$CAIRN_BIN_DIR/cairnd" --name n2 --listen "127.0.0.1:$(free_port)" \
    --etcd "$url" "${n2_args[@]}" --state-dir "$CL_DIR/state/n2"
etcd_tls_node_user "$url" "$tlsdir" cairn-n2 || fail "etcd_tls_node_user cairn-n2"
etcd_tls_node_user "$url" "$tlsdir" cairn-n2 || fail "etcd_tls_node_user is not idempotent"
out=$(ETCDCTL_API=3 etcdctl --endpoints "$url" --cacert "$tlsdir/ca.pem" --cert "$tlsdir/cairn-n2.pem" \
    --key "$tlsdir/cairn-n2-key.pem" --dial-timeout 3s --command-timeout 5s get /cairn/volumes/tvol \
    --keys-only 2>&1) || true
grep -q /cairn/volumes/tvol <<<"$out" || fail "user cairn-n2 cannot read the cluster's keys: $out"
refused "user cairn-n2 outside the cluster's prefix" \
    env ETCDCTL_API=3 etcdctl --endpoints "$url" --cacert "$tlsdir/ca.pem" \
    --cert "$tlsdir/cairn-n2.pem" --key "$tlsdir/cairn-n2-key.pem" \
    --dial-timeout 3s --command-timeout 5s put /elsewhere x
"$CAIRN_BIN_DIR/cairnd" --name n2 --listen "127.0.0.1:$(free_port)" --etcd "$url" "${n2_args[@]}" \
    --state-dir "$CL_DIR/state/n2" >"$CL_DIR/log/cairnd-n2.out" 2>&1 &
n2_pid=$!
n2_up() { grep -q "cairnd started" "$CL_DIR/log/cairnd-n2.out"; }
wait_until 20 n2_up || fail "cairnd n2 with etcd certificate cairn-n2 did not start: $(tail -5 "$CL_DIR/log/cairnd-n2.out")"
stop_pid "$n2_pid" cairnd 10 || fail "stopping cairnd n2"
wait "$n2_pid" 2>/dev/null || true
pass "a node with its own etcd certificate (CN cairn-n2, user cairn-n2, role cairn) works"

# The CTDB cluster lock helper (appliance/ha/ctdb-etcd-reclock) with its own identity:
# user cairn-reclock may use its lock key and nothing else, so its certificate (on every
# gateway) cannot read the cluster's keys. The helper speaks gRPC (etcdctl): etcd ignores a
# certificate's CN on its HTTP gateway, where the helper's lease grant was refused.
lock=/cairn/ha/ctdb/reclock
etcd_tls_client "$tlsdir" cairn-reclock || fail "etcd_tls_client cairn-reclock"
etcd_tls_lock_user "$url" "$tlsdir" cairn-reclock "$lock" || fail "etcd_tls_lock_user cairn-reclock"
etcd_tls_lock_user "$url" "$tlsdir" cairn-reclock "$lock" || fail "etcd_tls_lock_user is not idempotent"
reclock=(timeout 30 "$CL_REPO/appliance/ha/ctdb-etcd-reclock"
    --tls "$tlsdir/ca.pem" "$tlsdir/cairn-reclock.pem" "$tlsdir/cairn-reclock-key.pem")
"${reclock[@]}" "$url" "$lock" 3 >"$CL_DIR/reclock.out" 2>"$CL_DIR/reclock.err" &
holder_pid=$!
holds() { [[ $(cat "$CL_DIR/reclock.out") == 0 ]]; }
wait_until 15 holds || fail "the lock helper as user cairn-reclock did not take the lock: '$(cat "$CL_DIR/reclock.out")' $(cat "$CL_DIR/reclock.err")"
as_reclock=(env ETCDCTL_API=3 etcdctl --endpoints "$url" --cacert "$tlsdir/ca.pem"
    --cert "$tlsdir/cairn-reclock.pem" --key "$tlsdir/cairn-reclock-key.pem" --dial-timeout 3s --command-timeout 5s)
out=$("${as_reclock[@]}" get "$lock" --print-value-only 2>&1) || true
[[ $out == *:[0-9]* ]] || fail "the lock key does not name its holder: '$out'"
sleep 5 # longer than the lease (3 s): the helper keeps it alive over gRPC
{ holds && kill -0 "$holder_pid" 2>/dev/null; } || fail "the lock helper lost its lease: $(cat "$CL_DIR/reclock.err")"
out=$("${reclock[@]}" "$url" "$lock" 3 2>&1) || true
assert_eq 1 "$out" "a second lock helper as cairn-reclock sees contention"
out=$("${reclock[@]}" "$url" /cairn/volumes/tvol 3 2>"$CL_DIR/reclock.err") || true
{ [[ $out == 3 ]] && grep -q "permission denied" "$CL_DIR/reclock.err"; } || fail "the lock helper's user took another key: '$out' $(cat "$CL_DIR/reclock.err") (want '3', permission denied)"
pass "the CTDB lock helper as etcd user cairn-reclock takes, keeps and contends for its lock key over gRPC, and no other key"
refused "the lock helper's certificate reading the cluster's keys" "${as_reclock[@]}" get /cairn --prefix --keys-only
refused "the lock helper's certificate reading a volume" "${as_reclock[@]}" get /cairn/volumes/tvol
refused "the lock helper's certificate writing a peer" "${as_reclock[@]}" put /cairn/peers/intruder x
kill "$holder_pid"
wait "$holder_pid" 2>/dev/null || true
out=$("${as_reclock[@]}" get "$lock" --print-value-only 2>&1) || true
assert_eq "" "$out" "the lock key after the helper got SIGTERM (its lease revoked)"

# A client certificate of the etcd CA whose CN has no etcd role: refused by the helper too.
out=$(timeout 30 "$CL_REPO/appliance/ha/ctdb-etcd-reclock" --tls "$tlsdir/ca.pem" \
    "$CL_DIR/intruder.pem" "$CL_DIR/intruder-key.pem" "$url" "$lock" 3 2>/dev/null) || true
[[ $out == 3 ]] || fail "the lock helper with a certificate whose CN is no etcd user: '$out' (want '3')"
pass "the lock helper with a certificate of no etcd user answers '3'"

mkdir -p "$CL_DIR/state/n9"
refused "cairnd without a client certificate" \
    timeout 20 "$CAIRN_BIN_DIR/cairnd" --name n9 --listen "127.0.0.1:$(free_port)" \
    --etcd "$url" --etcd-ca "$tlsdir/ca.pem" --state-dir "$CL_DIR/state/n9"
refused "cairnd over plain HTTP" \
    timeout 20 "$CAIRN_BIN_DIR/cairnd" --name n9 --listen "127.0.0.1:$(free_port)" \
    --etcd "http://127.0.0.1:$CL_ETCD_PORT" --state-dir "$CL_DIR/state/n9"
finish

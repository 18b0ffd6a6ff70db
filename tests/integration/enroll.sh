#!/usr/bin/env bash
# Joining a node with a token alone (docs/security.md, "Joining a node"): a second node
# with no certificate, no CA and no admin credential starts with `--join MEMBER
# --ca-cert-hash sha256:H --join-token-file F`, gets its node certificate from the
# cluster CA through the member, becomes a member, and serves a brick of a replicated
# volume. A wrong CA hash, a used, expired or revoked token, or a malformed hash make it
# exit saying which, with no certificate written and the pool unchanged. With etcd over TLS
# (the default) a node joining with --etcd-cert gets its etcd client certificate in the
# enrollment answer, or is refused before the token is used when the CA node has no etcd CA;
# with --etcd-member-cert also an etcd server and peer certificate for its address.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cl_init
cl_start_etcd
cl_start_node n1

in_pool() { cairn_cli --json pool list | python3 -c 'import json,sys; sys.exit(0 if sys.argv[1] in [p["name"] for p in json.load(sys.stdin)["peers"]] else 1)' "$1"; }
new_token() { cairn_cli peer token create "$@" 2>/dev/null; }

# The token and the CA hash, as `cairn peer token create` prints them.
token=$(cairn_cli peer token create --ttl 10m 2>"$CL_DIR/token.err") || fail "peer token create"
pin=$(grep -o 'ca-cert-hash sha256:[0-9a-f]\{64\}' "$CL_DIR/token.err" | head -1 | cut -d' ' -f2) || true
[[ -n $pin ]] || fail "peer token create printed no --ca-cert-hash: $(cat "$CL_DIR/token.err")"
grep -qF -- "--join $(cl_node_addr n1)" "$CL_DIR/token.err" || fail "no ready --join command: $(cat "$CL_DIR/token.err")"
grep -qF "ca_cert_hash: $pin" "$CL_DIR/token.err" || fail "no user-data snippet: $(cat "$CL_DIR/token.err")"
json_pin=$(cairn_cli --json peer token create --ttl 1m | python3 -c 'import json,sys; print(json.load(sys.stdin)["ca_cert_hash"])')
assert_eq "$pin" "$json_pin" "the CA hash in --json"
ossl_pin=sha256:$(openssl x509 -in "$CAIRN_CA_DIR/ca.pem" -pubkey -noout |
    openssl pkey -pubin -outform der | sha256sum | cut -d' ' -f1)
assert_eq "$pin" "$ossl_pin" "the CA hash is kubeadm's (SHA-256 of the CA's SubjectPublicKeyInfo, as openssl computes it)"
pass "peer token create prints the token, the CA hash and a ready join command"
# On the node itself over loopback (as on an appliance, where cairn talks to 127.0.0.1:7420)
# the join address is the one the node advertises to the pool, not the one cairn used.
n1_addr=$(cl_node_addr n1)
lo_join=$("$CAIRN_BIN_DIR/cairn" --host "localhost:${n1_addr##*:}" --json peer token create --ttl 1m |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["join"])') || fail "peer token create through localhost"
assert_eq "$n1_addr" "$lo_join" "the join address of a token made through localhost"
pass "a token made over loopback names the node's advertised address to join through"

etcd_tls=()
[[ $CL_ETCD_TLS != 1 ]] || mapfile -t etcd_tls < <(etcd_tls_cairnd_args "$CL_DIR/etcd-tls")

# join_refused NAME WHY HASH TOKEN: cairnd NAME (no certificate, an empty CA dir) started
# with --join (through JOIN_VIA, default n1) exits, saying WHY; no certificate is written;
# NAME is not in the pool.
join_refused() {
    local name=$1 why=$2 hash=$3 tok=$4
    mkdir -p "$CL_DIR/state/$name" "$CL_DIR/ca-$name"
    printf '%s\n' "$tok" >"$CL_DIR/$name.token"
    chmod 600 "$CL_DIR/$name.token"
    if timeout 30 "$CAIRN_BIN_DIR/cairnd" --name "$name" --listen "$CL_HOST:$(free_port)" \
        --etcd "$(cl_etcd_url)" "${etcd_tls[@]}" --state-dir "$CL_DIR/state/$name" \
        --ca-dir "$CL_DIR/ca-$name" --join "$(cl_node_addr "${JOIN_VIA:-n1}")" --ca-cert-hash "$hash" \
        --join-token-file "$CL_DIR/$name.token" >"$CL_DIR/log/cairnd-$name.out" 2>&1; then
        fail "cairnd $name joined; expected a refusal ($why)"
    fi
    grep -qF -- "$why" "$CL_DIR/log/cairnd-$name.out" ||
        fail "cairnd $name: expected '$why' in: $(cat "$CL_DIR/log/cairnd-$name.out")"
    [[ ! -e $CL_DIR/state/$name/node.pem ]] || fail "cairnd $name wrote a node certificate"
    [[ ! -e $CL_DIR/ca-$name/ca.key ]] || fail "cairnd $name founded a CA"
    in_pool "$name" && fail "$name is in the pool after a refused join"
    pass "cairnd --join refused ($why)"
}

other_pin=sha256:$(printf '%s' other | sha256sum | cut -d' ' -f1)
join_refused bad1 "wrong CA hash" "$other_pin" "$token"
cairn_cli peer token list | grep -q "^${token%%.*} .*valid" ||
    fail "a join to a server of the wrong CA used up the token"
pass "the token was not sent to a server whose CA does not match the pin"
join_refused bad2 "does not start with sha256:" "md5:1234" "$token"
revoked=$(new_token --ttl 10m)
cairn_cli peer token revoke "${revoked%%.*}" >/dev/null || fail "peer token revoke"
join_refused bad3 "revoked" "$pin" "$revoked"
expiring=$(new_token --ttl 1s)
sleep 2
join_refused bad4 "expired" "$pin" "$expiring"

# The good join: n2 has nothing but the token, the hash and n1's address.
printf '%s\n' "$token" >"$CL_DIR/n2.token"
chmod 600 "$CL_DIR/n2.token"
mkdir -p "$CL_DIR/ca-n2"
start=$SECONDS
CL_CAIRND_ARGS=(--ca-dir "$CL_DIR/ca-n2" --join "$(cl_node_addr n1)" --ca-cert-hash "$pin"
    --join-token-file "$CL_DIR/n2.token")
cl_start_node n2
in_pool n2 || fail "n2 enrolled but is not in the pool"
echo "# n2 enrolled and listening in $((SECONDS - start)) s"
assert_eq 600 "$(stat -c %a "$CL_DIR/state/n2/node.pem")" "mode of n2's node.pem"
[[ -s $CL_DIR/ca-n2/ca.pem && -s $CL_DIR/state/n2/ca.pem ]] || fail "n2 stored no ca.pem"
[[ ! -e $CL_DIR/ca-n2/ca.key && ! -e $CL_DIR/ca-n2/admin.pem ]] || fail "n2 got the CA key or the admin credential"
cmp -s "$CL_DIR/ca-n2/ca.pem" "$CAIRN_CA_DIR/ca.pem" || fail "n2's ca.pem is not the cluster CA's"
cairn_cli peer token list | grep -q "^${token%%.*} .*used .* by n2" || fail "token not listed as used by n2"
pass "n2 joined with the token alone: node.pem (0600), ca.pem, a member; no CA key"

join_refused bad5 "already used" "$pin" "$token"

# n2 serves a brick of a replicated volume: bricks b0 on n1 and b1 on n2.
cl_create_volume ev 2 2
cl_mount ev
head -c 3000000 /dev/urandom >"$CL_DIR/payload"
cp "$CL_DIR/payload" "$CL_MNT/f" || fail "writing through the mount"
sync
wait_until 10 cmp -s "$CL_DIR/payload" "$CL_DIR/bricks/ev-b1/data/f" ||
    fail "n2's brick does not hold the replicated file"
cmp -s "$CL_DIR/payload" "$CL_DIR/bricks/ev-b0/data/f" || fail "n1's brick does not hold the file"
cairn_cli --json volume status ev | python3 -c '
import json, sys
b = [x for v in json.load(sys.stdin)["volumes"] for x in v["bricks"] if x["node"] == "n2"]
sys.exit(0 if b and all(x["state"].lower() == "up" for x in b) else 1)' || fail "n2's brick is not online: $(cairn_cli volume status ev)"
pass "n2 serves brick 1 of replicated volume ev: a file written through the mount is on both bricks"

# Through a member without the CA key: n2 passes the request on to n1, which holds it.
new_token --ttl 10m >"$CL_DIR/n3.token"
chmod 600 "$CL_DIR/n3.token"
mkdir -p "$CL_DIR/ca-n3"
CL_CAIRND_ARGS=(--ca-dir "$CL_DIR/ca-n3" --join "$(cl_node_addr n2)" --ca-cert-hash "$pin"
    --join-token-file "$CL_DIR/n3.token")
cl_start_node n3
in_pool n3 || fail "n3 enrolled through n2 but is not in the pool"
[[ -s $CL_DIR/state/n3/node.pem && ! -e $CL_DIR/ca-n3/ca.key ]] || fail "n3: no node.pem, or a CA key"
grep -q "passed on to the member holding the cluster CA" "$CL_DIR/log/cairnd-n2.log" ||
    fail "n2 did not say it passed the enrollment on"
pass "n3 enrolled through n2, which holds no CA key: n2 passed the request on to n1"
JOIN_VIA=n2 join_refused bad6 "already used" "$pin" "$(cat "$CL_DIR/n3.token")"

# A restart needs neither the token nor the member: it has its certificate.
CL_CAIRND_ARGS=(--ca-dir "$CL_DIR/ca-n2" --join "$(cl_node_addr n1)" --ca-cert-hash "$pin"
    --join-token-file "$CL_DIR/n2.token")
cl_restart_node n2
in_pool n2 || fail "n2 left the pool after a restart"
cmp -s "$CL_DIR/payload" "$CL_MNT/f" || fail "reading back after n2's restart"
pass "n2 restarts with its certificate (the used token is not needed again)"

# etcd with client certificates (docs/security.md, "etcd"): a joining node without an etcd
# certificate gets one in the enrollment answer, signed by the etcd CA in the CA node's CA
# dir (etcd-ca/, as /etc/cairn/etcd-ca on the appliance), and connects to etcd with it.
if [[ $CL_ETCD_TLS == 1 ]]; then
    tlsdir=$CL_DIR/etcd-tls
    # Without an etcd CA on the CA node: refused before the token is used.
    t5=$(new_token --ttl 10m)
    mapfile -t etcd_tls < <(etcd_tls_cairnd_args "$tlsdir" cairn-bad7)
    join_refused bad7 "holds no etcd CA" "$pin" "$t5"
    [[ ! -e $tlsdir/cairn-bad7.pem && ! -e $tlsdir/cairn-bad7-key.pem ]] || fail "bad7 wrote an etcd certificate"
    cairn_cli peer token list | grep -q "^${t5%%.*} .*valid" || fail "the refused etcd request used up the token"
    pass "enrolling with an etcd request when the CA node holds no etcd CA is refused, the token kept"

    ln -sfn "$tlsdir" "$CAIRN_CA_DIR/etcd-ca"
    # etcd auth is on: the CA node makes etcd user cairn-n4 (as etcd's root, with the root
    # certificate beside the etcd CA) when it signs n4's certificate; nobody makes it here.
    etcd_tls_ctl "$(cl_etcd_url)" "$tlsdir" user get cairn-n4 >/dev/null 2>&1 &&
        fail "etcd user cairn-n4 exists before n4 enrolled"
    printf '%s\n' "$t5" >"$CL_DIR/n4.token"
    chmod 600 "$CL_DIR/n4.token"
    mkdir -p "$CL_DIR/ca-n4"
    # through n2 (no CA key): the request goes on to n1 with the etcd request in it
    # and it asks for an etcd server and peer certificate for its address as well
    CL_CAIRND_ARGS=(--ca-dir "$CL_DIR/ca-n4" --join "$(cl_node_addr n2)"
        --ca-cert-hash "$pin" --join-token-file "$CL_DIR/n4.token"
        --etcd-member-cert "$CL_DIR/n4-member/server.pem" --etcd-member-key "$CL_DIR/n4-member/server-key.pem")
    CL_ETCD_CLIENT=cairn-n4 cl_start_node n4
    rm -f "$CAIRN_CA_DIR/etcd-ca"
    in_pool n4 || fail "n4 enrolled with an etcd request but is not in the pool"
    assert_eq 600 "$(stat -c %a "$tlsdir/cairn-n4-key.pem")" "mode of n4's etcd key"
    openssl x509 -in "$tlsdir/cairn-n4.pem" -noout -subject | grep -q 'CN *= *cairn-n4' ||
        fail "n4's etcd certificate is not for cairn-n4: $(openssl x509 -in "$tlsdir/cairn-n4.pem" -noout -subject)"
    openssl verify -CAfile "$tlsdir/ca.pem" "$tlsdir/cairn-n4.pem" >/dev/null ||
        fail "n4's etcd certificate is not of the etcd CA"
    grep -q "etcd client certificate issued by the etcd CA" "$CL_DIR/log/cairnd-n4.log" ||
        fail "n4 did not say it stored its etcd certificate"
    roles=$(etcd_tls_ctl "$(cl_etcd_url)" "$tlsdir" user get cairn-n4 2>/dev/null | sed -n 's/^Roles: *//p')
    [[ $roles == cairn-n4 ]] ||
        fail "the CA node did not make etcd user cairn-n4 with its own role cairn-n4 (roles: '$roles')"
    # its own role: the cluster's keys and its own liveness key (cairnd published it), but
    # not another node's
    n4etcd() {
        ETCDCTL_API=3 etcdctl --endpoints "$(cl_etcd_url)" --cacert "$tlsdir/ca.pem" \
            --cert "$tlsdir/cairn-n4.pem" --key "$tlsdir/cairn-n4-key.pem" \
            --dial-timeout 3s --command-timeout 5s "$@" 2>&1
    }
    n4_live() { [[ -n $(n4etcd get /cairn/live/n4 --print-value-only) ]]; }
    wait_until 10 n4_live ||
        fail "n4 did not publish /cairn/live/n4 as etcd user cairn-n4: $(n4etcd get /cairn/live/n4)"
    out=$(n4etcd put /cairn/live/n1 127.0.0.1:1) && fail "cairn-n4 overwrote n1's liveness key: $out"
    [[ $out == *"permission denied"* ]] || fail "cairn-n4 put /cairn/live/n1: not a permission refusal: $out"
    pass "n4 enrolled through n2 and got its etcd client certificate (CN cairn-n4, key 0600) with it; the CA node made its etcd user with a role of its own (no other node's liveness key); etcd takes it"
    # the etcd member certificate: for n4's address (not for names it asked), server and
    # client (peer) authentication, of the etcd CA, the key 0600
    m=$CL_DIR/n4-member/server.pem
    n4_host=$(cl_node_addr n4)
    n4_host=${n4_host%:*}
    openssl verify -purpose sslserver -CAfile "$tlsdir/ca.pem" "$m" >/dev/null ||
        fail "n4's etcd member certificate is not a server certificate of the etcd CA"
    openssl verify -purpose sslclient -CAfile "$tlsdir/ca.pem" "$m" >/dev/null ||
        fail "n4's etcd member certificate cannot authenticate as a peer (client)"
    san=$(openssl x509 -in "$m" -noout -ext subjectAltName)
    [[ $san == *"IP Address:$n4_host"* && $san == *"DNS:localhost"* ]] ||
        fail "n4's etcd member certificate does not name $n4_host and localhost: $san"
    assert_eq 600 "$(stat -c %a "$CL_DIR/n4-member/server-key.pem")" "mode of n4's etcd member key"
    grep -q "etcd server and peer certificate issued by the etcd CA" "$CL_DIR/log/cairnd-n4.log" ||
        fail "n4 did not say it stored its etcd member certificate"
    pass "n4 got an etcd server and peer certificate for $n4_host (of the etcd CA, key 0600) in the same enrollment"
fi

# No token secret in logs or state.
for t in "$token" "$revoked" "$expiring" "$(cat "$CL_DIR/n3.token")" ${t5:+"$t5"}; do
    if grep -rqF "${t#*.}" "$CL_DIR/log" "$CL_DIR/state"; then
        fail "the secret of join token ${t%%.*} is in $(grep -rlF "${t#*.}" "$CL_DIR/log" "$CL_DIR/state" | head -1)"
    fi
done
pass "no join token secret in the daemons' logs or state dirs"
finish

#!/usr/bin/env bash
# `make up` (scripts/cluster-up.sh, run here on free ports in a temp dir, no gateways) gives
# its cairnd its own etcd identity, as the appliance does: client certificate and etcd user
# cairn-NODE (key 0600), with its own role cairn-NODE instead of the shared cairn. The
# cluster works through it; that identity reads the cluster's keys and writes them, except
# another node's liveness key (/cairn/live/OTHER), which etcd refuses; nothing outside
# /cairn; no etcd administration. A user that had role cairn loses it. A second run of
# make up changes nothing and the volume still works.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $CL_ETCD_TLS == 1 ]] || fail "run with CL_ETCD_TLS=1 (the default)"
cl_init
export CAIRN_RUN_DIR=$CL_DIR/run CAIRN_NODE=upn1 CAIRN_GATEWAYS=0 CAIRN_BIN_DIR CAIRN_BRICKS=2
export CAIRN_PORT CAIRN_ETCD_PORT CAIRN_ETCD_PEER_PORT
CAIRN_PORT=$(free_port)
CAIRN_ETCD_PORT=$(free_port)
CAIRN_ETCD_PEER_PORT=$(free_port)
export CAIRN_CA_DIR=$CAIRN_RUN_DIR/ca CAIRN_CREDENTIALS=$CAIRN_RUN_DIR/ca/admin.pem
up_log=$CL_DIR/log/cluster-up.log

up_cleanup() {
    local rc=$?
    "$CL_REPO/scripts/cluster-down.sh" >>"$up_log" 2>&1 || rc=1
    (exit "$rc")
    cl_cleanup
}
trap up_cleanup EXIT

"$CL_REPO/scripts/cluster-up.sh" >>"$up_log" 2>&1 || fail "make up (cluster-up.sh) failed: $(tail -n 15 "$up_log")"
mnt=$CAIRN_RUN_DIR/mnt/vol0
echo via-own-identity >"$mnt/f" || fail "write through make up's mount"
assert_eq via-own-identity "$(cat "$mnt/f")" "make up's volume works"

etls=$CAIRN_RUN_DIR/etcd-tls
url=https://127.0.0.1:$CAIRN_ETCD_PORT
pid=$(cat "$CAIRN_RUN_DIR/pid/cairnd-upn1.pid")
args=$(tr '\0' ' ' <"/proc/$pid/cmdline")
[[ $args == *"--etcd-cert $etls/cairn-upn1.pem --etcd-key $etls/cairn-upn1-key.pem"* ]] ||
    fail "make up's cairnd does not present its own etcd certificate cairn-upn1: $args"
pass "cairnd presents its own etcd certificate (cairn-upn1)"
assert_eq 600 "$(stat -c %a "$etls/cairn-upn1-key.pem")" "cairn-upn1-key.pem is mode 0600"
subject=$(openssl x509 -noout -subject -in "$etls/cairn-upn1.pem")
[[ $subject == *"CN = cairn-upn1"* ]] || fail "cairn-upn1.pem's subject: $subject"

roles=$(etcd_tls_ctl "$url" "$etls" user get cairn-upn1 | sed -n 's/^Roles: *//p')
assert_eq cairn-upn1 "$roles" "etcd user cairn-upn1 has its own role only (not cairn)"
# cairnd wrote its liveness key with that identity
live=$(etcd_tls_ctl "$url" "$etls" get /cairn/live/upn1 --print-value-only)
assert_eq "127.0.0.1:$CAIRN_PORT" "$live" "cairnd published /cairn/live/upn1 as cairn-upn1"

# as ID: etcdctl with the client certificate ID of the etcd CA
as() {
    local id=$1
    shift
    ETCDCTL_API=3 etcdctl --endpoints "$url" --cacert "$etls/ca.pem" --cert "$etls/$id.pem" \
        --key "$etls/$id-key.pem" --dial-timeout 3s --command-timeout 5s "$@"
}
# refused ID WHAT ARGS...: etcd answers permission denied
refused() {
    local id=$1 what=$2 out
    shift 2
    if out=$(as "$id" "$@" 2>&1); then
        fail "$id may $what: $out"
    fi
    [[ $out == *"permission denied"* ]] || fail "$id $what: not a permission refusal: $out"
    pass "$id may not $what"
}
allowed() {
    local id=$1 what=$2 out
    shift 2
    out=$(as "$id" "$@" 2>&1) || fail "$id may not $what: $out"
    pass "$id may $what"
}

# a second node of the same make-up cluster, as cluster-up.sh makes one
etcd_tls_client "$etls" cairn-upn2 || fail "etcd client certificate cairn-upn2"
etcd_tls_own_node_user "$url" "$etls" upn2 /cairn || fail "etcd user cairn-upn2"
allowed cairn-upn1 "read every key of the cluster" get /cairn --prefix --keys-only
allowed cairn-upn1 "write a cluster key" put /cairn/gateway/test/x y
allowed cairn-upn1 "delete a cluster key" del /cairn/gateway/test/x
refused cairn-upn1 "write another node's liveness key" put /cairn/live/upn2 10.0.0.9:7420
refused cairn-upn1 "delete another node's liveness key" del /cairn/live/upn2
refused cairn-upn1 "delete every node's liveness keys" del /cairn/live/ --prefix
allowed cairn-upn2 "write its own liveness key" put /cairn/live/upn2 127.0.0.1:1
refused cairn-upn2 "overwrite upn1's liveness key" put /cairn/live/upn1 10.0.0.9:7420
allowed cairn-upn2 "delete its own liveness key" del /cairn/live/upn2
refused cairn-upn1 "write outside /cairn" put /elsewhere x
refused cairn-upn1 "read outside /cairn" get /elsewhere
refused cairn-upn1 "add an etcd user" user add intruder --no-password
refused cairn-upn1 "grant itself a role" user grant-role cairn-upn1 root
assert_eq "127.0.0.1:$CAIRN_PORT" "$(etcd_tls_ctl "$url" "$etls" get /cairn/live/upn1 --print-value-only)" \
    "upn1's liveness key is untouched"

# a user made with the shared role before (etcd_tls_node_user) loses it
etcd_tls_client "$etls" cairn-upn3 || fail "etcd client certificate cairn-upn3"
etcd_tls_node_user "$url" "$etls" cairn-upn3 || fail "etcd user cairn-upn3 with role cairn"
allowed cairn-upn3 "(with role cairn) write another node's liveness key" put /cairn/live/upn2 x
as cairn-upn3 del /cairn/live/upn2 >/dev/null || fail "cairn-upn3 del /cairn/live/upn2"
etcd_tls_own_node_user "$url" "$etls" upn3 /cairn || fail "etcd user cairn-upn3 to its own role"
assert_eq cairn-upn3 "$(etcd_tls_ctl "$url" "$etls" user get cairn-upn3 | sed -n 's/^Roles: *//p')" \
    "role cairn revoked from a user converted to its own role"
refused cairn-upn3 "(converted) write another node's liveness key" put /cairn/live/upn2 x

# make up again: harmless, the volume still works
"$CL_REPO/scripts/cluster-up.sh" >>"$up_log" 2>&1 || fail "make up a second time failed: $(tail -n 15 "$up_log")"
assert_eq "$pid" "$(cat "$CAIRN_RUN_DIR/pid/cairnd-upn1.pid")" "the second make up kept cairnd"
echo again >"$mnt/g" || fail "write after the second make up"
assert_eq again "$(cat "$mnt/g")" "the volume works after a second make up"
finish

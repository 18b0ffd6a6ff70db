#!/usr/bin/env bash
# kill -9 of a brick node during a write stream: a 2x3 volume on 3 nodes; n2 is killed
# while two clients write and read, restarted later; then heal, verify every acknowledged
# write, linearizability, and identical replicas.
set -uo pipefail
# shellcheck source=tests/faults/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fx_cluster 3 2 3
# Who may use the volume is changed only by an admin (the certificate's role, not the
# address): c1 with a client certificate is refused.
"$CAIRN_BIN_DIR/cairn" client certificate issue c1 --out "$FX_DIR/c1.pem" >/dev/null ||
    fx_fail "issue c1's client certificate"
said=$(fx_cli --credentials "$FX_DIR/c1.pem" volume set "$FX_VOLUME" auth.reject "${FX_IP[c2]}" 2>&1) &&
    fx_fail "c1 with a client certificate changed auth.reject: $said"
grep -q "permission denied for client c1.*needs role admin" <<<"$said" ||
    fx_fail "auth.reject set from c1 said: $said"
said=$(fx_in n1 timeout 30 "$CAIRN_BIN_DIR/cairn" --host "${FX_IP[n1]}:7420" \
    volume set "$FX_VOLUME" auth.reject 10.9.9.9 2>&1) || fx_fail "auth.reject set on n1: $said"
said=$(fx_in n1 timeout 30 "$CAIRN_BIN_DIR/cairn" --host "${FX_IP[n1]}:7420" \
    volume reset "$FX_VOLUME" auth.reject 2>&1) || fx_fail "auth.reject reset on n1: $said"
fx_pass "auth.allow / auth.reject are changed only by an admin (a client certificate refused on c1, done on n1)"
fx_workload c1 writes c1 20
W1=$FX_WL_PID
fx_workload c2 writes c2 20
W2=$FX_WL_PID
fx_sleep 5
fx_kill9 n2
fx_sleep 7
fx_start_node n2
fx_wait_workload "$W1" c1
fx_wait_workload "$W2" c2
if fx_wait_healthy 40; then fx_pass "n2 healed"; else fx_soft_fail "volume did not heal within 40s after n2 came back"; fi
fx_verify writes c1 c2
fx_verify_replicas
fx_finish

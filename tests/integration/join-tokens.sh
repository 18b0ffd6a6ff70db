#!/usr/bin/env bash
# Join tokens: a node joins the pool only with a single-use, expiring token. Without one,
# `peer probe` is refused with EACCES and the pool is unchanged; a used, revoked or expired
# token is refused saying which; a good token works once, from `peer probe --token` or from
# the new node's own `cairnd --join-token-file`; `peer token list` never shows a secret.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cl_init
cl_start_etcd
cl_start_node n1
cl_start_node n2
cl_start_node n3

pool_size() { cairn_cli --json pool list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["peers"]))'; }
in_pool() { cairn_cli --json pool list | python3 -c 'import json,sys; sys.exit(0 if sys.argv[1] in [p["name"] for p in json.load(sys.stdin)["peers"]] else 1)' "$1"; }
new_token() { cairn_cli peer token create "$@" 2>/dev/null; }

# probe_refused NODE WHY TOKEN...: `peer probe NODE` fails with EACCES and a message with WHY.
probe_refused() {
    local node=$1 why=$2 out
    shift 2
    if out=$(cairn_cli --json peer probe "$(cl_node_addr "$node")" "$@" 2>/dev/null); then
        fail "peer probe $node $* succeeded; expected a refusal ($why)"
    fi
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if d["errno"]=="EACCES" and sys.argv[2] in d["message"] else 1)' \
        "$out" "$why" || fail "peer probe $node $*: expected EACCES with '$why', got: $out"
    in_pool "$node" && fail "$node is in the pool after a refused probe"
    pass "peer probe $node refused with EACCES: $why"
}

assert_eq 1 "$(pool_size)" "a node started against the cluster's etcd is not a member by itself"
in_pool n2 && fail "n2 joined without a token"
probe_refused n2 "needs a join token"
probe_refused n2 "malformed" --token not-a-token
probe_refused n2 "not valid" --token "0123abcd.$(printf '0%.0s' {1..32})"

# A good token: printed once, listed without its secret, works once.
token=$(new_token --ttl 1h) || fail "peer token create"
[[ $token =~ ^[0-9a-f]{8}\.[0-9a-f]{32}$ ]] || fail "token '$token' is not ID.SECRET"
id=${token%%.*} secret=${token#*.}
list=$(cairn_cli peer token list) || fail "peer token list"
grep -q "^$id .*valid" <<<"$list" || fail "token $id not listed as valid: $list"
json=$(cairn_cli --json peer token list)
grep -qF "$secret" <<<"$list$json" && fail "peer token list shows the secret"
pass "peer token create prints ID.SECRET; peer token list shows $id without the secret"

cairn_cli peer probe "$(cl_node_addr n2)" --token "$token" >/dev/null || fail "peer probe n2 --token"
in_pool n2 || fail "n2 not in the pool after a probe with a token"
cairn_cli peer probe "$(cl_node_addr n2)" | grep -q "already in peer list" ||
    fail "probing a member again should need no token and say it is already in the list"
pass "peer probe n2 --token: n2 joined; probing it again needs no token"
cairn_cli peer token list | grep -q "^$id .*used .* by n2" || fail "token $id not listed as used by n2"

probe_refused n3 "already used" --token "$token"
revoked=$(new_token --ttl 1h)
cairn_cli peer token revoke "${revoked%%.*}" >/dev/null || fail "peer token revoke"
probe_refused n3 "revoked" --token "$revoked"
expiring=$(new_token --ttl 1s)
sleep 2
probe_refused n3 "expired" --token "$expiring"
CAIRN_JOIN_TOKEN=$(new_token --ttl 5m) cairn_cli peer probe "$(cl_node_addr n3)" >/dev/null ||
    fail "peer probe n3 with CAIRN_JOIN_TOKEN"
in_pool n3 || fail "n3 not in the pool"
pass "peer probe takes the token from CAIRN_JOIN_TOKEN"

# The kubeadm way: the new node's cairnd joins at start with a token file.
new_token --ttl 5m >"$CL_DIR/n4.token"
chmod 600 "$CL_DIR/n4.token"
CL_CAIRND_ARGS=(--join-token-file "$CL_DIR/n4.token")
cl_start_node n4
CL_CAIRND_ARGS=()
wait_until 10 in_pool n4 || fail "cairnd --join-token-file: n4 did not join"
pass "cairnd --join-token-file: n4 joined at start"

# The same (now used) token on another node: cairnd refuses to start and says why.
mkdir -p "$CL_DIR/state/n5"
etcd_tls=()
[[ $CL_ETCD_TLS != 1 ]] || mapfile -t etcd_tls < <(etcd_tls_cairnd_args "$CL_DIR/etcd-tls")
if timeout 20 "$CAIRN_BIN_DIR/cairnd" --name n5 --listen "$CL_HOST:$(free_port)" \
    --etcd "$(cl_etcd_url)" "${etcd_tls[@]}" --state-dir "$CL_DIR/state/n5" \
    --join-token-file "$CL_DIR/n4.token" >"$CL_DIR/log/cairnd-n5.out" 2>&1; then
    fail "cairnd n5 started with a used join token"
fi
grep -q "already used" "$CL_DIR/log/cairnd-n5.out" || fail "cairnd n5: no 'already used' in: $(cat "$CL_DIR/log/cairnd-n5.out")"
in_pool n5 && fail "n5 joined with a used token"
pass "cairnd --join-token-file with a used token exits, saying it was used"

# A restarted member needs no token.
cl_restart_node n2
in_pool n2 || fail "n2 left the pool after a restart"
assert_eq 4 "$(pool_size)" "pool of n1..n4 after a member's restart"

# No secret of any token in the logs or the state dirs.
for t in "$token" "$revoked" "$expiring" "$(cat "$CL_DIR/n4.token")"; do
    if grep -rqF "${t#*.}" "$CL_DIR/log" "$CL_DIR/state"; then
        fail "the secret of join token ${t%%.*} is in $(grep -rlF "${t#*.}" "$CL_DIR/log" "$CL_DIR/state" | head -1)"
    fi
done
pass "no join token secret in the daemons' logs or state dirs"
finish

#!/usr/bin/env bash
# Audit log and secrets. cairnd listens on the root end of a veth pair; a client in a
# network namespace at the other end is not a node of the cluster. Checked:
# - a volume stop and requests refused for want of rights are recorded in audit.log
#   (mode 0640; who, what, when, result), readable with `cairn audit log` from a node only;
# - auth.allow / auth.reject still cannot be changed from a non-node;
# - a CHAP secret is shown masked unless asked for with --show-secrets from a node, a
#   non-node reading the target sees it masked and cannot write the mask back over it;
# - no secret (CHAP, join token) in any daemon log, audit log or state file, and no
#   world-readable file in the state dirs holds one.
set -euo pipefail
NET=10.214.$(($$ % 250))
HOST_ADDR=$NET.1
CLIENT_ADDR=$NET.2
NS=cairn-au-$$
VR=cau$$r
export CL_HOST=$HOST_ADDR
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) == 0 ]] || fail "needs root (network namespaces)"
cl_init
net_down() {
    ip link del "$VR" 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
}
trap 'rc=$?; net_down; (exit $rc); cl_cleanup' EXIT
ip netns add "$NS" || fail "ip netns add $NS"
ip link add "$VR" type veth peer name eth0 netns "$NS" || fail "veth $VR / $NS:eth0"
if ! { ip addr add "$HOST_ADDR/30" dev "$VR" && ip link set "$VR" up &&
    ip -n "$NS" addr add "$CLIENT_ADDR/30" dev eth0 && ip -n "$NS" link set eth0 up &&
    ip -n "$NS" link set lo up; }; then
    fail "addressing the veth pair"
fi

cluster_up 2 avol 2 2
n1=$(cl_node_addr n1)
audit=$CL_DIR/log/audit.log   # beside n1's --log-file (all nodes share $CL_DIR/log here)
# from_client ARGS: the cairn CLI run by the host that is not a node.
# With TLS, rights follow the certificate's role, not the address: the other host holds a
# client certificate (an admin one would be allowed from anywhere, security.sh).
from_client() {
    ip netns exec "$NS" "$CAIRN_BIN_DIR/cairn" --credentials "$CL_DIR/outsider.pem" --host "$n1" "$@"
}
# audit_has PY_CONDITION: some record `r` of n1's audit log satisfies it.
audit_has() {
    python3 -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(0 if any(eval(sys.argv[2], {}, {"r": r}) for r in recs) else 1)' "$audit" "$1"
}

# --- audit log -------------------------------------------------------------------------
cairn_cli --mode=script volume stop avol >/dev/null || fail "volume stop avol"
cairn_cli volume start avol >/dev/null || fail "volume start avol"
[[ -f $audit ]] || fail "no audit log at $audit"
assert_eq 640 "$(stat -c %a "$audit")" "audit.log is mode 0640"
audit_has "r['what'] == 'VolumeStop' and r['args']['name'] == 'avol' and r['result']['ok'] and r['who']['addr'].startswith('$HOST_ADDR:') and r['time'].endswith('Z')" ||
    fail "volume stop not in the audit log: $(tail -n 5 "$audit")"
pass "volume stop recorded: who, what, when (RFC 3339), ok"
cairn_cli volume stop nosuchvol --mode=script >/dev/null 2>&1 && fail "stop of a missing volume succeeded"
audit_has "r['what'] == 'VolumeStop' and r['result'].get('errno') == 'ENOENT'" ||
    fail "failed volume stop not recorded with its errno"
pass "a failed action is recorded with its errno and message"

# Refused: join tokens, audit log and auth.allow from a host that is not a node.
cairn_cli client certificate issue outsider --out "$CL_DIR/outsider.pem" >/dev/null || fail "issue outsider"
out=$(from_client --json peer token create 2>/dev/null) && fail "a non-node created a join token: $out"
grep -q EACCES <<<"$out" || fail "peer token create from $CLIENT_ADDR: expected EACCES, got $out"
from_client audit log >/dev/null 2>&1 && fail "a non-node read the audit log"
from_client volume set avol auth.allow "$CLIENT_ADDR" >/dev/null 2>&1 &&
    fail "a non-node changed auth.allow"
cairn_cli --json volume info avol | grep -q "$CLIENT_ADDR" && fail "auth.allow changed anyway"
for what in PeerTokenCreate AuditLog VolumeSet; do
    audit_has "r['what'] == '$what' and r['result'].get('errno') == 'EACCES' and r['who']['addr'].startswith('$CLIENT_ADDR:')" ||
        fail "refused $what from $CLIENT_ADDR not in the audit log"
done
pass "requests refused to a non-node (token create, audit log, auth.allow) are refused and recorded"
log=$(cairn_cli --json audit log --since 10m) || fail "cairn audit log"
python3 -c 'import json,sys; r=json.loads(sys.argv[1])["records"]; sys.exit(0 if any(x["what"]=="VolumeStop" for x in r) else 1)' "$log" ||
    fail "cairn audit log --json has no VolumeStop"
cairn_cli audit log | grep -q "VolumeStop" || fail "cairn audit log (text) has no VolumeStop"
pass "cairn audit log shows the records from a node"

# --- secrets -------------------------------------------------------------------------------
iqn=iqn.2024-01.io.cairn.test:secrets
init=iqn.1994-05.com.redhat:client9
chap=S3cret-Chap-$RANDOM$RANDOM
cairn_cli iscsi target create "$iqn" >/dev/null || fail "iscsi target create"
cairn_cli iscsi target acl add "$iqn" "$init" --chap-user user9 --chap-password "$chap" >/dev/null ||
    fail "iscsi target acl add with CHAP"
cairn_cli --json iscsi target show "$iqn" | grep -qF "$chap" && fail "target show prints the CHAP secret without --show-secrets"
cairn_cli --json iscsi target list | grep -qF "$chap" && fail "target list prints the CHAP secret"
cairn_cli --json iscsi target show "$iqn" --show-secrets | grep -qF "$chap" ||
    fail "target show --show-secrets from a node does not show the CHAP secret"
pass "CHAP secret masked in target show/list; shown with --show-secrets on a node"
from_client --json iscsi target show "$iqn" --show-secrets | grep -qF "$chap" &&
    fail "a non-node got the CHAP secret"
from_client iscsi target portal add "$iqn" 10.9.9.9 >/dev/null 2>&1 &&
    fail "a non-node wrote a target document back with its secret masked"
cairn_cli --json iscsi target show "$iqn" --show-secrets | grep -qF "$chap" ||
    fail "the CHAP secret was overwritten"
pass "a non-node sees the CHAP secret masked and cannot write the mask over it"
hits=$(grep -rlF -- "$chap" "$CL_DIR/log" "$CL_DIR/state" || true)
[[ -z $hits ]] || fail "the CHAP secret is written in: $hits"
world=$(find "$CL_DIR/state" "$CL_DIR/log" -type f -perm -o+r -exec grep -lF -- "$chap" {} + || true)
[[ -z $world ]] || fail "world-readable files hold the CHAP secret: $world"
find "$CL_DIR/log" -name audit.log -perm -o+r | grep -q . && fail "an audit log is world-readable"
pass "no CHAP secret in the logs, audit logs or state dirs; no world-readable secret file"
finish

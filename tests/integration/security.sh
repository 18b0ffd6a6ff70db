#!/usr/bin/env bash
# Cluster security at the CLI and mount level (docs/security.md): with TLS on, the admin
# credential manages the cluster; without credentials (a non-root user, who cannot read
# the admin credential), over plaintext, or with a client certificate, management is
# refused with a clear message and the volume stays started; a client certificate limited
# to another volume cannot mount this one; a read-only certificate mounts and reads but
# cannot write (EROFS). The refusals are checked from this host and from another network
# namespace.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# cairnd listens on the host end of a veth pair whose other end is in a network
# namespace of its own: another host, for the checks "from elsewhere" below.
ns=cairn-sec-$$
hv=secv$$
net=10.231.$((RANDOM % 250 + 1))
cl_init
sec_cleanup() {
    local rc=$?
    ip netns del "$ns" 2>/dev/null || true
    ip link del "$hv" 2>/dev/null || true
    (exit "$rc")
    cl_cleanup
}
trap sec_cleanup EXIT
ip netns add "$ns" || fail "cannot create network namespace $ns"
ip link add "$hv" type veth peer name eth0 netns "$ns" || fail "cannot make a veth pair into $ns"
{ ip addr add "$net.1/24" dev "$hv" && ip link set "$hv" up; } || fail "cannot configure $hv"
{ ip -n "$ns" addr add "$net.2/24" dev eth0 && ip -n "$ns" link set eth0 up &&
    ip -n "$ns" link set lo up; } || fail "cannot configure eth0 in $ns"
CL_HOST=$net.1
cluster_up 1 sec 1 1
cli=$CAIRN_BIN_DIR/cairn
addr=$(cl_node_addr n1)
echo "secret data" >"$CL_MNT/f" || fail "write through the admin mount"

status() { cairn_cli volume info sec --json | grep -o '"status": *"[A-Za-z]*"' | head -1 | grep -o '[A-Za-z]*"$' | tr -d '"'; }
assert_eq Started "$(status)" "volume status with the admin credential"
[[ $(stat -c %a "$CAIRN_CA_DIR/admin.pem") == 600 && $(stat -c %a "$CAIRN_CA_DIR/ca.key") == 600 ]] ||
    fail "admin.pem / ca.key are not 0600: $(stat -c '%n %a' "$CAIRN_CA_DIR"/*)"
pass "the first node created the CA and admin.pem, both 0600; the admin manages"

# refused CMD... : the command fails, its message matches PATTERN, the volume is still started.
refused() {
    local what=$1 pattern=$2 out rc=0
    shift 2
    out=$("$@" 2>&1) || rc=$?
    ((rc != 0)) || fail "$what: not refused: $out"
    grep -qiE "$pattern" <<<"$out" || fail "$what: message does not say why (/$pattern/): $out"
    assert_eq Started "$(status)" "volume status after: $what"
    pass "$what: refused ($out)"
}

stop=(--host "$addr" --mode=script volume stop sec)
# A non-root user on this host cannot read the admin credential.
chmod o+x "$CL_DIR" 2>/dev/null || true
refused "non-root user with the admin credential's path" "permission denied|cannot load credentials" \
    runuser -u nobody -- env CAIRN_CREDENTIALS="$CAIRN_CREDENTIALS" "$cli" "${stop[@]}"
refused "no credentials at all" "no credentials" \
    env -u CAIRN_CREDENTIALS "$cli" "${stop[@]}"
refused "plaintext connection" "only TLS" \
    env CAIRN_TRANSPORT=plain "$cli" "${stop[@]}"

# From another network namespace (another host): without credentials, or in plaintext.
refused "another host without credentials" "no credentials" \
    ip netns exec "$ns" env -u CAIRN_CREDENTIALS "$cli" "${stop[@]}"
refused "another host in plaintext" "only TLS" \
    ip netns exec "$ns" env CAIRN_TRANSPORT=plain "$cli" "${stop[@]}"
refused "another host, non-root, with the admin credential's path" "permission denied|cannot load credentials" \
    ip netns exec "$ns" runuser -u nobody -- env CAIRN_CREDENTIALS="$CAIRN_CREDENTIALS" "$cli" "${stop[@]}"
out=$(ip netns exec "$ns" "$cli" --host "$addr" volume info sec 2>&1) ||
    fail "another host with the admin credential cannot read volume info: $out"
pass "another host with the admin credential manages"
# What only a node's address allowed before is the admin role's now, from any host:
# join tokens and changing auth.allow / auth.reject.
out=$(ip netns exec "$ns" "$cli" --host "$addr" peer token create --ttl 1m 2>&1) ||
    fail "another host with the admin credential cannot create a join token: $out"
out=$(ip netns exec "$ns" "$cli" --host "$addr" volume set sec auth.reject 192.0.2.7 2>&1) ||
    fail "another host with the admin credential cannot change auth.reject: $out"
cairn_cli volume reset sec auth.reject >/dev/null || fail "volume reset sec auth.reject"
pass "another host with the admin credential creates join tokens and changes auth.reject (role, not address)"

# A credential of another cluster CA.
mkdir -p "$CL_DIR/other-ca"
openssl_free_ca=$CL_DIR/other-ca
# cairnd creates a CA in an empty CA dir: borrow that with a throwaway node that never
# reaches etcd (it exits after creating the CA and its certificate).
timeout 20 "$CAIRN_BIN_DIR/cairnd" --name other --listen 127.0.0.1:0 --etcd http://127.0.0.1:1 \
    --state-dir "$CL_DIR/other-state" --ca-dir "$openssl_free_ca" \
    --log-file "$CL_DIR/log/other-ca.log" >/dev/null 2>&1 || true
[[ -f $openssl_free_ca/admin.pem ]] || fail "no admin.pem from a second CA: $(cat "$CL_DIR/log/other-ca.log")"
refused "admin credential of another cluster CA" "not signed by" \
    "$cli" --credentials "$openssl_free_ca/admin.pem" "${stop[@]}"

# Client certificates.
"$cli" client certificate issue web --volumes other --out "$CL_DIR/web.pem" >/dev/null ||
    fail "issue a client certificate"
"$cli" client certificate issue reader --read-only --out "$CL_DIR/reader.pem" >/dev/null ||
    fail "issue a read-only client certificate"
assert_eq 600 "$(stat -c %a "$CL_DIR/web.pem")" "mode of an issued credential"
refused "client certificate stopping a volume" "permission denied for client web.*needs role admin" \
    "$cli" --credentials "$CL_DIR/web.pem" "${stop[@]}"

mkdir -p "$CL_DIR/m-web" "$CL_DIR/m-ro"
out=$(timeout 60 "$CAIRN_BIN_DIR/mount-cairn" "$addr:/sec" "$CL_DIR/m-web" -o "credentials=$CL_DIR/web.pem" 2>&1) &&
    fail "a certificate for volume 'other' mounted volume sec: $out"
grep -q "only volume(s) other" <<<"$out" || fail "mount refusal does not say why: $out"
pass "a certificate limited to another volume cannot mount sec ($out)"

setsid "$CAIRN_BIN_DIR/mount-cairn" "$addr:/sec" "$CL_DIR/m-ro" -o "credentials=$CL_DIR/reader.pem" \
    </dev/null >>"$CL_DIR/log/mount-ro.log" 2>&1 &
CL_MOUNTS[$CL_DIR/m-ro]=sec
wait_mount "$CL_DIR/m-ro" $! 30 || fail "read-only certificate: mount failed"
assert_eq "secret data" "$(cat "$CL_DIR/m-ro/f")" "read through the read-only mount"
if err=$(bash -c 'echo changed >"$1"' _ "$CL_DIR/m-ro/f" 2>&1); then fail "a read-only certificate wrote f"; fi
grep -qi "read-only file system" <<<"$err" || fail "write through the read-only mount: $err (expected EROFS)"
if err=$(touch "$CL_DIR/m-ro/new" 2>&1); then fail "a read-only certificate created a file"; fi
assert_eq "secret data" "$(cat "$CL_MNT/f")" "f unchanged after the refused writes"
pass "a read-only certificate reads, and its writes fail with EROFS ($err)"

finish

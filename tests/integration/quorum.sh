#!/usr/bin/env bash
# The write quorum of a replica-2 set (cluster.quorum-type, gluster's option): with the
# default (none) writes go on with either brick down; with `auto` they go on only while the
# set's first brick is up (exactly half, including the first), and are refused with EROFS
# otherwise; `fixed` with cluster.quorum-count 2 needs both. Bad values are refused.
#
# Layout: 2 nodes, volume 1 x 2: brick 0 (the set's first) on n1, brick 1 on n2.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_up 2 q 2 2

state_of() { # NODE BRICK: that brick's state in NODE's view
    cairn_cli_at "$1" volume status q --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print([b["state"].lower() for v in d["volumes"] for b in v["bricks"] if b["index"] == int(sys.argv[1])][0])' "$2"
}
is_state() { [[ $(state_of "$1" "$2" 2>/dev/null) == "$3" ]]; }

# try_write DIR NAME: write+fsync a file; prints "ok" or the errno name.
try_write() {
    python3 - "$1/$2" <<'PY'
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, b"quorum test\n")
    os.fsync(fd)
    os.close(fd)
    print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
PY
}

rc=0
out=$(cairn_cli volume set q cluster.quorum-type maybe 2>&1) || rc=$?
{ ((rc == 1)) && grep -q "invalid value 'maybe' for option cluster.quorum-type" <<<"$out"; } ||
    fail "a bad quorum type was not refused (exit $rc): $out"
rc=0
out=$(cairn_cli volume set q cluster.quorum-count 9 2>&1) || rc=$?
((rc == 1)) || fail "quorum-count 9 accepted: $out"
pass "bad quorum values refused"

[[ $(try_write "$CL_MNT" a) == ok ]] || fail "write with both bricks up"
cairn_cli volume set q cluster.quorum-type auto >/dev/null || fail "set quorum-type auto"

# Second brick down: exactly half, including the first brick: writes go on.
cl_stop_node n2
wait_until 30 is_state n1 1 down || fail "brick 1 not down: $(cairn_cli volume status q)"
[[ $(try_write "$CL_MNT" b) == ok ]] || fail "auto quorum refused a write with the first brick up"
pass "auto: the set's first brick up (1 of 2): writes go on"

# fixed 2: both needed.
cairn_cli volume set q cluster.quorum-type fixed >/dev/null
cairn_cli volume set q cluster.quorum-count 2 >/dev/null
r=$(try_write "$CL_MNT" c)
[[ $r == EROFS ]] || fail "fixed quorum of 2 with 1 brick up: write gave $r, want EROFS"
pass "fixed 2: one brick up: EROFS"

cl_start_node n2
wait_until 60 is_state n1 1 up || fail "brick 1 did not come back: $(cairn_cli volume status q)"
[[ $(try_write "$CL_MNT" d) == ok ]] || fail "fixed quorum met again but the write failed"
pass "both bricks up again: writes go on"

# First brick down, auto: the second alone may not write.
cairn_cli volume set q cluster.quorum-type auto >/dev/null
cl_stop_node n1
cl_mount q "$CL_DIR/mnt2" n2
wait_until 30 is_state n2 0 down || fail "brick 0 not down: $(cairn_cli_at n2 volume status q)"
r=$(try_write "$CL_DIR/mnt2" e)
[[ $r == EROFS ]] || fail "auto quorum with only the second brick up: write gave $r, want EROFS"
[[ $(cat "$CL_DIR/mnt2/d") == "quorum test" ]] || fail "reads must go on without write quorum"
pass "auto: only the second brick up: writes refused with EROFS, reads go on"

cairn_cli_at n2 volume set q cluster.quorum-type none >/dev/null
[[ $(try_write "$CL_DIR/mnt2" f) == ok ]] || fail "quorum none with one brick up refused a write"
pass "none (the default): writes go on with one brick"

finish

#!/usr/bin/env bash
# A write whose pending record cannot be written is not acknowledged (issue 21). A head
# records, durably and before it answers, that a brick which missed a write must re-copy
# the inode (docs/failure-model.md, "Writes"): a returning brick heals only what such a
# record names. Here the record cannot be written — brick 0's `.cairn/pending/1` is made
# a regular file, so recording anything for brick 1 fails with ENOTDIR — while brick 1 is
# down: the client must get EIO, not an acknowledgement (`mark_pending` returned `()` and
# the write was acknowledged before). Once the fault is gone, writes go on, brick 1 comes
# back and heals, and what was acknowledged reads back.
#
# Layout: 2 nodes, volume 1 x 2: brick 0 on n1, brick 1 on n2. About 30 s.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_up 2 pf 2 2
B0=$CL_DIR/bricks/pf-b0

state_of() { # NODE BRICK: that brick's state in NODE's view
    cairn_cli_at "$1" volume status pf --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print([b["state"].lower() for v in d["volumes"] for b in v["bricks"] if b["index"] == int(sys.argv[1])][0])' "$2"
}
is_state() { [[ $(state_of "$1" "$2" 2>/dev/null) == "$3" ]]; }

# try_write PATH TEXT: create or overwrite, fsync; prints "ok" or the errno name.
try_write() {
    python3 - "$1" "$2" <<'PY'
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        os.write(fd, sys.argv[2].encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
PY
}

[[ $(try_write "$CL_MNT/a" first) == ok ]] || fail "write with both bricks up"
wait_until 30 cl_all_up pf || fail "bricks not up: $(cairn_cli volume status pf)"

cl_stop_node n2
wait_until 30 is_state n1 1 down || fail "brick 1 not down: $(cairn_cli volume status pf)"
[[ -d $B0/.cairn/pending ]] || fail "no pending directory on brick 0 ($B0/.cairn/pending)"
# Nothing is recorded for brick 1 yet: its record directory becomes a file.
rm -rf "$B0/.cairn/pending/1"
printf 'fault injected by %s\n' "${BASH_SOURCE[0]}" >"$B0/.cairn/pending/1"

r=$(try_write "$CL_MNT/b" second)
[[ $r == EIO ]] || fail "a create whose pending record failed gave '$r', want EIO"
r=$(try_write "$CL_MNT/a" third)
[[ $r == EIO ]] || fail "a write whose pending record failed gave '$r', want EIO"
grep -q "cannot record pending heal entries.*peer=1.*ENOTDIR" "$CL_DIR/log/cairnd-n1.log" ||
    fail "n1 did not log the failed record: $(grep -i pending "$CL_DIR/log/cairnd-n1.log" | tail -5)"
pass "brick 1 down and its pending record failing: create and write get EIO"

rm -f "$B0/.cairn/pending/1"
[[ $(try_write "$CL_MNT/c" fourth) == ok ]] || fail "write after the fault is gone"
pass "fault gone: writes are acknowledged again"

cl_start_node n2
wait_until 90 cl_all_up pf || fail "brick 1 did not heal: $(cairn_cli volume status pf)"
cl_stop_node n1
wait_until 30 is_state n2 0 down || fail "brick 0 not down: $(cairn_cli_at n2 volume status pf)"
wait_until 30 test -e "$CL_MNT/c" || fail "c not visible from brick 1"
[[ $(cat "$CL_MNT/c") == fourth ]] || fail "c read from healed brick 1: '$(cat "$CL_MNT/c")'"
pass "brick 1 healed; the acknowledged write reads back from it alone"
finish

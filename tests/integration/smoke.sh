#!/usr/bin/env bash
# Smoke test of the whole backend: two cairnd nodes, a 2 x 2 volume mounted with
# mount-cairn; files written through the mount read back; `volume info --json` describes
# the volume; the cluster stopped like `make down` and started again still has the data.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_up 2 smoke 2 4
mnt=$CL_MNT

# --- the mount as tools see it ---------------------------------------------------------
# Type fuse.cairn (FUSE subtype "cairn", as Gluster's show fuse.glusterfs), source the
# server:/volume given: what findmnt -t, umount -a -t, df -t and monitoring select on.
assert_eq "fuse.cairn $(cl_node_addr n1):/smoke" \
    "$(awk -v m="$mnt" '$2 == m { print $3, $1 }' /proc/self/mounts)" "/proc/mounts type and source"
findmnt -n -t fuse.cairn -o TARGET | grep -qxF "$mnt" || fail "findmnt -t fuse.cairn does not list $mnt"
# umount -a -t in a private mount namespace: it unmounts only that namespace's copies
# (this host's other fuse.cairn mounts, and ours outside, stay).
# shellcheck disable=SC2016 # $1 is the inner bash's
unshare -m --propagation private bash -c \
    'umount -a -t fuse.cairn && ! grep -qF " $1 " /proc/self/mounts' _ "$mnt" ||
    fail "umount -a -t fuse.cairn (private namespace) did not unmount $mnt"
grep -qF " $mnt " /proc/self/mounts || fail "$mnt gone outside the private namespace"
pass "mounted as type fuse.cairn: findmnt -t fuse.cairn, umount -a -t fuse.cairn"

# --- write through the mount ------------------------------------------------------------
echo "hello cairn" >"$mnt/hello.txt" || fail "write hello.txt"
mkdir -p "$mnt/a/b/c" || fail "mkdir -p a/b/c"
echo deep >"$mnt/a/b/c/deep.txt" || fail "write a/b/c/deep.txt"
mkdir "$mnt/many" || fail "mkdir many"
for i in $(seq 1 50); do
    echo "file $i" >"$mnt/many/f$i" || fail "write many/f$i"
done
head -c $((4 << 20)) /dev/urandom >"$CL_DIR/big.src"
cp "$CL_DIR/big.src" "$mnt/big.bin" || fail "copy 4 MiB into the mount"
big_sum=$(sha256sum <"$CL_DIR/big.src" | cut -d' ' -f1)
pass "wrote files through the mount"

# check_data WHEN: everything written above reads back the same.
check_data() {
    local when=$1 n i
    assert_eq "hello cairn" "$(cat "$mnt/hello.txt")" "$when: hello.txt reads back"
    assert_eq deep "$(cat "$mnt/a/b/c/deep.txt")" "$when: a/b/c/deep.txt reads back"
    n=$(find "$mnt/many" -mindepth 1 | wc -l)
    assert_eq 50 "$n" "$when: many/ lists 50 entries"
    for i in 1 25 50; do
        [[ $(cat "$mnt/many/f$i") == "file $i" ]] || fail "$when: many/f$i has the wrong content"
    done
    assert_eq $((4 << 20)) "$(stat -c %s "$mnt/big.bin")" "$when: big.bin size"
    assert_eq "$big_sum" "$(sha256sum <"$mnt/big.bin" | cut -d' ' -f1)" "$when: big.bin checksum"
    [[ -d $mnt/a/b ]] || fail "$when: a/b is not a directory"
    [[ ! -e $mnt/nonexistent ]] || fail "$when: nonexistent file exists"
}
check_data "before restart"

# --- volume info --json -----------------------------------------------------------------
json=$(cairn_cli volume info smoke --json) || fail "cairn volume info smoke --json"
summary=$(python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
if isinstance(doc, dict) and "volumes" in doc:
    doc = doc["volumes"]
if isinstance(doc, list):
    doc = [v for v in doc if v.get("name") == "smoke"][0]
bricks = [b for s in doc["sets"] for b in s["bricks"]]
print(doc["name"], doc["status"], doc["replica"], len(doc["sets"]), len(bricks))
' "$json") || fail "volume info --json does not parse as a volume map: $json"
assert_eq "smoke Started 2 2 4" "$summary" "volume info --json: name status replica sets bricks"

# --- replication: the big file's bytes are on two bricks -------------------------------
cl_umount "$mnt"
brick_bytes=$(du -sb "$CL_DIR"/bricks/smoke-b* | awk '{s += $1} END {print s}')
((brick_bytes >= 2 * (4 << 20))) ||
    fail "bricks hold $brick_bytes bytes in all: fewer than 2 copies of the 4 MiB file"
pass "bricks hold at least 2 copies of big.bin ($brick_bytes bytes)"

# --- stop everything like make down, start again ----------------------------------------
cl_stop_all || fail "stopping the cluster"
for node in "${CL_NODES[@]}"; do
    [[ -z ${CL_PID[$node]} ]] || fail "cairnd $node still recorded as running"
done
is_mounted "$mnt" && fail "$mnt still mounted after stop"
[[ -z $(fuse_pids "$mnt") ]] || fail "a mount-cairn process for $mnt survived the stop"
pass "stop leaves no mount and no process"

cl_start_all
[[ $mnt == "$CL_MNT" ]] || fail "remounted at $CL_MNT, not $mnt"
check_data "after restart"
echo "after restart" >"$mnt/new.txt" || fail "write after restart"
assert_eq "after restart" "$(cat "$mnt/new.txt")" "write after restart reads back"

finish

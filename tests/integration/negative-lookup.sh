#!/usr/bin/env bash
# A create of a new name through the FUSE mount costs no LOOKUP round trip, soundly: after
# a lookup in a directory misses, the client lists the directory on every replica set
# (each listing leases its entries there) and answers lookups of names not in it from
# memory (backend/cache/src/dirstate.rs). Two mounts of one 2 x 2 volume, a brick per node:
# mount a creates names without brick LOOKUPs; a name made in that directory through
# mount b (create, symlink, rename from another directory, hard link) is seen through a at
# once (stat finds it, O_CREAT|O_EXCL fails with EEXIST). Mount a runs with a 30 s cache
# timeout so its directory state cannot lapse during the test: only a recall can drop it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"

cluster_up 4 nl 2 4
b=$CL_MNT
a=$CL_DIR/mnt-a
mkdir -p "$a"
setsid "$CAIRN_BIN_DIR/mount-cairn" "$(cl_node_addr "${CL_NODES[1]}"):/nl" "$a" \
    -o attr_timeout=30 </dev/null >>"$CL_DIR/log/mount-nl-a.log" 2>&1 &
CL_MOUNTS[$a]='nl'
wait_mount "$a" $! 30 || fail "mount of nl at $a failed"


# create_new DIR NAME...: O_CREAT|O_EXCL each name; prints "EEXIST NAME" for a name that
# exists and fails then.
create_new() {
    python3 - "$@" <<'EOF'
import errno, os, sys
d = sys.argv[1]
bad = 0
for n in sys.argv[2:]:
    try:
        os.close(os.open(f"{d}/{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except OSError as e:
        print(errno.errorcode[e.errno], n)
        bad = 1
sys.exit(bad)
EOF
}

# --- a's creates of new names cost no brick LOOKUP after the first --------------------
mkdir "$a/d" "$a/other"
l0=$(cl_mount_stat "$a" brick.lookup)
create_new "$a/d" $(seq -f 'f%g' 1 20) || fail "creates through a"
l1=$(cl_mount_stat "$a" brick.lookup)
[[ $((l1 - l0)) -le 1 ]] || fail "20 creates of new names through a cost $((l1 - l0)) brick LOOKUPs (want at most 1: the first miss)"
pass "20 creates through a: $((l1 - l0)) brick LOOKUP"

# a_knows TAG: a's state of d holds again (one miss re-lists d, the next create is local).
# Up to three tries: under load a recall of the change before (another set's push, sent
# before the listing's answer) can land after the re-listing and drop it once more; a
# client without the listed state pays the LOOKUP on every try.
a_knows() {
    local l0 l1 try
    for try in 1 2 3; do
        create_new "$a/d" "k$1a$try" || fail "create k$1a$try through a"
        l0=$(cl_mount_stat "$a" brick.lookup)
        create_new "$a/d" "k$1b$try" || fail "create k$1b$try through a"
        l1=$(cl_mount_stat "$a" brick.lookup)
        ((l1 - l0 == 0)) && return 0
        echo "a's create of k$1b$try cost $((l1 - l0)) brick LOOKUP(s) (try $try of 3)"
    done
    fail "brick LOOKUPs of a's create of k$1b$try (directory listed): $((l1 - l0)) on each of 3 tries, want 0"
}

# a_sees NAME WHAT: the name b made is found through a at once, and a cannot create it.
a_sees() {
    stat "$a/d/$1" >/dev/null 2>&1 || fail "$2 through b: a does not find d/$1"
    out=$(create_new "$a/d" "$1" 2>&1) && fail "$2 through b: a created d/$1 again"
    assert_eq "EEXIST $1" "$out" "$2 through b: a's O_CREAT|O_EXCL of d/$1"
    pass "$2 through b is seen through a at once"
}

a_knows 1
create_new "$b/d" fromb || fail "create through b"
a_sees fromb "a create"

a_knows 2
ln -s target "$b/d/sym"
a_sees sym "a symlink"

# Renames from another directory into d: whichever node heads d's chain on the name's
# set, the recall must reach a (16 names: their sets and the nodes heading d and the
# source directory differ; with a brick per node some rename runs on a node that holds no
# lease of d, and only the replica heading d can recall it).
for n in $(seq 1 16); do
    printf x >"$b/other/r$n"
    a_knows "r$n"
    mv "$b/other/r$n" "$b/d/moved$n"
    a_sees "moved$n" "a rename into d (moved$n)"
done

for n in 1 2 3 4; do
    printf y >"$b/other/h$n"
    a_knows "h$n"
    ln "$b/other/h$n" "$b/d/linked$n"
    a_sees "linked$n" "a hard link into d (linked$n)"
done

a_knows 3
mkdir "$b/d/subdir"
a_sees subdir "a mkdir"

# a's own unlink and rename keep its state true.
rm "$a/d/f1"
create_new "$a/d" f1 || fail "a re-creates f1 after unlinking it"
mv "$a/d/f2" "$a/d/f2b"
[[ -e $a/d/f2b && ! -e $a/d/f2 ]] || fail "a's rename f2 -> f2b"
out=$(create_new "$a/d" f2b 2>&1) && fail "a created f2b again after its own rename"
pass "a's own unlink and rename keep its directory state true"

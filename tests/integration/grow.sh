#!/usr/bin/env bash
# Growing a live volume (issue 23, docs/rebalance.md): `cairn volume add-brick` takes a
# 1 x 2 volume to 2 x 2 and then 3 x 2 while a FUSE writer creates, writes and reads
# files. Checks:
# - the bad inputs are refused with a clear message and change nothing (volume record,
#   brick directories): a brick count that is not a multiple of the replica count, a
#   replica count other than the volume's, a brick already in this volume or in another
#   one, a host that is not a peer, a peer that is down, a path on the node's root
#   filesystem without `force`, two bricks of a new set on one host, a stopped volume;
# - after each add-brick: the layout epoch moved, the volume is rebalancing, the new sets
#   are in the layout (ring order [1,2], then [1,3,2]); every directory exists on the new
#   bricks with its mode and owner;
# - new files land on the new sets at once (counted in the bricks' directories), each on
#   exactly one set (both its bricks), and every listing shows each name once;
# - every file made before or during the growth reads back with its content and inode
#   number, also through a second mount and after a remount;
# - the writer saw no error;
# - then `volume rebalance gv start` (a second start and an add-brick refused meanwhile)
#   runs on every node while a FUSE writer rewrites and reads files it moves and 60 fds
#   opened before it read after it: `status --json` fields, every node completed with no
#   failure, every acknowledged write kept, content and inode numbers unchanged through
#   both mounts, moved files whole on one set with a linkto on set 1.
# Fails on main's binaries: add-brick (and rebalance) do not exist there.
# suite-timeout: 600
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"

cluster_up 2 gv 2 2
m=$CL_MNT
b=$CL_DIR/mnt-b
cl_mount gv "$b" n2
cl_start_node n3
cl_peer_probe n3
bd=$CL_DIR/bricks

# vinfo KEY...: fields of gv's `volume info --json`, space separated.
vinfo() {
    cairn_cli --json volume info "${VOL:-gv}" | python3 -c '
import json, sys
v = json.load(sys.stdin)["volumes"][0]
print(" ".join(json.dumps(v.get(k), separators=(",", ":")) for k in sys.argv[1:]))' "$@"
}

# --- a tree made before the growth ---------------------------------------------------------
python3 - "$m" "$CL_DIR/before.json" <<'EOF' || fail "making the first tree"
import hashlib, json, os, sys
m, out = sys.argv[1:3]
rec = {}
for d in ["d0", "d1", "d1/sub", "d1/sub/deep", "w", "keep", "live"]:
    os.makedirs(f"{m}/{d}", exist_ok=True)
os.chmod(f"{m}/keep", 0o750)
for i in range(120):
    d = ["d0", "d1", "d1/sub", "d1/sub/deep"][i % 4]
    p = f"{d}/f{i}"
    data = hashlib.sha256(p.encode()).digest() * (1 + i % 40)
    with open(f"{m}/{p}", "wb") as f:
        f.write(data)
    rec[p] = [hashlib.sha256(data).hexdigest(), os.stat(f"{m}/{p}").st_ino]
json.dump(rec, open(out, "w"))
# Files rewritten by a writer while the rebalance moves them.
for k in range(40):
    with open(f"{m}/live/l{k}", "wb") as f:
        f.write(f"l{k} generation 0\n".encode() * 50)
EOF
pass "120 files in 4 directories made on the 1 x 2 volume"

# --- the FUSE writer, running through both add-bricks --------------------------------------
python3 - "$m/w" "$CL_DIR/writer" <<'EOF' &
import hashlib, os, random, sys, time
d, state = sys.argv[1:3]
done, errors = [], []
i = 0
while not os.path.exists(state + ".stop") and len(errors) < 20:
    name = f"w{i:05d}"
    data = hashlib.sha256(name.encode()).digest() * (1 + i % 64)
    try:
        fd = os.open(f"{d}/{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        done.append(name)
        j = random.choice(done)
        k = int(j[1:])
        want = hashlib.sha256(j.encode()).digest() * (1 + k % 64)
        with open(f"{d}/{j}", "rb") as f:
            got = f.read()
        if got != want:
            errors.append(f"{j}: read {len(got)} bytes, not its content")
    except OSError as e:
        errors.append(f"{name}: {e}")
    i += 1
    time.sleep(0.01)
with open(state, "w") as f:
    f.write("\n".join(done) + "\n")
with open(state + ".errors", "w") as f:
    f.write("\n".join(errors))
EOF
writer=$!
# On a failure, stop the writer before the harness unmounts (keeping the exit status).
stop_writer() {
    local rc=$?
    touch "$CL_DIR/writer.stop"
    if kill -0 "$writer" 2>/dev/null; then
        kill "$writer" 2>/dev/null
        wait "$writer" 2>/dev/null || true
    fi
    return "$rc"
}
trap 'stop_writer; cl_cleanup' EXIT

# --- bad input: refused, nothing changed ----------------------------------------------------
before=$(vinfo layout_epoch brick_count layout rebalancing)
mkdir -p "$bd"/{x1,x2,x3}
# refused EXPECT ARGS...: add-brick ARGS fails, its message holds EXPECT, nothing changed.
refused() {
    local want=$1 out
    shift
    if out=$(cairn_cli volume add-brick "$@" 2>&1); then
        fail "add-brick $* succeeded; expected a refusal ($want)"
    fi
    grep -qiF -- "$want" <<<"$out" || fail "add-brick $*: message '$out' does not say '$want'"
    assert_eq "$before" "$(vinfo layout_epoch brick_count layout rebalancing)" \
        "add-brick $* refused ('$out'), volume unchanged"
}
refused "not a multiple" gv "n1:$bd/x1" "n2:$bd/x2" "n1:$bd/x3" force
refused "replica count" gv replica 3 "n1:$bd/x1" "n2:$bd/x2" "n1:$bd/x3" force
refused "already a brick of volume gv" gv "n1:$bd/gv-b0" "n2:$bd/x2" force
mkdir -p "$bd/other0"
cairn_cli volume create other "n2:$bd/other0" force >/dev/null || fail "volume create other"
refused "already a brick of volume other" gv "n1:$bd/x1" "n2:$bd/other0" force
refused "not in 'Peer in Cluster' state" gv "n1:$bd/x1" "nosuchhost:$bd/x2" force
cl_stop_node n3
refused "is down" gv "n1:$bd/x1" "n3:$bd/x2" force
# A directory that does not exist directly under / is on the root filesystem.
refused "root filesystem" gv "n1:/cairn-grow-$$/b1" "n2:/cairn-grow-$$/b2"
[[ ! -e /cairn-grow-$$ ]] || fail "the refused root-filesystem brick was made"
refused "same server" gv "n1:$bd/x1" "n1:$bd/x2"
cairn_cli volume start other >/dev/null || fail "start volume other"
cairn_cli volume stop other force >/dev/null || fail "stop volume other"
mkdir -p "$bd/other1"
before=$(VOL=other vinfo layout_epoch brick_count layout rebalancing)
VOL=other refused "is stopped" other "n1:$bd/other1" force
for x in x1 x2 x3 other1; do
    [[ -z $(ls -A "$bd/$x") ]] || fail "refused brick $x was prepared anyway: $(ls -A "$bd/$x")"
done
pass "no refused brick directory was touched"

# --- 1 x 2 -> 2 x 2 --------------------------------------------------------------------------
# grow NAME...: add a set of bricks NAME on n1 and n2 (force: they are on the root fs here).
grow() {
    local out
    mkdir -p "$bd/$1" "$bd/$2"
    out=$(cairn_cli volume add-brick gv replica 2 "n1:$bd/$1" "n2:$bd/$2" force 2>&1) ||
        fail "add-brick gv $1 $2: $out"
    pass "add-brick: $out"
}
sleep 1
grow s2a s2b
assert_eq '2 4 [1,2] true' "$(vinfo layout_epoch brick_count layout rebalancing)" \
    "layout epoch 2, 4 bricks, sets [1,2] in the layout, rebalancing"

# check_dirs BRICK...: every directory of the first brick exists on BRICK, same mode/owner.
check_dirs() {
    local brk d
    for brk in "$@"; do
        while read -r d; do
            [[ -d $bd/$brk/data/$d ]] || fail "directory $d missing on new brick $brk"
            assert_eq "$(stat -c %a.%u.%g "$bd/gv-b0/data/$d")" \
                "$(stat -c %a.%u.%g "$bd/$brk/data/$d")" "mode and owner of $d on $brk" >/dev/null
        done < <(cd "$bd/gv-b0/data" && find . -mindepth 1 -type d -printf '%P\n')
    done
    pass "every directory is on $* with its mode and owner"
}
check_dirs s2a s2b

# new_files TAG: 200 new files in d0 and in a new directory; prints how many of them are
# on each set, as "SET:COUNT ..." (set 1 = gv-b0/gv-b1, 2 = s2a/s2b, 3 = s3a/s3b).
new_files() {
    mkdir -p "$m/new-$1"
    python3 - "$m" "$1" "$bd" <<'EOF' || fail "new files $1 (see above)"
import os, sys
m, tag, bricks = sys.argv[1:4]
sets = {1: ("gv-b0", "gv-b1"), 2: ("s2a", "s2b"), 3: ("s3a", "s3b")}
count = {}
for i in range(200):
    p = f"{'d0' if i % 2 else 'new-' + tag}/{tag}-n{i}"
    with open(f"{m}/{p}", "wb") as f:
        f.write(p.encode())
    on = [s for s, bs in sets.items() if all(os.path.exists(f"{bricks}/{b}/data/{p}") for b in bs)]
    anywhere = [b for bs in sets.values() for b in bs if os.path.exists(f"{bricks}/{b}/data/{p}")]
    assert len(on) == 1 and len(anywhere) == 2, f"{p} is on bricks {anywhere}, not on both bricks of one set"
    count[on[0]] = count.get(on[0], 0) + 1
print(" ".join(f"{s}:{c}" for s, c in sorted(count.items())))
EOF
}
spread=$(new_files g2)
echo "new files after the first add-brick: $spread"
n2=$(sed -n 's/.*2:\([0-9]*\).*/\1/p' <<<"$spread")
((${n2:-0} >= 60 && ${n2:-0} <= 140)) || fail "of 200 new files ${n2:-0} went to the new set 2 (want about half)"
pass "new files go to the new set at once: $spread"

# Hard links made on 2 sets: a link whose name hashes to the other set than its file's
# leaves a linkto there.
python3 - "$m" <<'EOF' || fail "hard links on the 2 x 2 volume"
import os, sys
m = sys.argv[1]
for i in range(0, 120, 4):
    os.link(f"{m}/d0/f{i}", f"{m}/d1/hl{i}")
EOF

# --- 2 x 2 -> 3 x 2 --------------------------------------------------------------------------
grow s3a s3b
assert_eq '3 6 [1,3,2] true' "$(vinfo layout_epoch brick_count layout rebalancing)" \
    "layout epoch 3, 6 bricks, set 3 placed mid-ring [1,3,2] (a third of the names move, not half)"
check_dirs s3a s3b
spread=$(new_files g3)
echo "new files after the second add-brick: $spread"
n3=$(sed -n 's/.*3:\([0-9]*\).*/\1/p' <<<"$spread")
((${n3:-0} >= 35 && ${n3:-0} <= 100)) || fail "of 200 new files ${n3:-0} went to the new set 3 (want about a third)"
pass "new files go to the newest set at once: $spread"

# Unlink the hard links and rename some first-tree files after the layout changed: no name
# comes back (a linkto left on the set a name hashed to before would bring it back), the
# files keep their content and inode number.
python3 - "$m" "$b" "$CL_DIR/before.json" <<'EOF' || fail "unlink and rename after the growth (see above)"
import hashlib, json, os, sys
m, b, before = sys.argv[1:4]
rec = json.load(open(before))
# Half the links are unlinked, half renamed (a rename leaves no linkto of its old name).
for i in range(0, 120, 8):
    os.unlink(f"{m}/d1/hl{i}")
for i in range(4, 120, 8):
    os.rename(f"{m}/d1/hl{i}", f"{m}/d1/mv{i}")
for i in range(1, 120, 8):
    os.rename(f"{m}/d1/f{i}", f"{m}/d1/r{i}")
for mnt in (m, b):
    names = set(os.listdir(f"{mnt}/d1"))
    for i in range(0, 120, 4):
        assert not os.path.lexists(f"{mnt}/d1/hl{i}"), f"{mnt}: d1/hl{i} still there after unlink or rename"
        assert f"hl{i}" not in names, f"{mnt}: d1/hl{i} listed after unlink or rename"
        links = 1 if i % 8 == 0 else 2
        assert os.stat(f"{mnt}/d0/f{i}").st_nlink == links, f"{mnt}: d0/f{i} nlink"
        if i % 8 == 4:
            assert os.stat(f"{mnt}/d1/mv{i}").st_ino == rec[f"d0/f{i}"][1], f"{mnt}: d1/mv{i}"
    for i in range(1, 120, 8):
        assert not os.path.lexists(f"{mnt}/d1/f{i}"), f"{mnt}: d1/f{i} still there after rename"
        with open(f"{mnt}/d1/r{i}", "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == rec[f"d1/f{i}"][0], f"{mnt}: d1/r{i}"
        assert os.stat(f"{mnt}/d1/r{i}").st_ino == rec[f"d1/f{i}"][1], f"{mnt}: d1/r{i} inode"
# The renamed files are checked under their new names from here on.
for i in range(1, 120, 8):
    rec[f"d1/r{i}"] = rec.pop(f"d1/f{i}")
json.dump(rec, open(before, "w"))
EOF
pass "after the growth: 15 hard links unlinked, 15 renamed, 15 files renamed; no name comes back, contents and inode numbers kept (both mounts)"

# --- the writer and everything made before ---------------------------------------------------
sleep 2
touch "$CL_DIR/writer.stop"
wait "$writer" || fail "the writer crashed"
[[ -s $CL_DIR/writer.errors ]] && fail "writer errors: $(head -c 2000 "$CL_DIR/writer.errors")"
nw=$(grep -c . "$CL_DIR/writer")
((nw > 50)) || fail "the writer wrote only $nw files"
pass "the FUSE writer wrote and read back $nw files through both add-bricks, no error"

# check MOUNT WHAT: every file of the first tree and the writer's reads back with its content
# and inode number through MOUNT; every directory lists each name once.
check() {
    python3 - "$1" "$CL_DIR/before.json" "$CL_DIR/writer" <<'EOF' || fail "files through $1 after the growth ($2)"
import hashlib, json, os, sys
m, before, writer = sys.argv[1:4]
for p, (sha, ino) in json.load(open(before)).items():
    with open(f"{m}/{p}", "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
    assert got == sha, f"{p}: content changed"
    assert os.stat(f"{m}/{p}").st_ino == ino, f"{p}: inode number changed"
for n in open(writer).read().split():
    k = int(n[1:])
    with open(f"{m}/w/{n}", "rb") as f:
        assert f.read() == hashlib.sha256(n.encode()).digest() * (1 + k % 64), f"w/{n}: content"
for root, dirs, files in os.walk(m):
    names = os.listdir(root)
    assert len(names) == len(set(names)), f"{root}: a name is listed twice"
EOF
    pass "through $2: 120 first-tree files (content, inode number), $nw writer files, no name listed twice"
}
check "$m" "the writer's mount"
check "$b" "a second mount"
cl_umount "$b"
cl_mount gv "$b" n2
check "$b" "a new mount"
# The first files are still where they were made (no rebalance ran): all on set 1.
[[ -f $bd/gv-b0/data/d1/sub/deep/f3 && -f $bd/gv-b1/data/d1/sub/deep/f3 ]] ||
    fail "d1/sub/deep/f3 left set 1 without a rebalance"
assert_eq 750 "$(stat -c %a "$m/keep")" "directory mode seen through the mount after the growth"

# --- rebalance, while a FUSE writer rewrites and reads the files it moves --------------------
# fds opened before the move read the moved files after it.
python3 - "$m" "$CL_DIR/before.json" "$CL_DIR/held" <<'EOF' &
import hashlib, json, os, sys, time
m, before, flag = sys.argv[1:4]
rec = json.load(open(before))
fds = {p: os.open(f"{m}/{p}", os.O_RDONLY) for p in sorted(rec)[:60]}
open(flag, "w").close()
while not os.path.exists(flag + ".read"):
    time.sleep(0.1)
bad = []
for p, fd in fds.items():
    data = b""
    while True:
        b = os.pread(fd, 1 << 20, len(data))
        if not b:
            break
        data += b
    if hashlib.sha256(data).hexdigest() != rec[p][0]:
        bad.append(p)
open(flag + ".done", "w").write("\n".join(bad))
EOF
held=$!
for _ in $(seq 100); do [[ -e $CL_DIR/held ]] && break; sleep 0.1; done
python3 - "$m/live" "$CL_DIR/live" <<'EOF' &
import os, random, sys, time
d, state = sys.argv[1:3]
gen, errors, n = {k: 0 for k in range(40)}, [], 0
while not os.path.exists(state + ".stop") and len(errors) < 20:
    k = random.randrange(40)
    want = f"l{k} generation {gen[k] + 1}\n".encode() * 50
    try:
        with open(f"{d}/l{k}", "r+b") as f:
            f.write(want)
            f.truncate()
            f.flush()
            os.fsync(f.fileno())
        gen[k] += 1
        with open(f"{d}/l{k}", "rb") as f:
            got = f.read()
        if got != want:
            errors.append(f"l{k}: read back {len(got)} bytes, not generation {gen[k]}")
        n += 1
    except OSError as e:
        errors.append(f"l{k}: {e}")
    time.sleep(0.005)
open(state, "w").write(" ".join(str(gen[k]) for k in range(40)))
open(state + ".errors", "w").write("\n".join(errors))
open(state + ".n", "w").write(str(n))
EOF
live=$!
# On a failure, release the fd holder and stop the live writer too (keeping the status).
stop_live() {
    local rc=$?
    touch "$CL_DIR/live.stop" "$CL_DIR/held.read"
    return "$rc"
}
trap 'stop_live; stop_writer; cl_cleanup' EXIT
sleep 1
out=$(cairn_cli volume rebalance gv start --throttle aggressive 2>&1) || fail "rebalance start: $out"
pass "rebalance start --throttle aggressive: $out"
if out=$(cairn_cli volume rebalance gv start 2>&1); then
    fail "a second rebalance start succeeded: $out"
fi
grep -q "already running" <<<"$out" || fail "second start: '$out' does not say a rebalance runs"
mkdir -p "$bd/x4" "$bd/x5"
if out=$(cairn_cli volume add-brick gv replica 2 "n1:$bd/x4" "n2:$bd/x5" force 2>&1); then
    fail "add-brick during the rebalance succeeded: $out"
fi
grep -q "a rebalance is running" <<<"$out" || fail "add-brick during the rebalance: '$out'"
pass "a second start and an add-brick are refused while the rebalance runs"
# pause holds every node's run (a node that already finished stays completed); resume.
moved_sum() {
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(n["moved"] for n in d["nodes"]))'
}
if out=$(cairn_cli volume rebalance gv pause 2>&1); then
    paused_all=0
    for _ in $(seq 300); do
        st=$(cairn_cli --json volume rebalance gv status) || fail "rebalance status"
        if python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(not all(n["state"] in ("paused", "completed") for n in d["nodes"]))' <<<"$st"; then
            paused_all=1
            break
        fi
        sleep 0.1
    done
    ((paused_all)) || fail "pause: the runs are not all paused or completed after 30 s: $st"
    grep -q '"paused"' <<<"$st" || fail "pause: no node's run is paused: $st"
    m1=$(moved_sum <<<"$st")
    sleep 1.5
    st=$(cairn_cli --json volume rebalance gv status) || fail "rebalance status"
    m2=$(moved_sum <<<"$st")
    [[ $m1 == "$m2" ]] || fail "files moved while paused ($m1, then $m2)"
    out=$(cairn_cli volume rebalance gv resume 2>&1) || fail "rebalance resume: $out"
    pass "pause held the runs ($m1 files moved, none while paused); resume: $out"
else
    grep -q "no rebalance is running" <<<"$out" || fail "rebalance pause: $out"
    pass "the rebalance ended before pause: nothing to pause"
fi
# status --json, until no node runs.
for _ in $(seq 600); do
    st=$(cairn_cli --json volume rebalance gv status) || fail "rebalance status"
    python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(any(n["state"]=="running" for n in d["nodes"]))' <<<"$st" && break
    sleep 0.2
done
sum=$(python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["volume"] == "gv", d
nodes = d["nodes"]
assert sorted(n["node"] for n in nodes) == ["n1", "n2"], nodes
for n in nodes:
    for k in ("node", "state", "layout_epoch", "scanned", "moved", "bytes", "skipped", "failures", "last_error", "started", "updated", "throttle", "rate", "eta", "estimate", "resumes", "position"):
        assert k in n, (k, n)
    assert n["state"] == "completed", n
    assert n["failures"] == 0, n
    assert n["throttle"] == "aggressive", n
print(sum(n["moved"] for n in nodes), sum(n["bytes"] for n in nodes), sum(n["skipped"] for n in nodes))
' <<<"$st") || fail "rebalance status --json: $st"
read -r moved bytes skipped <<<"$sum"
((moved > 50)) || fail "the rebalance moved only $moved files"
pass "rebalance completed on n1 and n2 (the nodes with bricks): $moved files ($bytes bytes) moved, $skipped skipped (hard links), no failure"
table=$(cairn_cli volume rebalance gv status) || fail "rebalance status"
echo "$table"
grep -q "Rebalanced-files" <<<"$table" || fail "status table: $table"
touch "$CL_DIR/held.read" "$CL_DIR/live.stop"
wait "$held" || fail "the fd holder crashed"
[[ -s $CL_DIR/held.done ]] && fail "fds opened before the move read other data: $(head -c 500 "$CL_DIR/held.done")"
pass "60 fds opened before the rebalance read every file's content after it"
wait "$live" || fail "the live writer crashed"
[[ -s $CL_DIR/live.errors ]] && fail "live writer errors: $(head -c 2000 "$CL_DIR/live.errors")"
pass "the FUSE writer rewrote and read back files $(cat "$CL_DIR/live.n") times during the rebalance, no error"
for mnt in "$m" "$b"; do
    python3 - "$mnt/live" "$CL_DIR/live" <<'EOF' || fail "live files through $mnt after the rebalance"
import sys
d, state = sys.argv[1:3]
for k, g in enumerate(open(state).read().split()):
    with open(f"{d}/l{k}", "rb") as f:
        assert f.read() == f"l{k} generation {g}\n".encode() * 50, f"l{k}: not generation {g}"
EOF
done
pass "every live file holds its last acknowledged write (both mounts)"
check "$m" "the writer's mount, after the rebalance"
check "$b" "a second mount, after the rebalance"
# On the bricks: each first-tree file with one name is whole on the two bricks of one set;
# one that left set 1 left a linkto there.
off=$(python3 - "$bd" "$CL_DIR/before.json" <<'EOF'
import json, os, sys
bd, before = sys.argv[1], json.load(open(sys.argv[2]))
sets = {1: ("gv-b0", "gv-b1"), 2: ("s2a", "s2b"), 3: ("s3a", "s3b")}
off = 0
for p in before:
    if os.stat(f"{bd}/gv-b0/data/{p}").st_nlink > 2:
        continue  # hard links are not moved
    whole = [s for s, bs in sets.items()
             if all(os.path.exists(f"{bd}/{b}/data/{p}") and os.path.getsize(f"{bd}/{b}/data/{p}") > 0 for b in bs)]
    assert len(whole) == 1, f"{p}: whole on sets {whole}"
    if whole[0] != 1:
        off += 1
        for b in sets[1]:
            assert os.path.getsize(f"{bd}/{b}/data/{p}") == 0, f"{p}: no linkto left on {b}"
assert off > 20, f"only {off} first-tree files left set 1"
print(off)
EOF
) || fail "files on the bricks after the rebalance"
pass "$off first-tree files moved off set 1 sit whole on one set, a linkto on set 1"

finish


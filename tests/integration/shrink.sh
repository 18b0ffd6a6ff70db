#!/usr/bin/env bash
# Shrinking a live volume (issue 23, docs/rebalance.md "remove-brick"): `cairn volume
# remove-brick` drains replica set 2 of a 2 x 2 volume on two nodes and drops it, while a
# FUSE writer creates and fsyncs files and 20 fds opened before stay open. Checks:
# - a brick without the rest of its set is refused, naming the set; nothing changed;
# - after `start`: set 2 is out of the layout, and no file made from then on lands on it;
# - `status --json` per node; a hard-linked file on set 2 is not moved, and `commit` is
#   refused saying how many files and bytes are left; once its second name is gone,
#   `start` again moves it and `commit` drops the set (`volume info`: 2 bricks);
# - every file made before (nested directories, 0 bytes to 2 MiB) reads back with its
#   content and inode number through both mounts and a new one; the fds opened before
#   read their files; every acknowledged write of the writer is whole; set 2's files are
#   on set 1's bricks.
# Fails on main's binaries: remove-brick does not exist there.
# suite-timeout: 300
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"

cluster_up 2 sv 2 4
m=$CL_MNT
b=$CL_DIR/mnt-b
cl_mount sv "$b" n2
bd=$CL_DIR/bricks
set2=("n1:$bd/sv-b2" "n2:$bd/sv-b3")

# vinfo KEY...: fields of sv's `volume info --json`, space separated.
vinfo() {
    cairn_cli --json volume info sv | python3 -c '
import json, sys
v = json.load(sys.stdin)["volumes"][0]
print(" ".join(json.dumps(v.get(k), separators=(",", ":")) for k in sys.argv[1:]))' "$@"
}

# --- a tree made before ---------------------------------------------------------------------
python3 - "$m" "$CL_DIR/before.json" "$bd" <<'EOF' || fail "making the tree"
import hashlib, json, os, sys
m, out, bd = sys.argv[1:4]
rec = {}
dirs = ["a", "a/b", "a/b/c", "d"]
for d in dirs:
    os.makedirs(f"{m}/{d}", exist_ok=True)
sizes = [0, 1, 4096, 65537, (1 << 20) + 5, 2 << 20]
for i in range(60):
    p = f"{dirs[i % 4]}/f{i}"
    n = sizes[i % len(sizes)]
    data = (hashlib.sha256(p.encode()).digest() * (n // 32 + 1))[:n]
    with open(f"{m}/{p}", "wb") as f:
        f.write(data)
    rec[p] = [hashlib.sha256(data).hexdigest(), os.stat(f"{m}/{p}").st_ino]
json.dump(rec, open(out, "w"))
on2 = [p for p in rec if os.path.exists(f"{bd}/sv-b2/data/{p}")]
assert len(on2) >= 6, f"only {len(on2)} files on set 2"
# A hard link to a file of set 2: not moved by the drain. Not one the fds below hold
# open (unlinking a name of an open file tells the bricks it is open: skipped as open).
linked = [p for p in on2 if p not in sorted(rec)[:20]][0]
os.link(f"{m}/{linked}", f"{m}/d/hardlink")
EOF
pass "60 files in 4 nested directories on the 2 x 2 volume, one hard-linked"

# Fds opened before the drain, read after the commit.
python3 - "$m" "$CL_DIR/before.json" "$CL_DIR/fds" <<'EOF' &
import hashlib, json, os, sys, time
m, before, state = sys.argv[1:4]
rec = json.load(open(before))
fds = {p: os.open(f"{m}/{p}", os.O_RDONLY) for p in sorted(rec)[:20]}
open(state + ".open", "w").close()
while not os.path.exists(state + ".read"):
    time.sleep(0.1)
bad = []
for p, fd in fds.items():
    data = b""
    while chunk := os.pread(fd, 1 << 20, len(data)):
        data += chunk
    if hashlib.sha256(data).hexdigest() != rec[p][0]:
        bad.append(p)
open(state, "w").write(" ".join(bad) + "\n")
EOF
fds=$!
for _ in $(seq 100); do [[ -e $CL_DIR/fds.open ]] && break; sleep 0.1; done
[[ -e $CL_DIR/fds.open ]] || fail "the fds were not opened"

mkdir -p "$m/w"
acked_writer "$m/w" "$CL_DIR/acked" "$CL_DIR/writer.stop" 1 >"$CL_DIR/writer.out" 2>&1 &
writer=$!
stop_bg() {
    local rc=$?
    touch "$CL_DIR/writer.stop" "$CL_DIR/fds.read"
    kill "$fds" 2>/dev/null || true
    wait "$writer" "$fds" 2>/dev/null || true
    return "$rc"
}
trap 'stop_bg; cl_cleanup' EXIT

# --- bad input --------------------------------------------------------------------------------
before=$(vinfo layout_epoch brick_count layout)
if out=$(cairn_cli volume remove-brick sv "n1:$bd/sv-b2" start 2>&1); then
    fail "remove-brick of one brick of a set succeeded"
fi
grep -qF "replica set 2" <<<"$out" || fail "message '$out' does not name the set"
assert_eq "$before" "$(vinfo layout_epoch brick_count layout)" "half a set refused ('$out'), volume unchanged"

# --- start ------------------------------------------------------------------------------------
out=$(cairn_cli volume remove-brick sv "${set2[@]}" start) || fail "remove-brick start: $out"
pass "remove-brick start: $out"
assert_eq "[1]" "$(vinfo layout)" "set 2 is out of the layout"
t0=$(date +%s)

# status_until: poll `status --json` until no node runs; prints the document.
status_until() {
    local st
    for _ in $(seq 300); do
        st=$(cairn_cli --json volume remove-brick sv "${set2[@]}" status) ||
            fail "remove-brick status: $st"
        if python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(any(n["state"] in ("running", "not started") for n in d["nodes"]))' <<<"$st"; then
            printf '%s\n' "$st"
            return
        fi
        sleep 0.2
    done
    fail "the drain did not end in 60 s: $st"
}
st=$(status_until)
python3 - "$st" <<'EOF' || fail "status after the first drain: $st"
import json, sys
d = json.loads(sys.argv[1])
assert d["volume"] == "sv" and d["sets"] == [2], d
assert sorted(n["node"] for n in d["nodes"]) == ["n1", "n2"], d
assert all(n["failures"] == 0 for n in d["nodes"]), d
assert sum(n["moved"] for n in d["nodes"]) >= 9, d
assert d["left_files"] >= 1 and d["left_bytes"] == sum(n["left_bytes"] for n in d["nodes"]), d
EOF
pass "status --json: both nodes ran, no failure, the hard-linked file left"

if out=$(cairn_cli volume remove-brick sv "${set2[@]}" commit 2>&1); then
    fail "commit with a file left succeeded"
fi
grep -qE "still hold [0-9]+ file\(s\) \([0-9]+ bytes\)" <<<"$out" || fail "commit refusal '$out' does not say how much is left"
pass "commit refused while a file is left: $out"

# The second name goes; `start` again moves the file; commit.
rm "$m/d/hardlink"
out=$(cairn_cli volume remove-brick sv "${set2[@]}" start) || fail "remove-brick start again: $out"
st=$(status_until)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["left_files"] == 0 and d["left_bytes"] == 0, d' "$st" ||
    fail "files left after the second start: $st"
out=$(cairn_cli volume remove-brick sv "${set2[@]}" commit) || fail "remove-brick commit: $out"
pass "commit: $out ($(($(date +%s) - t0)) s after start)"
assert_eq "2" "$(vinfo brick_count)" "volume info: 2 bricks left"

touch "$CL_DIR/writer.stop"
wait "$writer" || fail "the FUSE writer saw errors: $(tail -5 "$CL_DIR/writer.out")"
touch "$CL_DIR/fds.read"
wait "$fds" || fail "the fds reader failed"
[[ $(cat "$CL_DIR/fds") == "" ]] || fail "fds opened before read the wrong content: $(cat "$CL_DIR/fds")"
pass "20 fds opened before the drain read their files after the commit"

# --- after the commit: every file through both mounts and a new one ---------------------------
cl_mount sv "$CL_DIR/mnt-c" n1
for mnt in "$m" "$b" "$CL_DIR/mnt-c"; do
    python3 - "$mnt" "$CL_DIR/before.json" "$CL_DIR/acked" "$bd" "$t0" <<'EOF' || fail "files through $mnt after the commit"
import hashlib, json, os, sys
m, before, acked, bd, t0 = sys.argv[1:6]
rec = json.load(open(before))
for p, (sha, ino) in rec.items():
    with open(f"{m}/{p}", "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
    assert got == sha, f"{p}: content changed"
    assert os.stat(f"{m}/{p}").st_ino == ino, f"{p}: inode number changed"
    assert os.path.exists(f"{bd}/sv-b0/data/{p}") and os.path.getsize(f"{bd}/sv-b0/data/{p}") == os.path.getsize(f"{m}/{p}"), f"{p} not whole on set 1"
n = 0
for line in open(acked):
    name, i = line.split()
    i = int(i)
    want = hashlib.sha256(name.encode()).digest() * (16 + i % 300)
    with open(f"{m}/w/f{name}", "rb") as f:
        assert f.read() == want, f"acknowledged write f{name} lost"
    n += 1
assert n > 0, "the writer acknowledged nothing"
names = os.listdir(f"{m}/w")
assert len(names) == len(set(names)), "a name listed twice"
print(n)
EOF
    pass "through $mnt: 60 files (content, inode number) and every acknowledged write"
done
# No file made after `start` is on set 2's bricks.
late=$(find "$bd/sv-b2/data/w" "$bd/sv-b3/data/w" -type f -newermt "@$t0" -size +0 2>/dev/null | wc -l)
assert_eq "0" "$late" "no file made during the drain is on set 2"
cl_umount "$CL_DIR/mnt-c"
echo "# $CL_PASSED passed"

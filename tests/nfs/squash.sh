#!/usr/bin/env bash
# Root squash on a Cairn export (what the appliance's vol0 export does): a squashed root
# client and the anonymous user itself create files in a 1777 directory and then write,
# read, truncate and chmod them, over NFSv3, v4.0 and v4.1 (nfs-rs with explicit AUTH_SYS
# uids); the files belong to the anonymous uid on the volume; a squashed client cannot
# create in a 0755 directory of root's (as with stock FSAL_VFS), nor write another user's
# 0644 file.
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nfs_suite_up vol0
# the anonymous ids `cairn nfs export add` renders (Ganesha's own default is -2)
nfs_export_block 1 vol0 "$(cl_node_addr n1)" /vol0 127.0.0.1 / RW Root_Squash |
    sed 's/Squash = Root_Squash;/&\n    Anonymous_Uid = 65534;\n    Anonymous_Gid = 65534;/' >"$CL_DIR/exports.conf"
grep -q 'Anonymous_Uid = 65534;' "$CL_DIR/exports.conf" || fail "no Anonymous_Uid in the export block"
nfs_gw_start g1 "$CL_DIR/exports.conf"
chmod 1777 "$CL_MNT"
mkdir -m 0755 "$CL_MNT/rootonly"
pass "ganesha serves vol0 root squashed; vol0's root is 1777"

# c VERSION UID CMD ARGS...
c() {
    local v=$1 u=$2
    shift 2
    "$NFS_VENV/bin/python" "$CL_REPO/tests/nfs/nfsclient.py" --port "${NFS_PORT[g1]}" \
        --mount-port "${NFS_MNT_PORT[g1]}" --version "$v" --export /vol0 --uid "$u" --gid "$u" "$@"
}

for v in 3 4.0 4.1; do
    for u in 0 65534; do
        f=/sq-$v-$u
        c "$v" "$u" write "$f" "one $v $u" || fail "v$v uid $u: create and write $f in the 1777 root"
        [[ $(c "$v" "$u" read "$f") == "one $v $u" ]] || fail "v$v uid $u: read back $f"
        c "$v" "$u" append "$f" " two" || fail "v$v uid $u: write again to its own $f"
        c "$v" "$u" truncate "$f" 3 || fail "v$v uid $u: truncate its own $f"
        c "$v" "$u" chmod "$f" 0600 || fail "v$v uid $u: chmod its own $f"
        [[ $(c "$v" "$u" read "$f") == "one" ]] || fail "v$v uid $u: read after truncate"
        st=$(stat -c '%u %a %s' "$CL_MNT$f")
        [[ $st == "65534 600 3" ]] || fail "v$v uid $u: $f on the volume is '$st', want '65534 600 3'"
        pass "NFS v$v, AUTH_SYS uid $u squashed to 65534: create, write, append, truncate, chmod its file"
    done
    c "$v" 0 expect-error write "/rootonly/x-$v" x >/dev/null ||
        fail "v$v: a squashed root created in root's 0755 directory"
done
pass "squashed root cannot create in a 0755 directory of root's"

# The Linux client decides from OPEN's change_info4 whether its create made the file
# (before != after); if not, it treats the open as one of an existing file, and with
# fs.protected_regular (Debian: 2) an O_CREAT open of another user's file in a sticky
# world-writable directory fails with EACCES, leaving an empty file behind: what a
# root-squashed kernel client saw on the appliance's vol0 (1777).
for minor in 0 1; do
    out=$("$NFS_VENV/bin/python" - "${NFS_PORT[g1]}" "$minor" "$CL_REPO/tests/nfs" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
from nfs4raw import Client
c = Client(int(sys.argv[1]), int(sys.argv[2]), "/vol0", f"cinfo{sys.argv[2]}")
for i in range(5):
    o = c.open(f"/cinfo-{sys.argv[2]}-{i}", "both", "none", create=True)
    atomic, before, after = o.cinfo
    c.close(o)
    print(f"{atomic} {before} {after}")
PY
    ) || fail "v4.$minor: raw OPEN create: $out"
    while read -r atomic before after; do
        [[ $before != "$after" ]] ||
            fail "v4.$minor: OPEN that created a file answered change_info before == after ($before, atomic $atomic): a Linux client then takes the file as existing"
    done <<<"$out"
done
pass "OPEN creates report a changed parent (change_info4 before != after), v4.0 and v4.1"

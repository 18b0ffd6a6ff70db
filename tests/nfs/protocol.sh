#!/usr/bin/env bash
# NFS gateway protocol suite: Ganesha + FSAL_CAIRN over a 2x2 volume, driven by userspace
# clients over NFSv3 (libnfs-utils and nfs-rs), v4.0 and v4.1 (nfs-rs): create, write,
# read back, rename, links, symlinks, setattr, readdir of 10 000 entries, statfs, and
# cross-checks through the FUSE mount (same volume, another client), and changes made
# through FUSE seen in listings Ganesha has cached. protocol-acl.sh runs it with ACLs on.
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# NFS_ACL=1: the same with NFSv4 ACLs on for the export (FSAL { ACL = true; }), so
# every v4.1 READDIR below (nfs-rs asks for `acl`) carries each entry's ACL.
NFS_ACL=${NFS_ACL:-0}

nfs_suite_up vol0
if [[ $NFS_ACL == 1 ]]; then
    nfs_exports_default vol0 | sed 's/Name = CAIRN;/Name = CAIRN; ACL = true;/' >"$CL_DIR/exports.conf"
    grep -q "ACL = true;" "$CL_DIR/exports.conf" || fail "could not enable ACLs in the export block"
else
    nfs_exports_default vol0 >"$CL_DIR/exports.conf"
fi
nfs_gw_start g1 "$CL_DIR/exports.conf"
pass "ganesha with FSAL_CAIRN serves vol0 on 127.0.0.1:${NFS_PORT[g1]} (ACLs: $NFS_ACL)"

# libnfs (NFSv3): read a file written through FUSE, copy a file in and out.
echo "written via fuse" >"$CL_MNT/viafuse"
out=$(nfs-cat "$(nfs_url g1 /vol0/viafuse)") || fail "nfs-cat over NFSv3"
assert_eq "written via fuse" "$out" "NFSv3 read of a FUSE-written file"
head -c 300000 /dev/urandom >"$CL_DIR/blob"
nfs-cp "$CL_DIR/blob" "$(nfs_url g1 /vol0/blob)" >/dev/null || fail "nfs-cp into the export"
cmp "$CL_DIR/blob" "$CL_MNT/blob" || fail "300 KB written by nfs-cp differs on the FUSE mount"
nfs-cp "$(nfs_url g1 /vol0/blob)" "$CL_DIR/blob.back" >/dev/null || fail "nfs-cp out of the export"
cmp "$CL_DIR/blob" "$CL_DIR/blob.back" || fail "300 KB read back by nfs-cp differs"
nfs-ls "$(nfs_url g1 /vol0)" | grep -q ' blob$' || fail "nfs-ls does not list blob"
pass "libnfs NFSv3: cat, cp in/out (300 KB), ls"

for v in 3 4.0 4.1; do
    d=/d$v
    c() { nfs_client g1 "$v" "$@"; }
    c mkdir "$d" || fail "v$v mkdir"
    c write "$d/f" "hello $v" || fail "v$v write"
    c append "$d/f" " more" || fail "v$v append"
    assert_eq "hello $v more" "$(c read "$d/f")" "v$v read back"
    assert_eq "hello $v more" "$(cat "$CL_MNT$d/f")" "v$v write visible through FUSE"
    c rename "$d/f" "$d/g" || fail "v$v rename"
    [[ ! -e $CL_MNT$d/f && -f $CL_MNT$d/g ]] || fail "v$v rename not visible through FUSE"
    c link "$d/g" "$d/h" || fail "v$v link"
    assert_eq "2" "$(stat -c %h "$CL_MNT$d/g")" "v$v hard link count"
    c symlink "g" "$d/s" || fail "v$v symlink"
    assert_eq "g" "$(c readlink "$d/s")" "v$v readlink"
    assert_eq "g" "$(readlink "$CL_MNT$d/s")" "v$v symlink visible through FUSE"
    c chmod "$d/g" 600 || fail "v$v chmod"
    assert_eq "600" "$(stat -c %a "$CL_MNT$d/g")" "v$v chmod through NFS"
    c truncate "$d/g" 3 || fail "v$v truncate"
    assert_eq "hel" "$(cat "$CL_MNT$d/g")" "v$v truncate (setattr size)"
    c utime "$d/g" 1000000000 || fail "v$v utime"
    assert_eq "1000000000" "$(stat -c %Y "$CL_MNT$d/g")" "v$v setattr mtime"
    read -r type mode size _ <<<"$(c stat "$d/g")"
    assert_eq "file 0o600 3" "$type $mode $size" "v$v getattr after setattr"
    c unlink "$d/h" || fail "v$v unlink"
    c expect-error read "$d/h" >/dev/null || fail "v$v read of a removed file succeeded"
    c expect-error rmdir "$d" >/dev/null || fail "v$v rmdir of a non-empty directory succeeded"
    assert_eq "g s" "$(c ls "$d" | tr '\n' ' ' | sed 's/ $//')" "v$v readdir"
    pass "NFS v$v: mkdir, write, append, read, rename, link, symlink, readlink, chmod, truncate, utime, unlink, readdir"
done

# statfs
read -r total _ _ <<<"$(nfs_client g1 4.1 fsstat)" || fail "FSSTAT"
((total > 0)) || fail "FSSTAT reports total bytes $total"
pass "statfs: $total bytes"

# A 10 000-entry directory: created through FUSE (faster), listed through NFS with
# paged readdir (cookies), every entry exactly once, for v3 and v4.1.
mkdir "$CL_MNT/big"
(cd "$CL_MNT/big" && seq -f 'f%05g' 0 9999 | xargs touch)
for v in 3 4.1; do
    n=$(nfs_client g1 "$v" count /big) || fail "v$v readdir of 10 000 entries"
    assert_eq 10000 "$n" "v$v readdir of a 10 000-entry directory"
done
pass "readdir of 10 000 entries over v3 and v4.1 (cookies resume, no duplicates)"

# New entries appear in a directory Ganesha has cached (mdcache must not hide them).
# With ACLs the v4.1 listing above takes longer than a brick's read lease (10 s: an ACL
# round trip per entry), so this also depends on the check below.
touch "$CL_MNT/big/zz-late"
n=$(nfs_client g1 4.1 count /big)
assert_eq 10001 "$n" "entry created through FUSE after a listing"
pass "a directory change made by another client is visible"

# Once the gateway's lease on a directory has lapsed (a brick's read lease lasts 10 s), no
# recall tells it of a change: mdcache must refetch by itself (FSAL_CAIRN caps how long
# it trusts attributes below the lease) instead of hiding the entry for Ganesha's 60 s.
mkdir "$CL_MNT/lapse"
touch "$CL_MNT/lapse/a"
for v in 3 4.1; do
    assert_eq 1 "$(nfs_client g1 "$v" count /lapse)" "v$v listing of a 1-entry directory"
done
sleep 11
touch "$CL_MNT/lapse/b"
for v in 3 4.1; do
    assert_eq 2 "$(nfs_client g1 "$v" count /lapse)" "v$v entry created through FUSE after the lease lapsed"
done
pass "a directory change made after the gateway's lease lapsed is visible (v3, v4.1)"

finish

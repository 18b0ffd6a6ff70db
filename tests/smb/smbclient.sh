#!/usr/bin/env bash
# smbclient sessions against the vfs_cairn share [vol0]: put/get of large and small files,
# mkdir/rename/delete, a server-side copy (scopy: FSCTL_SRV_COPYCHUNK_WRITE, done by the
# bricks), a 10 000-entry listing, smbcacls set/get, plus bad input (a share
# naming a missing volume is refused while the others keep serving; a user without rights
# is denied; a share with kernel share modes serves). What SMB did is checked from the side
# through a FUSE mount of the same volume.
set -uo pipefail
# shellcheck source=tests/smb/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

extra_shares() {
    local dir=$1
    # a share naming a volume that does not exist
    smb_add_cairn_share "$dir" ghost no-such-volume "$(cl_node_addr n1)" / \
        "valid users = $SMB_USER"
    # kernel share modes on: vfs_cairn takes share modes on the backend
    smb_add_cairn_share "$dir" kshare vol0 "$(cl_node_addr n1)" / \
        "valid users = $SMB_USER" "kernel share modes = yes"
    # a share the test user has no rights on
    smb_add_cairn_share "$dir" private vol0 "$(cl_node_addr n1)" / "valid users = root"
}

# cairnd's metrics show what the server-side copy sent to the bricks.
CL_METRICS=1
smb_up 1 extra_shares
work=$CL_DIR/work
mkdir -p "$work"

# --- small and large files ------------------------------------------------------------------
echo "small file via smb" >"$work/small"
head -c $((64 * 1024 * 1024 + 12345)) /dev/urandom >"$work/large"
smbc vol0 "put $work/small small.txt; put $work/large large.bin" >/dev/null ||
    fail "put small and large files"
cmp "$work/small" "$CL_MNT/small.txt" || fail "small.txt differs on the volume"
cmp "$work/large" "$CL_MNT/large.bin" || fail "large.bin differs on the volume"
pass "put small and 64 MiB files; the volume holds the same bytes"

smbc vol0 "get small.txt $work/small.back; get large.bin $work/large.back" >/dev/null ||
    fail "get small and large files"
cmp "$work/small" "$work/small.back" || fail "small.txt read back differs"
cmp "$work/large" "$work/large.back" || fail "large.bin read back differs"
pass "get small and 64 MiB files back unchanged"

# --- server-side copy ---------------------------------------------------------------------------
# smbclient's scopy asks for a resume key and copies with FSCTL_SRV_COPYCHUNK_WRITE. vfs_cairn
# hands the copy to the bricks (cairn_copy_file_range): the bricks count copy_range requests,
# and not one READ of the 64 MiB goes through smbd (the only reader of the volume meanwhile).
reads_before=$(cl_metric n1 read)
copies_before=$(cl_metric n1 copy_range)
out=$(smbc vol0 "scopy large.bin large.copy" 2>&1) || fail "scopy large.bin large.copy: $out"
reads_after=$(cl_metric n1 read)
copies_after=$(cl_metric n1 copy_range)
cmp "$work/large" "$CL_MNT/large.copy" || fail "large.copy differs from large.bin on the volume"
((copies_after > copies_before)) ||
    fail "the server-side copy made no copy_range on the bricks ($copies_before -> $copies_after)"
assert_eq "$reads_before" "$reads_after" "READs of the bricks during the server-side copy"
pass "scopy of 64 MiB done by the bricks: $((copies_after - copies_before)) copy_range requests, no READ through smbd"

# --- directories, rename, delete --------------------------------------------------------------
smbc vol0 "mkdir d1; mkdir d1/d2; put $work/small d1/d2/f; rename d1/d2/f d1/g; rename d1 d3" \
    >/dev/null || fail "mkdir/rename session"
[[ -f $CL_MNT/d3/g && ! -e $CL_MNT/d1 && ! -e $CL_MNT/d3/d2/f ]] ||
    fail "after renames the volume has: $(cd "$CL_MNT" && find . | sort | tr '\n' ' ')"
pass "mkdir and rename of files and directories"

smbc vol0 "del d3/g; rmdir d3/d2; rmdir d3; del small.txt" >/dev/null || fail "delete session"
[[ ! -e $CL_MNT/d3 && ! -e $CL_MNT/small.txt ]] || fail "deleted names still on the volume"
out=$(smbc vol0 "get small.txt $work/x" 2>&1) && fail "get of a deleted file succeeded"
grep -q NT_STATUS_OBJECT_NAME_NOT_FOUND <<<"$out" || fail "get of a deleted file: $out"
pass "delete of files and directories; a deleted name is NOT_FOUND"

# --- a directory of 10 000 entries ------------------------------------------------------------
{ mkdir "$CL_MNT/big" && chmod 0777 "$CL_MNT/big"; } || fail "mkdir big through $CL_MNT"
(cd "$CL_MNT/big" && seq -f 'e%05g' 0 9999 | xargs touch) || fail "creating 10000 files"
out=$(smbc vol0 "ls big/*") || fail "listing big/"
n=$(grep -cE '^  e[0-9]{5} ' <<<"$out")
assert_eq 10000 "$n" "entries listed in big/"
[[ $(grep -E '^  e[0-9]{5} ' <<<"$out" | awk '{print $1}' | sort -u | wc -l) == 10000 ]] ||
    fail "listing of big/ has duplicates"
pass "listing of 10000 entries, each once"

# --- Windows ACLs (acl_xattr) -----------------------------------------------------------------
smbc vol0 "put $work/small acl.txt" >/dev/null || fail "put acl.txt"
# smbcacls can only dial port 445: run it in a private network namespace whose port 445
# leads to our smbd (tests/smb/port445.py).
python3 "$CL_REPO/tests/smb/port445.py" outer "$SMB_DIR/p445.sock" "$SMB_PORT" &
fwd_pid=$!
wait_until 5 test -S "$SMB_DIR/p445.sock" || fail "port 445 forwarder did not start"
cacls() {
    unshare -n python3 "$CL_REPO/tests/smb/port445.py" inner "$SMB_DIR/p445.sock" \
        smbcacls "//127.0.0.1/vol0" acl.txt -s "$SMB_CONF" -m SMB3 \
        -U "$SMB_USER%$SMB_PASS" "$@"
}
cacls -a "ACL:S-1-5-32-545:ALLOWED/0x0/READ" || fail "smbcacls add an ACE"
out=$(cacls) || fail "smbcacls get"
grep -q 'ACL:BUILTIN\\Users:ALLOWED/0x0/READ\|ACL:S-1-5-32-545:ALLOWED/0x0/READ' <<<"$out" ||
    fail "added ACE not read back: $out"
getfattr -n security.NTACL --absolute-names "$CL_MNT/acl.txt" >/dev/null 2>&1 ||
    fail "no security.NTACL xattr on the volume for acl.txt"
cacls -D "ACL:S-1-5-32-545:ALLOWED/0x0/READ" || fail "smbcacls delete the ACE"
out=$(cacls) || fail "smbcacls get after delete"
! grep -q 'S-1-5-32-545:ALLOWED/0x0/READ\|BUILTIN\\Users:ALLOWED/0x0/READ' <<<"$out" ||
    fail "deleted ACE still there: $out"
kill "$fwd_pid" 2>/dev/null
pass "smbcacls set/get/delete, stored as security.NTACL on the volume"

# --- bad input --------------------------------------------------------------------------------
out=$(smbc ghost "ls" 2>&1) && fail "share on a missing volume connected"
grep -q 'tree connect failed' <<<"$out" || fail "missing volume: $out"
grep -q "cannot mount volume 'no-such-volume'" "$SMB_LOG" ||
    fail "no log line naming the missing volume in $SMB_LOG"
smbc vol0 "ls small*; ls large.bin" >/dev/null || fail "vol0 stopped serving after the bad share"
pass "a share on a missing volume is refused with a log line; vol0 keeps serving"

# kernel share modes are served by the backend's share reservations (nfs-sharemodes.sh)
out=$(smbc kshare "put $work/small kshare.txt; get kshare.txt $work/small.kshare" 2>&1) ||
    fail "share with kernel share modes: $out"
cmp "$work/small" "$work/small.kshare" || fail "kshare.txt read back through [kshare] differs"
cmp "$work/small" "$CL_MNT/kshare.txt" || fail "kshare.txt differs on the volume"
pass "a share with 'kernel share modes = yes' serves (share modes on the backend)"

out=$(smbc private "ls" 2>&1) && fail "user without rights connected to [private]"
grep -q 'NT_STATUS_ACCESS_DENIED\|NT_STATUS_BAD_NETWORK_NAME\|NT_STATUS_NETWORK_ACCESS_DENIED' \
    <<<"$out" || fail "unexpected error for a user without rights: $out"
out=$(smbclient "//127.0.0.1/vol0" -p "$SMB_PORT" -s "$SMB_CONF" -U "$SMB_USER%wrong" \
    -c ls 2>&1) && fail "login with a wrong password worked"
grep -q NT_STATUS_LOGON_FAILURE <<<"$out" || fail "wrong password: $out"
pass "a user without rights and a wrong password are denied"

# --- no handle leaks: a 2000-file delete session keeps smbd's descriptors flat ------------
# (Gluster's gateway ran out of file handles in such a session.) vfs_cairn holds no kernel
# descriptor per file: the serving smbd's count must not grow with the files it deletes.
# (the files were made by root through FUSE: hand the 2000 to the SMB user first)
find "$CL_MNT/big" -name 'e0[01]*' -exec chown "$SMB_USER" {} + ||
    fail "chown of big/e0[01]* through $CL_MNT"
smbd_pid=$(cat "$SMB_DIR/smbd.pid")
before=$(pgrep -P "$smbd_pid" smbd | sort) # notifyd, cleanupd, other sessions
# The first count is taken once the session deleted something (big's times moved): by
# then its tree connect has mounted the volume (libcairn's runtime and connections),
# which a sample taken earlier would count as growth.
m0=$(stat -c %y "$CL_MNT/big")
smbc vol0 "del big/e00*; del big/e01*" >"$work/del.out" 2>&1 &
del_pid=$!
child="" first="" max=0
while kill -0 "$del_pid" 2>/dev/null; do
    # the smbd child serving this session: the one that was not there before
    [[ -n $child ]] || child=$(comm -13 <(echo "$before") <(pgrep -P "$smbd_pid" smbd | sort) | head -n 1)
    if [[ -n $child ]]; then
        n=$(find "/proc/$child/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
        if ((n > 0)) && [[ -n $first || $(stat -c %y "$CL_MNT/big") != "$m0" ]]; then
            [[ -n $first ]] || first=$n
            ((n > max)) && max=$n
        fi
    fi
    sleep 0.1
done
wait "$del_pid" || fail "2000-file delete session: $(tail -n 3 "$work/del.out")"
left=$(find "$CL_MNT/big" -name 'e0[01]*' | wc -l)
assert_eq 0 "$left" "files left after the 2000-file delete session"
[[ $(find "$CL_MNT/big" -type f | wc -l) == 8000 ]] || fail "the delete session removed other files"
[[ -n $first ]] || fail "could not watch the smbd of the delete session"
((max <= first + 4)) || fail "smbd descriptors grew from $first to $max during 2000 deletes"
pass "2000-file delete session; smbd's descriptors stayed at $first..$max"

# --- many sessions in a row --------------------------------------------------------------------
for i in $(seq 1 20); do
    smbc vol0 "get large.bin /dev/null; ls big/e0200*" >/dev/null || fail "session $i"
done
pass "20 sessions in a row"

finish

#!/usr/bin/env bash
# NFSv4 ACLs: stored as the POSIX ACL the bricks enforce (docs/nfs.md "ACLs"), driven by
# tests/nfs/nfsacl.c (raw NFSv4.0 COMPOUNDs on libnfs' RPC context, built here against
# libnfs-dev) as several AUTH_SYS uids.
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ -f /usr/include/nfsc/libnfs.h ]] || skip "libnfs-dev is not installed"
nfs_suite_up vol0
# ACLs are per export: FSAL { ACL = true; }
nfs_exports_default vol0 | sed 's/Name = CAIRN;/Name = CAIRN; ACL = true;/' >"$CL_DIR/exports.conf"
grep -q "ACL = true;" "$CL_DIR/exports.conf" || fail "could not enable ACLs in the export block"
nfs_gw_start g1 "$CL_DIR/exports.conf"
cc -Wall -Werror -O1 -o "$CL_DIR/nfsacl" "$CL_REPO/tests/nfs/nfsacl.c" -lnfs ||
    fail "building tests/nfs/nfsacl.c against libnfs-dev"

# acl UID PATH CMD [ARG]: one nfsacl call as UID (gid = UID) through gateway g1
acl() {
    local uid=$1
    shift
    "$CL_DIR/nfsacl" "nfs://127.0.0.1/vol0?version=4&nfsport=${NFS_PORT[g1]}&uid=$uid&gid=$uid" "$@" ||
        fail "nfsacl as uid $uid: $*"
}

# expect WHAT WANT GOT
expect() { [[ $3 == "$2" ]] || fail "$1: want '$2', got '$3'"; pass "$1: $3"; }
# expect_in WHAT SUBSTRING GOT
expect_in() { [[ $3 == *"$2"* ]] || fail "$1: want '$2' in '$3'"; pass "$1"; }

mkdir -p "$CL_MNT/d"
echo "secret data" >"$CL_MNT/d/f"
chown -R 1001:1001 "$CL_MNT/d"
chmod 0600 "$CL_MNT/d/f"

# No ACL stored: the one the mode implies
got=$(acl 1001 d/f getacl)
expect_in "mode 0600 reads as OWNER@ rw, nothing for others" "mode 0600 A::OWNER@:rwatTcCy A::GROUP@:tcy A::EVERYONE@:tcy" "$got"
expect "uid 2001 may not read before the ACL" NFS4ERR_ACCESS "$(acl 2001 d/f read)"

# Set by the owner only
spec="A::OWNER@:rwatTcCy,A::2001:rtcy,A::GROUP@:tcy,A::EVERYONE@:tcy"
expect "uid 2001 (not the owner) may not set an ACL" NFS4ERR_PERM "$(acl 2001 d/f setacl "A::EVERYONE@:rwatTcCy")"
expect "owner sets an ACL granting uid 2001 read" ok "$(acl 1001 d/f setacl "$spec")"
got=$(acl 1001 d/f getacl)
expect_in "ACL read back names uid 2001 with read" "A::2001:rtcy" "$got"
expect_in "mode follows the ACL (group bits = mask r)" "mode 0640 " "$got"
hex=$(getfattr -n system.posix_acl_access -e hex --only-values "$CL_MNT/d/f" 2>/dev/null | od -An -tx1 | tr -d ' \n' || true)
[[ -n $hex ]] || hex=$(getfattr -n system.posix_acl_access -e hex "$CL_MNT/d/f" 2>/dev/null | sed -n 's/.*=0x//p')
expect_in "stored as a POSIX ACL (user:2001:r-- entry) seen through FUSE" "02000400d1070000" "$hex"

# Enforced for data access by the bricks and by Ganesha
expect "uid 2001 reads with the ACL" ok "$(acl 2001 d/f read)"
expect "uid 3001 (no entry) still may not read" NFS4ERR_ACCESS "$(acl 3001 d/f read)"
expect "uid 2001 may not write (read-only entry)" NFS4ERR_ACCESS "$(acl 2001 d/f write)"
expect "owner still writes" ok "$(acl 1001 d/f write)"

# chmod changes the mask: the named entry loses what the group bits drop
expect "owner chmod 0600" ok "$(acl 1001 d/f chmod 600)"
got=$(acl 1001 d/f getacl)
expect_in "after chmod 0600 the ACL shows uid 2001 without read" "mode 0600 A::OWNER@:rwatTcCy A::2001:tcy " "$got"
expect "uid 2001 may not read after chmod 0600" NFS4ERR_ACCESS "$(acl 2001 d/f read)"
expect "owner chmod 0640" ok "$(acl 1001 d/f chmod 640)"
expect_in "after chmod 0640 uid 2001 has read again" "A::2001:rtcy" "$(acl 1001 d/f getacl)"
expect "uid 2001 reads again" ok "$(acl 2001 d/f read)"

# What POSIX ACLs cannot hold is refused, and the stored ACL is kept
expect "inheritance flags on a file refused" NFS4ERR_INVAL "$(acl 1001 d/f setacl "A:fdi:EVERYONE@:r")"
expect_in "ACL unchanged after the refused SETATTR" "mode 0640 A::OWNER@:rwatTcCy A::2001:rtcy" "$(acl 1001 d/f getacl)"

# Directories: inheritable ACEs become the default ACL
expect "owner sets an inheritable ACE on a directory" ok \
    "$(acl 1001 d setacl "A::OWNER@:rwaxDtTcCy,A:fdi:2001:rtcy,A::GROUP@:rxtcy,A::EVERYONE@:xtcy")"
got=$(acl 1001 d getacl)
expect_in "directory ACL lists the inheritable uid 2001 ACE" "A:fdi:2001:rtcy" "$got"
expect_in "directory mode from its access ACL" "mode 0751 " "$got"
echo new >"$CL_MNT/d/g"
expect_in "a file created in the directory inherits uid 2001's entry" "A::2001:r" "$(acl 1001 d/g getacl)"

# An export without ACL = true offers none (and refuses to set one)
nfs_exports_default vol0 >"$CL_DIR/exports-noacl.conf"
nfs_gw_start g2 "$CL_DIR/exports-noacl.conf"
acl2() { "$CL_DIR/nfsacl" "nfs://127.0.0.1/vol0?version=4&nfsport=${NFS_PORT[g2]}&uid=1001&gid=1001" "$@" ||
    fail "nfsacl through g2: $*"; }
expect "no acl attribute on an export without ACL = true" "no acl attribute" "$(acl2 d/f getacl)"
expect "SETATTR of an ACL refused there" NFS4ERR_ATTRNOTSUPP "$(acl2 d/f setacl "A::EVERYONE@:r")"
# there Ganesha checks mode bits only: uid 2001's named entry does not open the file
# (docs/nfs.md: ACLs are per export)
expect "without ACL = true, Ganesha's mode check refuses uid 2001" NFS4ERR_ACCESS \
    "$("$CL_DIR/nfsacl" "nfs://127.0.0.1/vol0?version=4&nfsport=${NFS_PORT[g2]}&uid=2001&gid=2001" d/f read)"

# Symlinks keep no ACL: GETATTR reports the mode's, SETATTR is refused
ln -s f "$CL_MNT/d/l"
expect_in "a symlink's ACL is its mode's" "mode 0777 A::OWNER@:" "$(acl 1001 d/l getacl)"
expect "an ACL on a symlink refused" NFS4ERR_INVAL "$(acl 0 d/l setacl "A::EVERYONE@:r")"

finish

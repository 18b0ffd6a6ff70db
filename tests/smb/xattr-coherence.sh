#!/usr/bin/env bash
# An smbd keeps the xattrs it read (user.DOSATTRIB: the DOS attributes) in vfs_cairn's
# cache, all of a file's at once (cairn_getxattrs), under a lease at the file's head
# (docs/smb.md). A change by another smbd (another SMB session) or a FUSE mount recalls
# that lease, so a session that already read the attributes sees the change at once, not
# after the cache's 5 s. Session A stays open (smbclient reading a FIFO) while session B
# and the FUSE mount change the file; each change is checked in A within a second.
# ~40 s.
set -uo pipefail
# shellcheck source=tests/smb/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

smb_up 1
command -v setfattr >/dev/null || skip "setfattr not installed (apt-get install attr)"
work=$CL_DIR/xc
mkdir -p "$work"
echo data >"$work/small"
smbc vol0 "put $work/small x.txt" >/dev/null || fail "put x.txt"

# Session A: one smbclient (one smbd process) fed command by command through a FIFO.
mkfifo "$work/a.in"
stdbuf -o0 smbclient "//127.0.0.1/vol0" -p "$SMB_PORT" -s "$SMB_CONF" -m SMB3 -t 600 \
    -U "$SMB_USER%$SMB_PASS" <"$work/a.in" >"$work/a.out" 2>&1 &
a_pid=$!
exec 7>"$work/a.in"
# a_answers N: session A has printed more than N attribute lines
a_answers() { (($(grep -c '^attributes:' "$work/a.out") > $1)); }
# a_attrs: run allinfo x.txt in session A; print the attributes it shows (e.g. "HA (22)")
a_attrs() {
    local before
    before=$(grep -c '^attributes:' "$work/a.out")
    echo "allinfo x.txt" >&7
    wait_until 20 a_answers "$before" ||
        fail "session A did not answer allinfo: $(tail -n 3 "$work/a.out")"
    grep '^attributes:' "$work/a.out" | tail -n 1 | sed 's/^attributes: *//'
}
stop_a() {
    echo "quit" >&7 2>/dev/null
    exec 7>&-
    wait "$a_pid" 2>/dev/null
}

first=$(a_attrs)
log "session A: x.txt attributes $first"
[[ $first != *H* ]] || fail "x.txt hidden from the start: $first"
# the first read filled A's cache; B's change must recall it
smbc vol0 "setmode x.txt +h" >/dev/null || fail "setmode +h in session B"
got=$(a_attrs)
[[ $got == *H* ]] || fail "session A still shows '$got' after session B set hidden (was '$first')"
log "session A after B's setmode +h: $got"
pass "another SMB session's DOS attribute change is seen at once by a session that read them"

# A FUSE client removes the DOS attributes: A falls back to what the mode says.
setfattr -x user.DOSATTRIB "$CL_MNT/x.txt" || fail "setfattr -x user.DOSATTRIB through FUSE"
got=$(a_attrs)
[[ $got != *H* ]] || fail "session A still shows '$got' after FUSE removed user.DOSATTRIB"
pass "a FUSE client's xattr removal is seen at once by an SMB session that read them"

# And a FUSE client's new value (B's, copied back) shows at once too.
smbc vol0 "setmode x.txt +h" >/dev/null || fail "setmode +h in session B (again)"
a_attrs >/dev/null
v=$(getfattr --absolute-names -e hex -n user.DOSATTRIB "$CL_MNT/x.txt" 2>/dev/null |
    sed -n 's/^user.DOSATTRIB=//p')
[[ $v == 0x* ]] || fail "reading user.DOSATTRIB through FUSE: '$v'"
setfattr -x user.DOSATTRIB "$CL_MNT/x.txt" || fail "setfattr -x (2)"
[[ $(a_attrs) != *H* ]] || fail "removal (2) not seen"
setfattr -n user.DOSATTRIB -v "$v" "$CL_MNT/x.txt" || fail "setfattr -n user.DOSATTRIB through FUSE"
got=$(a_attrs)
[[ $got == *H* ]] || fail "session A shows '$got' after FUSE set user.DOSATTRIB back (hidden)"
pass "a FUSE client's xattr write is seen at once by an SMB session"
stop_a
finish

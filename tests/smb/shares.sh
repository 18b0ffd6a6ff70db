#!/usr/bin/env bash
# `cairn smb share` and `cairn smb sync` against a real smbd, checked with smbclient:
# shares are validated before they are stored, applied without restarting smbd (testparm,
# then smbcontrol reload-config), read-only and user lists are enforced, refused shares
# never disturb the running ones, and `cairn smb sync` rebuilds a gateway's shares file.
set -uo pipefail
# shellcheck source=tests/smb/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SHARES_DIR=
include_shares() { # the smb.conf hook: [global] includes the managed shares file
    SHARES_DIR=$1/cairn
    smb_include_managed "$1"
}
smb_up 1 include_shares
export CAIRN_HOST CAIRN_SMB_CONF_DIR=$SHARES_DIR CAIRN_SMB_CONF=$SMB_CONF
CAIRN_HOST=$(cl_node_addr n1)
cs() { "$CAIRN_BIN_DIR/cairn" smb "$@"; }

# eventually SECONDS CMD...: CMD succeeds within SECONDS (smbd applies a reload shortly
# after smbcontrol returns).
eventually() {
    local t=$1 i
    shift
    for ((i = 0; i < t * 5; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    return 1
}
# share_gone SHARE: connecting fails because the share does not exist.
share_gone() { grep -q NT_STATUS_BAD_NETWORK_NAME <<<"$(smbc "$1" "ls" 2>&1)"; }

out=$(cs share list) || fail "share list: $out"
[[ $out == "No SMB shares" ]] || fail "fresh cluster lists shares: $out"
pass "no managed shares at first"

{ mkdir -p "$CL_MNT/proj" && chmod 0777 "$CL_MNT/proj" && echo "from fuse" >"$CL_MNT/proj/seed.txt"; } ||
    fail "preparing vol0/proj through the FUSE mount"
out=$(cs share add proj --volume vol0/proj --users "$SMB_USER,root" --comment "Project files" 2>&1) ||
    fail "share add proj: $out"
grep -q "success: share proj of vol0/proj (read-write, users $SMB_USER,root)" <<<"$out" || fail "add said: $out"
grep -q "the local smbd reloaded its configuration" <<<"$out" || fail "not applied live: $out"
echo "via smb" >"$CL_DIR/up.txt"
eventually 10 smbc proj "put $CL_DIR/up.txt up.txt" || fail "put to the new share: $(smbc proj "put $CL_DIR/up.txt up.txt" 2>&1)"
[[ $(cat "$CL_MNT/proj/up.txt") == "via smb" ]] || fail "the share's file is not in vol0/proj"
{ smbc proj "get seed.txt $CL_DIR/seed.txt" >/dev/null 2>&1 && [[ $(cat "$CL_DIR/seed.txt") == "from fuse" ]]; } ||
    fail "get from the new share"
pass "share added and served without restarting smbd (put/get land in vol0/proj)"

cs share add proj-ro --volume vol0/proj --read-only >/dev/null 2>&1 || fail "share add proj-ro"
eventually 10 smbc proj-ro "ls" || fail "proj-ro not served"
out=$(smbc proj-ro "put $CL_DIR/up.txt new.txt" 2>&1) && fail "put to a read-only share succeeded: $out"
grep -qE "NT_STATUS_(ACCESS_DENIED|MEDIA_WRITE_PROTECTED)" <<<"$out" || fail "read-only put said: $out"
[[ ! -e $CL_MNT/proj/new.txt ]] || fail "a read-only share wrote a file"
pass "read-only share refuses writes"

cs share add rootonly --volume vol0 --users root >/dev/null 2>&1 || fail "share add rootonly"
out=$(smbc rootonly "ls" 2>&1) && fail "$SMB_USER connected to a share only for root: $out"
grep -q "NT_STATUS_ACCESS_DENIED" <<<"$out" || fail "rootonly said: $out"
pass "a user outside --users is denied"

expect_refused() { # CODE PATTERN ARGS...
    local code=$1 pat=$2 rc=0
    shift 2
    out=$(cs share add "$@" 2>&1) || rc=$?
    ((rc == code)) || fail "share add $* exited $rc, want $code: $out"
    grep -q -- "$pat" <<<"$out" || fail "share add $*: message lacks '$pat': $out"
}
expect_refused 1 "volume nosuch does not exist" x --volume nosuch
expect_refused 1 "vol0/missing: no such directory in the volume" x --volume vol0/missing
expect_refused 1 "share PROJ already exists" PROJ --volume vol0
expect_refused 2 "invalid share name 'a/b'" a/b --volume vol0
expect_refused 2 "reserved by Samba" global --volume vol0
expect_refused 2 "invalid user or group" x --volume vol0 --users "a;b"
[[ $(cs --json share list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["shares"]))') == 3 ]] ||
    fail "refused shares were stored"
smbc proj "get up.txt $CL_DIR/again.txt" >/dev/null 2>&1 || fail "proj broken by the refused shares"
smbc vol0 "ls" >/dev/null 2>&1 || fail "the static vol0 share broken by the refused shares"
pass "bad shares refused with clear messages (exit 1 / 2), nothing stored, others keep serving"

# Samba compares share names ignoring case beyond ASCII too: BÜCHER would shadow Bücher.
cs share add Bücher --volume vol0 >/dev/null 2>&1 || fail "share add Bücher"
expect_refused 1 "share BÜCHER already exists as Bücher (share names are case-insensitive)" BÜCHER --volume vol0/proj
out=$(cs share show bÜcher) || fail "show bÜcher: $out"
grep -q "^Volume: vol0$" <<<"$out" || fail "show bÜcher: $out"
eventually 10 smbc BÜCHER "cd proj; get seed.txt $CL_DIR/b.txt" || fail "BÜCHER not served as Bücher"
out=$(cs share remove BÜCHER 2>&1) || fail "remove BÜCHER: $out"
pass "share names are case-insensitive as Samba compares them (Bücher is BÜCHER)"

out=$(cs share list) || fail "list: $out"
{ grep -qE "^proj +vol0/proj +rw +$SMB_USER,root" <<<"$out" && grep -qE "^proj-ro +vol0/proj +ro +\*" <<<"$out"; } ||
    fail "list: $out"
out=$(cs share show PROJ) || fail "show: $out"
{ grep -q "cairn:volume = vol0" <<<"$out" && grep -q "path = /proj" <<<"$out" && grep -q "comment = Project files" <<<"$out"; } ||
    fail "show: $out"
pass "list and show (names are case-insensitive)"

out=$(cs share remove proj-ro 2>&1) || fail "remove: $out"
eventually 10 share_gone proj-ro || fail "proj-ro still served after remove: $(smbc proj-ro ls 2>&1 | tail -n 2)"
out=$(cs share remove proj-ro 2>&1) && fail "removing twice succeeded: $out"
grep -q "no share named proj-ro" <<<"$out" || fail "remove twice said: $out"
pass "share removed without restarting smbd"

# A gateway whose file was lost (or a new gateway) gets the shares back with sync.
: >"$SHARES_DIR/shares.conf"
out=$(cs sync 2>&1) || fail "sync: $out"
grep -q "shares.conf updated and the local smbd reloaded" <<<"$out" || fail "sync said: $out"
{ grep -q "^\[proj\]" "$SHARES_DIR/shares.conf" && grep -q "^\[rootonly\]" "$SHARES_DIR/shares.conf"; } ||
    fail "sync did not restore the shares: $(cat "$SHARES_DIR/shares.conf")"
eventually 10 smbc proj "ls" || fail "proj not served after sync"
pass "sync rebuilds the gateway's shares file and reloads smbd"

finish

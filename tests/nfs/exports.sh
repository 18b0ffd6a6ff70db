#!/usr/bin/env bash
# `cairn nfs export` and `cairn nfs sync` against two real Ganesha gateways (each on its own
# private DBus bus), checked with a real NFS client: exports are validated before they are
# stored, applied live without a restart, refused ones never disturb the running ones,
# client lists and read-only access are enforced, a second gateway serves the same
# exports after `cairn nfs sync`, and a restarted Ganesha serves them from its config.
set -uo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export NFS_PRIVATE_BUS=1
nfs_suite_up vol0
export CAIRN_HOST
CAIRN_HOST=$(cl_node_addr n1)

# gw NAME: make the conf dir and start instance NAME with no exports.
gw() {
    local dir=$CL_DIR/ganesha-$1
    mkdir -p "$dir/cairn"
    : >"$dir/cairn/exports.conf"
    nfs_gw_start "$1" "$dir/cairn/exports.conf"
}

# cn GATEWAY ARGS...: `cairn nfs` on GATEWAY's conf dir and bus.
cn() {
    local g=$1
    shift
    DBUS_SYSTEM_BUS_ADDRESS=$(nfs_bus_address "${NFS_DIR[$g]}") \
        "$CAIRN_BIN_DIR/cairn" nfs --conf-dir "${NFS_DIR[$g]}/cairn" "$@"
}

# nc GATEWAY VERSION EXPORT CMD ARGS...: the nfs-rs client on GATEWAY's export EXPORT.
nc() {
    local g=$1 v=$2 e=$3
    shift 3
    "$NFS_VENV/bin/python" "$CL_REPO/tests/nfs/nfsclient.py" --port "${NFS_PORT[$g]}" \
        --mount-port "${NFS_MNT_PORT[$g]}" --version "$v" --export "$e" "$@"
}

gw g1

out=$(cn g1 export list) || fail "export list: $out"
[[ $out == "No NFS exports" ]] || fail "a fresh cluster lists exports: $out"
pass "no exports at first"
nc g1 4.1 /vol0 ls / >/dev/null 2>&1 && fail "/vol0 is served before it is exported"

out=$(cn g1 export add vol0 --path /vol0 --clients 127.0.0.1 --squash no_root_squash 2>&1) ||
    fail "export add vol0: $out"
grep -q "success: export 1 of vol0 for 127.0.0.1 (rw, no_root_squash" <<<"$out" || fail "add said: $out"
grep -q "applied to the local Ganesha: added 1" <<<"$out" || fail "not applied live: $out"
nc g1 4.1 /vol0 write /hello "through export 1" || fail "write through the new export"
[[ $(nc g1 3 /vol0 read /hello) == "through export 1" ]] || fail "NFSv3 read through the new export"
pass "export added and served at once (v4.1 write, v3 read), no restart"

nc g1 4.1 /vol0 mkdir /sub || fail "mkdir /sub"
nc g1 4.1 /vol0 write /sub/inside "in sub" || fail "write /sub/inside"
out=$(cn g1 export add vol0/sub --path /sub-ro --clients '127.0.0.0/8' --access ro 2>&1) ||
    fail "export add vol0/sub: $out"
[[ $(nc g1 4.1 /sub-ro read /inside) == "in sub" ]] || fail "read through the subdir export"
nc g1 4.1 /sub-ro expect-error write /new x >/dev/null || fail "a write through a ro export succeeded"
nc g1 4.1 /sub-ro read /hello >/dev/null 2>&1 && fail "the subdir export shows the volume root"
pass "subdirectory export, read-only enforced"

# Refused before anything is stored; the running exports keep working.
expect_refused() { # CODE PATTERN ARGS...
    local code=$1 pat=$2 rc=0
    shift 2
    out=$(cn g1 export add "$@" 2>&1) || rc=$?
    ((rc == code)) || fail "export add $* exited $rc, want $code: $out"
    grep -q -- "$pat" <<<"$out" || fail "export add $*: message lacks '$pat': $out"
}
expect_refused 1 "volume nosuch does not exist" nosuch --path /x --clients '*'
expect_refused 1 "vol0/missing: no such directory in the volume" vol0/missing --path /x --clients '*'
expect_refused 1 "pseudo path /vol0 is already used by export 1" vol0 --path /vol0 --clients '*'
expect_refused 1 "export id 1 is already used" vol0 --path /y --clients '*' --id 1
expect_refused 2 "invalid client '10.0.0.0/33'" vol0 --path /x --clients 10.0.0.0/33
expect_refused 2 "invalid pseudo path" vol0 --path relative --clients '*'
expect_refused 2 "'..' is not allowed" vol0/a/../b --path /x --clients '*'
expect_refused 2 "invalid squash" vol0 --path /x --clients '*' --squash maybe
[[ $(cn g1 --json export list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["exports"]))') == 2 ]] ||
    fail "refused exports were stored"
[[ $(nc g1 4.1 /vol0 read /hello) == "through export 1" ]] || fail "export 1 broken by the refused ones"
pass "bad exports refused with clear messages (exit 1 / 2), nothing stored, others keep serving"

# A client outside the export's client list is denied.
cn g1 export add vol0 --path /others --clients 10.9.9.9 >/dev/null || fail "export add /others"
nc g1 4.1 /others ls / >/dev/null 2>&1 && fail "127.0.0.1 reads an export only for 10.9.9.9"
nc g1 3 /others ls / >/dev/null 2>&1 && fail "127.0.0.1 mounts (v3) an export only for 10.9.9.9"
pass "a client outside --clients is denied (v4.1 and v3)"

out=$(cn g1 export list) || fail "list: $out"
for want in "1 .*/vol0 .*vol0 .*127.0.0.1 .*rw .*no_root_squash" "2 .*/sub-ro .*vol0/sub .*127.0.0.0/8 .*ro " "3 .*/others "; do
    grep -q -- "$want" <<<"$out" || fail "list lacks '$want': $out"
done
out=$(cn g1 export show /sub-ro) || fail "show: $out"
{ grep -q 'Path = "/sub";' <<<"$out" && grep -q "Name = CAIRN;" <<<"$out"; } || fail "show lacks the block: $out"
out=$(cn g1 --json export show 2) || fail "show --json: $out"
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["export"]["pseudo"]=="/sub-ro" and "EXPORT {" in d["ganesha_block"]' "$out" ||
    fail "show --json: $out"
pass "list, show and --json"

# A second gateway applies the same exports with `cairn nfs sync`.
gw g2
nc g2 4.1 /vol0 ls / >/dev/null 2>&1 && fail "g2 serves /vol0 before sync"
out=$(cn g2 sync 2>&1) || fail "sync on g2: $out"
grep -q "added 1,2,3" <<<"$out" || fail "sync on g2 said: $out"
nc g1 4.1 /vol0 write /cross "from g1" || fail "write via g1"
[[ $(nc g2 4.1 /vol0 read /cross) == "from g1" ]] || fail "g2 does not see g1's write"
out=$(cn g2 sync 2>&1) || fail "second sync: $out"
grep -q "nothing to change" <<<"$out" || fail "a repeated sync changed something: $out"
pass "second gateway serves the same exports after sync; a write via one is read via the other"

# Removal, live, and on the other gateway by sync.
out=$(cn g1 export remove /sub-ro 2>&1) || fail "remove: $out"
grep -q "removed 2" <<<"$out" || fail "remove not applied live: $out"
nc g1 4.1 /sub-ro ls / >/dev/null 2>&1 && fail "g1 still serves a removed export"
cn g2 sync >/dev/null || fail "sync after remove"
nc g2 4.1 /sub-ro ls / >/dev/null 2>&1 && fail "g2 still serves a removed export after sync"
[[ $(nc g2 4.1 /vol0 read /hello) == "through export 1" ]] || fail "g2 lost export 1 on sync"
out=$(cn g1 export remove /sub-ro 2>&1) && fail "removing twice succeeded: $out"
grep -q "no export with pseudo path or id /sub-ro" <<<"$out" || fail "remove twice said: $out"
pass "export removed live, and from the other gateway by sync"

# A restarted Ganesha serves the stored exports from its config (no sync needed).
nfs_gw_stop g1
nfs_gw_start g1 "${NFS_DIR[g1]}/cairn/exports.conf"
[[ $(nc g1 4.1 /vol0 read /cross) == "from g1" ]] || fail "export 1 gone after a Ganesha restart"
nc g1 4.1 /sub-ro ls / >/dev/null 2>&1 && fail "a removed export came back after a restart"
pass "a restarted Ganesha serves the exports it was given"

# pNFS (docs/nfs.md "pNFS"): --pnfs and --ds-addrs render into the FSAL block and the
# export is applied live; bad DS addresses are refused before anything is stored.
expect_refused 2 "invalid DS address 'n1=10.0.0.1'" vol0 --path /p --clients '*' --pnfs --ds-addrs n1=10.0.0.1
expect_refused 2 "--pnfs" vol0 --path /p --clients '*' --ds-addrs n1=10.0.0.1:2049
out=$(cn g1 export add vol0 --path /layouts --clients 127.0.0.1 --id 9 --pnfs \
    --ds-addrs n1=127.0.0.1:20490 2>&1) || fail "export add --pnfs: $out"
out=$(cn g1 export show /layouts) || fail "show /layouts: $out"
{ grep -q "PNFS = true;" <<<"$out" && grep -q 'DS_Addrs = "n1=127.0.0.1:20490";' <<<"$out" &&
    grep -q "pNFS: FILES layouts (DSs n1=127.0.0.1:20490)" <<<"$out"; } ||
    fail "show /layouts lacks the pNFS settings: $out"
# served (checked over v3: nfs-rs' v4.1 client fails with "bad name" on an export that
# lists a layout type, docs/nfs.md "pNFS"; tests/nfs/pnfs.sh and the VM scenario use v4.1)
out=$(nc g1 3 /layouts ls / 2>&1) || fail "the --pnfs export is not served (v3): $out"
pass "export add --pnfs --ds-addrs: rendered (PNFS, DS_Addrs), shown, served live"
# --pnfs flexfiles: Flexible Files layouts (FSAL_CAIRN's Layout option), applied live
expect_refused 2 "invalid value 'blocks'" vol0 --path /p --clients '*' --pnfs blocks
out=$(cn g1 export add vol0 --path /ff --clients 127.0.0.1 --id 10 --pnfs flexfiles 2>&1) ||
    fail "export add --pnfs flexfiles: $out"
out=$(cn g1 export show /ff) || fail "show /ff: $out"
{ grep -q "PNFS = true;" <<<"$out" && grep -q "Layout = flexfiles;" <<<"$out" &&
    grep -q "pNFS: Flexible Files layouts (DSs at each node's cairnd host" <<<"$out"; } ||
    fail "show /ff lacks the Flexible Files settings: $out"
out=$(cn g1 export show /layouts) || fail "show /layouts: $out"
grep -q "Layout" <<<"$out" && fail "a FILES export renders a Layout line: $out"
out=$(nc g1 3 /ff ls / 2>&1) || fail "the --pnfs flexfiles export is not served (v3): $out"
pass "export add --pnfs flexfiles: rendered (Layout = flexfiles), shown, served live"

finish

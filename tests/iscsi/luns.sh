#!/usr/bin/env bash
# `cairn iscsi lun|target|sync` against a real 2-node 2x2 cluster (no LIO on this machine):
#  - lun create makes the backing file through the client library (allocated: st_blocks
#    cover the size; --thin: sparse), checked through the FUSE mount; list/show/delete;
#  - every bad input refused at create with a message naming the bad part and the right
#    exit code (2 usage, 1 refused), nothing stored, no file left behind;
#  - target records: portals, LUN mappings, ACLs with CHAP (password never printed);
#  - `cairn iscsi sync --dry-run --from-saveconfig` prints the targetcli commands from an
#    empty LIO and from a saved LIO state (only the difference; foreign targets untouched).
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"

cluster_up 2 vol0 2 4
export CAIRN_HOST CAIRN_ISCSI_CONF_DIR=$CL_DIR/not-a-gateway
CAIRN_HOST=$(cl_node_addr n1)
ci() { "$CAIRN_BIN_DIR/cairn" iscsi "$@"; }
js() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
# the nodes' addresses, sorted as cairn sorts them, in LIO's spelling
SERVERS=$(printf '%s\n' "$(cl_node_addr n1)" "$(cl_node_addr n2)" | LC_ALL=C sort | tr ':\n' '~+')
SERVERS=${SERVERS%+}

out=$(ci lun list) || fail "lun list: $out"
[[ $out == "No iSCSI LUNs" ]] || fail "fresh cluster lists LUNs: $out"

# --- create: allocated and thin ------------------------------------------------------
out=$(ci lun create db --volume vol0 --size 64M 2>&1) || fail "lun create db: $out"
grep -q "iscsi lun create: db: success: LUN db is vol0/luns/db.img (64M, allocated)" <<<"$out" ||
    fail "create said: $out"
grep -q "gateways apply it with .cairn iscsi sync." <<<"$out" || fail "not-a-gateway note missing: $out"
[[ $(stat -c %s "$CL_MNT/luns/db.img") == $((64 << 20)) ]] || fail "db.img size $(stat -c %s "$CL_MNT/luns/db.img")"
blocks=$(stat -c %b "$CL_MNT/luns/db.img")
((blocks * 512 >= 64 << 20)) || fail "db.img not allocated: $blocks blocks"
pass "lun create db --size 64M: vol0/luns/db.img is 64 MiB with $blocks blocks allocated"

out=$(ci lun create scratch --volume vol0 --size 1G --thin --file vms/scratch.img 2>&1) ||
    fail "lun create scratch: $out"
[[ $(stat -c %s "$CL_MNT/vms/scratch.img") == $((1 << 30)) ]] || fail "scratch.img size"
blocks=$(stat -c %b "$CL_MNT/vms/scratch.img")
((blocks * 512 < 1 << 20)) || fail "thin scratch.img has $blocks blocks"
pass "lun create --thin --file vms/scratch.img: 1 GiB, $blocks blocks (sparse)"

out=$(ci lun list) || fail "lun list"
grep -qE "^db +vol0 +luns/db.img +64M +allocated +-$" <<<"$out" || fail "list: $out"
grep -qE "^scratch +vol0 +vms/scratch.img +1G +thin +-$" <<<"$out" || fail "list: $out"
[[ $(ci --json lun list | js 'len(d["luns"])') == 2 ]] || fail "json list"
out=$(ci --json lun show scratch) || fail "lun show: $out"
[[ $(js 'd["cfgstring"]' <<<"$out") == "cairn/vol0@$SERVERS/vms/scratch.img" ]] ||
    fail "cfgstring: $(js 'd["cfgstring"]' <<<"$out")"
[[ $(js 'd["file_size"]' <<<"$out") == $((1 << 30)) && $(js 'd["allocated_bytes"] < 1048576' <<<"$out") == True ]] ||
    fail "show sizes: $out"
wwn_db=$(ci --json lun show db | js 'd["lun"]["wwn"]')
[[ $wwn_db =~ ^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$ ]] || fail "wwn '$wwn_db'"
out=$(ci lun show db) || fail "lun show db"
grep -q "^Config string: cairn/vol0@$SERVERS/luns/db.img$" <<<"$out" || fail "show text: $out"
pass "lun list/show (text and --json): file, size, allocation, WWN, config string"

# --- bad input -------------------------------------------------------------------------
mkdir -p "$CL_DIR/bricks/stopped-b0"
cairn_cli volume create stopped "n1:$CL_DIR/bricks/stopped-b0" >/dev/null 2>&1 || fail "creating volume 'stopped'"
expect() { # CODE PATTERN ARGS...
    local code=$1 pat=$2 rc=0
    shift 2
    out=$(ci "$@" 2>&1) || rc=$?
    ((rc == code)) || fail "$* exited $rc, want $code: $out"
    grep -qF -- "$pat" <<<"$out" || fail "$*: message lacks '$pat': $out"
}
expect 1 "volume nosuch does not exist" lun create x --volume nosuch --size 1G
expect 1 "volume stopped is not started" lun create x --volume stopped --size 1G
expect 2 "invalid size '10X'" lun create x --volume vol0 --size 10X
expect 2 "invalid size '0': a LUN is at least 1M" lun create x --volume vol0 --size 0
expect 2 "invalid size '1048577': must be a multiple of 512" lun create x --volume vol0 --size 1048577
expect 2 "invalid LUN name 'a.b': '.' is not allowed" lun create a.b --volume vol0 --size 1G
expect 2 "invalid volume name 'bad vol'" lun create x --volume "bad vol" --size 1G
expect 2 "invalid backing file path 'a/../b'" lun create x --volume vol0 --size 1G --file a/../b
expect 2 "invalid backing file path 'a,b'" lun create x --volume vol0 --size 1G --file a,b
expect 1 "LUN db already exists" lun create db --volume vol0 --size 1G
expect 1 "backing file vol0/luns/db.img is already LUN db" lun create db2 --volume vol0 --size 1G --file luns/db.img
echo keep >"$CL_MNT/luns/foreign.img"
expect 1 "backing file vol0/luns/foreign.img already exists" lun create x --volume vol0 --size 1G --file luns/foreign.img
[[ $(cat "$CL_MNT/luns/foreign.img") == keep ]] || fail "an existing file was changed"
expect 1 "lun create: x: failed:" lun create x --volume nosuch --size 1G
[[ $(ci --json lun list | js 'len(d["luns"])') == 2 ]] || fail "a refused LUN was stored"
[[ ! -e $CL_MNT/luns/x.img ]] || fail "a refused LUN left a file"
pass "bad LUNs refused at create naming the bad part (missing/stopped volume, size, name, path, existing LUN/file); nothing stored"

# --- targets ---------------------------------------------------------------------------
T=iqn.2024-01.io.cairn.test:store
I1=iqn.1994-05.com.redhat:host1
I2=iqn.1994-05.com.redhat:host2
expect 2 "invalid target IQN 'iqn.2024-13.x.y': date '2024-13' after iqn. must be YYYY-MM" target create iqn.2024-13.x.y
expect 2 "invalid target IQN 'Target1': must start with iqn." target create Target1
expect 2 "invalid portal 'host:3260'" target create $T --portal host:3260
out=$(ci target create $T --portal 127.0.0.1 --portal "[::1]:3261" 2>&1) || fail "target create: $out"
grep -q "success: target $T on 127.0.0.1:3260, \[::1\]:3261" <<<"$out" || fail "create said: $out"
expect 1 "target $T already exists" target create $T
ci target portal add $T 0.0.0.0:3262 >/dev/null || fail "portal add"
ci target portal remove $T "[::1]:3261" >/dev/null || fail "portal remove"
expect 1 "has no portal 10.1.1.1:3260" target portal remove $T 10.1.1.1
out=$(ci target lun add $T scratch --lun 3) || fail "target lun add scratch: $out"
grep -q "LUN scratch is lun3 of $T" <<<"$out" || fail "lun add said: $out"
expect 1 "no LUN named nosuch" target lun add $T nosuch
expect 1 "lun3 of $T is already scratch" target lun add $T db --lun 3
ci target lun add $T db >/dev/null || fail "target lun add db"
expect 1 "LUN db is already lun0 of $T" target lun add $T db
expect 1 "LUN db is mapped by target $T" lun delete db
ci target acl add $T $I1 --chap-user host1 --chap-password 'S3cret-pass.12' >/dev/null || fail "acl add I1"
expect 1 "either every ACL has CHAP credentials or none" target acl add $T $I2
expect 2 "invalid initiator name 'host2'" target acl add $T host2
expect 2 "invalid CHAP password" target acl add $T $I2 --chap-user u --chap-password 'a b'
ci target acl add $T $I2 --chap-user host2 --chap-password 'An0ther-pass.12' >/dev/null || fail "acl add I2"
out=$(ci target show $T) || fail "target show"
for want in "Portals: 127.0.0.1:3260, 0.0.0.0:3262" "  lun0 db" "  lun3 scratch" "  $I1 (CHAP user host1)"; do
    grep -qF "$want" <<<"$out" || fail "target show lacks '$want': $out"
done
all=$(ci target list; ci --json target list; ci --json target show $T)
grep -q "S3cret" <<<"$all" && fail "a CHAP password was printed: $all"
[[ $(ci --json target show $T | js 'd["target"]["acls"][0]["chap_password"]') == "********" ]] || fail "json password"
pass "target records: IQN and portal checks, portals, LUN mappings, ACLs with CHAP (password hidden)"

# --- sync --dry-run ----------------------------------------------------------------------
echo '{}' >"$CL_DIR/empty.json"
out=$(ci sync --dry-run --from-saveconfig "$CL_DIR/empty.json") || fail "sync --dry-run: $out"
tpg=/iscsi/$T/tpg1
expected="would run 18 targetcli commands:
  /backstores/user:cairn create name=db size=67108864 cfgstring=vol0@$SERVERS/luns/db.img wwn=$wwn_db
  /backstores/user:cairn/db/alua create name=gw1 tag=1
  /backstores/user:cairn/db/alua/gw1 set alua alua_access_type=1 alua_access_state=0
  /backstores/user:cairn create name=scratch size=1073741824 cfgstring=vol0@$SERVERS/vms/scratch.img wwn=WWN
  /backstores/user:cairn/scratch/alua create name=gw1 tag=1
  /backstores/user:cairn/scratch/alua/gw1 set alua alua_access_type=1 alua_access_state=0
  /iscsi create $T
  $tpg/portals create 0.0.0.0 3262
  $tpg/portals create 127.0.0.1 3260
  $tpg/luns create /backstores/user:cairn/db lun=0
  $tpg/luns/lun0 set alua alua_tg_pt_gp_name=gw1
  $tpg/luns create /backstores/user:cairn/scratch lun=3
  $tpg/luns/lun3 set alua alua_tg_pt_gp_name=gw1
  $tpg/acls create $I1
  $tpg/acls/$I1 set auth userid=host1 password=********
  $tpg/acls create $I2
  $tpg/acls/$I2 set auth userid=host2 password=********
  $tpg set attribute authentication=1 cache_dynamic_acls=0 demo_mode_write_protect=0 generate_node_acls=0"
got=$(sed -E 's/(name=scratch .* wwn=)[0-9a-f-]+/\1WWN/' <<<"$out")
[[ $got == "$expected" ]] || fail "dry-run from an empty LIO:
--- got
$got
--- want
$expected"
pass "sync --dry-run from an empty LIO prints the 18 targetcli commands expected"

# A saved LIO state: db as wanted, a foreign fileio target, a stale Cairn LUN.
python3 - "$CL_DIR/saved.json" "$T" "$wwn_db" "$SERVERS" <<'PY'
import json, sys
path, t, wwn, servers = sys.argv[1:]
so = lambda name, size, cfg, w: {"plugin": "user", "name": name, "size": size, "config": cfg, "wwn": w,
        "alua_tpgs": [{"name": "default_tg_pt_gp", "tg_pt_gp_id": 0}, {"name": "gw1", "tg_pt_gp_id": 1}]}
json.dump({"storage_objects": [
    so("db", 67108864, f"cairn/vol0@{servers}/luns/db.img", wwn),
    so("old", 1048576, f"cairn/vol0@{servers}/luns/old.img", "x"),
    {"plugin": "fileio", "name": "flun0", "dev": "/var/tmp/f.img", "size": 1048576}],
  "targets": [
    {"fabric": "iscsi", "wwn": t, "tpgs": [{"tag": 1, "enable": True,
      "attributes": {"authentication": 1, "generate_node_acls": 0, "demo_mode_write_protect": 0, "cache_dynamic_acls": 0},
      "portals": [{"ip_address": "0.0.0.0", "port": 3260}],
      "luns": [{"index": 0, "storage_object": "/backstores/user/db", "alua_tg_pt_gp_name": "gw1"}],
      "node_acls": [{"node_wwn": "iqn.1994-05.com.redhat:host1", "chap_userid": "host1", "chap_password": "S3cret-pass.12",
                     "mapped_luns": [{"index": 0, "tpg_lun": 0}]}]}]},
    {"fabric": "iscsi", "wwn": "iqn.2024-01.io.other:fileio", "tpgs": [{"tag": 1, "enable": True,
      "luns": [{"index": 0, "storage_object": "/backstores/fileio/flun0"}]}]}]}, open(path, "w"))
PY
out=$(ci sync --dry-run --from-saveconfig "$CL_DIR/saved.json") || fail "sync --dry-run saved: $out"
got=$(sed -E 's/wwn=[0-9a-f-]+/wwn=WWN/' <<<"$out")
expected="would run 11 targetcli commands:
  $tpg/portals delete 0.0.0.0 3260
  /backstores/user:cairn delete old
  /backstores/user:cairn create name=scratch size=1073741824 cfgstring=vol0@$SERVERS/vms/scratch.img wwn=WWN
  /backstores/user:cairn/scratch/alua create name=gw1 tag=1
  /backstores/user:cairn/scratch/alua/gw1 set alua alua_access_type=1 alua_access_state=0
  $tpg/portals create 0.0.0.0 3262
  $tpg/portals create 127.0.0.1 3260
  $tpg/luns create /backstores/user:cairn/scratch lun=3
  $tpg/luns/lun3 set alua alua_tg_pt_gp_name=gw1
  $tpg/acls create $I2
  $tpg/acls/$I2 set auth userid=host2 password=********"
[[ $got == "$expected" ]] || fail "dry-run from a saved LIO:
--- got
$got
--- want
$expected"
[[ $(ci --json --alua-tag 2 sync --dry-run --from-saveconfig "$CL_DIR/saved.json" |
    js 'sum("alua_tg_pt_gp_name=gw2" in c for c in d["commands"])') == 2 ]] || fail "--alua-tag 2"
pass "sync --dry-run from a saved LIO: only the difference (stale LUN and portal go, fileio target untouched)"

# A gateway (its conf dir exists) applies on change; without LIO targetcli cannot read it,
# which is reported while the change stays stored.
mkdir -p "$CL_DIR/gw"
out=$(CAIRN_ISCSI_CONF_DIR=$CL_DIR/gw CAIRN_TARGETCLI=$CL_DIR/no-targetcli ci target acl remove $T $I2 2>&1) ||
    fail "acl remove on a gateway without LIO: $out"
grep -q "stored, but applying it to the local LIO failed: cannot run $CL_DIR/no-targetcli" <<<"$out" || fail "acl remove said: $out"
expect 1 "cannot run $CL_DIR/no-targetcli" --conf-dir "$CL_DIR/gw" --targetcli "$CL_DIR/no-targetcli" sync
pass "on a gateway without a working targetcli the change is stored and the apply error reported"

# --- delete ----------------------------------------------------------------------------
ci target lun remove $T db >/dev/null || fail "target lun remove"
out=$(ci lun delete db 2>&1) || fail "lun delete db: $out"
grep -q "LUN db deleted; vol0/luns/db.img removed" <<<"$out" || fail "delete said: $out"
[[ ! -e $CL_MNT/luns/db.img ]] || fail "db.img still there"
ci target delete $T >/dev/null || fail "target delete"
ci lun delete scratch --keep-file >/dev/null || fail "lun delete scratch --keep-file"
[[ -e $CL_MNT/vms/scratch.img ]] || fail "--keep-file removed the file"
expect 1 "no LUN named db" lun delete db
[[ $(ci lun list) == "No iSCSI LUNs" && $(ci target list) == "No iSCSI targets" ]] || fail "not empty after deletes"
pass "lun delete (file removed, or kept with --keep-file), target delete"

# --- delete while gateways still hold the LUN ----------------------------------------------
# Two "gateways" (own conf dir and name), their LIO played by tests/iscsi/fake-targetcli.py
# (user:cairn objects in a saveconfig file): each sync records what its LIO holds
# (iscsi-gateway/NAME); the file goes only when the last holder's sync lets the LUN go.
gw() {
    local n=$1
    shift
    mkdir -p "$CL_DIR/gw-$n"
    FAKE_LIO=$CL_DIR/lio-$n.json ci --conf-dir "$CL_DIR/gw-$n" --gateway-name "$n" \
        --targetcli "$CL_REPO/tests/iscsi/fake-targetcli.py" "$@"
}
ci lun create web --volume vol0 --size 16M --thin >/dev/null || fail "lun create web"
for n in gwa gwb; do
    out=$(gw $n sync 2>&1) || fail "sync on $n: $out"
    grep -q "/backstores/user:cairn create name=web " <<<"$out" || fail "sync on $n said: $out"
done
out=$(ci lun delete web 2>&1) || fail "lun delete web: $out"
grep -q "LUN web is being deleted: still in the LIO of gateway(s) gwa, gwb; vol0/luns/web.img is removed by the .cairn iscsi sync. that lets it go last" <<<"$out" ||
    fail "delete said: $out"
[[ -e $CL_MNT/luns/web.img ]] || fail "web.img removed while gateways hold it"
grep -q "^web (deleting) " <<<"$(ci lun list)" || fail "lun list: $(ci lun list)"
expect 1 "LUN web is being deleted" lun create web --volume vol0 --size 16M
out=$(gw gwa sync 2>&1) || fail "sync on gwa: $out"
[[ $out == "ran 1 targetcli commands:
  /backstores/user:cairn delete web" ]] || fail "sync on gwa said: $out"
[[ -e $CL_MNT/luns/web.img ]] || fail "web.img removed while gwb holds it"
pass "lun delete with gateways holding the LUN: marked deleting, file kept; the first sync takes it out of its LIO"
out=$(gw gwb sync 2>&1) || fail "sync on gwb: $out"
grep -q "LUN web: no gateway holds it any more; removed vol0/luns/web.img" <<<"$out" ||
    fail "sync on gwb said: $out"
[[ ! -e $CL_MNT/luns/web.img ]] || fail "web.img still there after the last gateway let it go"
[[ $(ci lun list) == "No iSCSI LUNs" ]] || fail "LUN record left: $(ci lun list)"
out=$(gw gwa sync 2>&1) || fail "sync on gwa: $out"
[[ $out == "LIO is up to date: nothing to change" ]] || fail "second sync on gwa said: $out"
pass "the last holder's sync removes the backing file and the record"

# --force: a gateway that is gone for good still lists the LUN
ci lun create tmp --volume vol0 --size 16M --thin >/dev/null || fail "lun create tmp"
gw gwa sync >/dev/null || fail "sync on gwa"
out=$(ci lun delete tmp --force 2>&1) || fail "lun delete tmp --force: $out"
grep -q "LUN tmp deleted; vol0/luns/tmp.img removed at once (--force) (gateways gwa still listed it)" <<<"$out" ||
    fail "delete --force said: $out"
[[ ! -e $CL_MNT/luns/tmp.img ]] || fail "--force kept tmp.img"
# nothing holds a LUN nobody synced: removed at once
ci lun create tmp2 --volume vol0 --size 16M --thin >/dev/null || fail "lun create tmp2"
out=$(ci lun delete tmp2 2>&1) || fail "lun delete tmp2: $out"
grep -q "LUN tmp2 deleted; vol0/luns/tmp2.img removed" <<<"$out" || fail "delete tmp2 said: $out"
[[ ! -e $CL_MNT/luns/tmp2.img ]] || fail "tmp2.img kept though no gateway held it"
pass "lun delete --force removes at once; a LUN no gateway holds goes at once"

finish

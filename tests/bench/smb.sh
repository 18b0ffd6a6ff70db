#!/usr/bin/env bash
# SMB benchmark (not part of make test): smbclient over loopback against the vfs_cairn
# share [vol0] and a stock share on the local filesystem, same smbd, same run.
#   - 1 GiB put and get (wall clock, one session each: session setup and teardown count)
#   - 4 KiB small files: create, read, delete (BENCH_FILES files, one session per phase)
#   - session setup + teardown (connect, ls, disconnect)
#   - descriptors of the smbd serving the delete session (a leak would grow them)
# and, in the same smbd and run, Samba's vfs_glusterfs over a 2 x 2 Gluster volume on the
# same disk (tests/bench/gluster.sh; needs glusterfs-server, as make bench installs; left
# out with a note when it cannot start, or with BENCH_GLUSTER=0).
# Prints a table with the vfs_cairn / stock and vfs_cairn / vfs_glusterfs ratios, and saves
# it as tests/bench/results/<date>-smb.md (-2, -3, ... for later runs that day;
# BENCH_SAVE=0: do not save).
# Env: BENCH_BIG_MIB (1024), BENCH_FILES (2000), BENCH_SESSIONS (20), BENCH_RESULTS,
#      BENCH_GLUSTER (1)
set -uo pipefail
# TLS (docs/security.md): the clusters' CA and the admin credential, as tests/run-all.sh sets them.
export CAIRN_CA_DIR=${CAIRN_CA_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)/build/bench-tmp/ca}
export CAIRN_CREDENTIALS=${CAIRN_CREDENTIALS:-$CAIRN_CA_DIR/admin.pem}
# shellcheck source=tests/smb/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../smb/lib.sh"
# shellcheck source=tests/bench/gluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/gluster.sh"
BIG_MIB=${BENCH_BIG_MIB:-1024}
NFILES=${BENCH_FILES:-2000}
SESSIONS=${BENCH_SESSIONS:-20}
RESULTS=${BENCH_RESULTS:-$CL_REPO/tests/bench/results}

# gluster_share DIR: start Gluster (gl-rep, 2 x 2) and add [gluster], served by
# vfs_glusterfs through gfapi, to the smb.conf in DIR (before smbd starts).
gluster_share() {
    [[ ${BENCH_GLUSTER:-1} == 1 ]] || return 0
    gl_up "$CL_DIR/gluster" || return 0
    chmod 0777 "$GL_REP" # as the vfs_cairn share's root
    {
        echo "[gluster]"
        echo "    path = /"
        echo "    read only = no"
        echo "    vfs objects = acl_xattr streams_xattr glusterfs"
        echo "    glusterfs:volume = gl-rep"
        echo "    glusterfs:volfile_server = $GL_ADDR"
        echo "    glusterfs:logfile = $GL_DIR/log/vfs-glusterfs.log"
        echo "    acl_xattr:ignore system acls = yes"
        echo "    kernel share modes = no"
        echo "    valid users = $SMB_USER root"
    } >>"$1/smb.conf"
}
bench_cleanup() {
    local rc=$?
    gl_down
    (exit "$rc")
    smb_cleanup
}

smb_up 1 gluster_share
trap bench_cleanup EXIT
SHARES=(stock vol0)
[[ -n $GL_REP ]] && SHARES+=(gluster)
work=$CL_DIR/bench
mkdir -p "$work/small"
echo "# preparing a ${BIG_MIB} MiB file and $NFILES 4 KiB files" >&2
head -c $((BIG_MIB * 1024 * 1024)) /dev/urandom >"$work/big"
for i in $(seq 1 "$NFILES"); do head -c 4096 /dev/urandom >"$work/small/f$i"; done
now() { date +%s.%N; }
rate() { python3 -c "import sys; print('%.1f' % (float(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2]))))" "$@"; }
declare -A R=()

# smbd_children: pids of the children of our smbd (notifyd, cleanupd, sessions), sorted.
smbd_children() { pgrep -P "$(cat "$SMB_DIR/smbd.pid")" smbd | sort; }

# watch_fds PID BEFORE: while smbclient PID runs, sample the descriptor count of the smbd
# child that appeared after BEFORE (the one serving it); prints "first -> max".
watch_fds() {
    local client=$1 before=$2 child="" n first="" max=0
    while kill -0 "$client" 2>/dev/null; do
        if [[ -z $child ]]; then
            child=$(comm -13 <(echo "$before") <(smbd_children) | head -n 1)
        fi
        if [[ -n $child ]]; then
            n=$(find "/proc/$child/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
            ((n > 0)) && { [[ -n $first ]] || first=$n; ((n > max)) && max=$n; }
        fi
        sleep 0.1
    done
    echo "${first:-?} -> $max"
}

for share in "${SHARES[@]}"; do
    echo "# $share: 1 GiB put/get" >&2
    t0=$(now); smbc "$share" "put $work/big big" >/dev/null || fail "$share: put big"; t1=$(now)
    R[$share,put]=$(rate "$BIG_MIB" "$t0" "$t1")
    t0=$(now); smbc "$share" "get big $work/big.back" >/dev/null || fail "$share: get big"; t1=$(now)
    R[$share,get]=$(rate "$BIG_MIB" "$t0" "$t1")
    cmp -s "$work/big" "$work/big.back" || fail "$share: 1 GiB file read back differs"
    rm -f "$work/big.back"

    echo "# $share: $NFILES small files create/read/delete" >&2
    cmds="mkdir small; cd small; lcd $work/small; prompt off; mput f*"
    t0=$(now); smbc "$share" "$cmds" >/dev/null || fail "$share: create small"; t1=$(now)
    R[$share,create]=$(rate "$NFILES" "$t0" "$t1")
    mkdir -p "$work/back-$share"
    t0=$(now); smbc "$share" "cd small; lcd $work/back-$share; prompt off; mget f*" >/dev/null ||
        fail "$share: read small"; t1=$(now)
    R[$share,read]=$(rate "$NFILES" "$t0" "$t1")
    [[ $(find "$work/back-$share" -type f | wc -l) == "$NFILES" ]] || fail "$share: not all small files read"
    cmp -s "$work/small/f1" "$work/back-$share/f1" || fail "$share: small file read back differs"
    before=$(smbd_children)
    t0=$(now)
    smbc "$share" "cd small; del f*" >"$work/del-$share.out" 2>&1 &
    client=$!
    R[$share,fds]=$(watch_fds "$client" "$before")
    wait "$client" || fail "$share: delete small: $(tail -n 2 "$work/del-$share.out")"
    t1=$(now)
    R[$share,delete]=$(rate "$NFILES" "$t0" "$t1")
    out=$(smbc "$share" "ls small/*" 2>&1)
    grep -q ' f[0-9]' <<<"$out" && fail "$share: files left after the delete session"

    echo "# $share: $SESSIONS sessions" >&2
    t0=$(now)
    for i in $(seq 1 "$SESSIONS"); do smbc "$share" "ls big" >/dev/null || fail "$share: session"; done
    t1=$(now)
    R[$share,session]=$(python3 -c "print('%.1f' % ((float('$t1') - float('$t0')) * 1000 / $SESSIONS))")
    smbc "$share" "del big; rmdir small" >/dev/null || true
done

# build_kind FILE: "release" or "debug" (cargo's profile directory the file comes from)
build_kind() {
    case $(readlink -f "$1") in
    */release/*) echo release ;;
    */debug/*) echo debug ;;
    *) echo "unknown ($1)" ;;
    esac
}
# ratio KEY OTHER: vfs_cairn's value over OTHER's ("-" without OTHER's)
ratio() {
    [[ -n ${R[$2,$1]:-} ]] || { echo -; return; }
    python3 -c "print('%.2f' % (float('${R[vol0,$1]}') / float('${R[$2,$1]}')))"
}
table() {
    printf '| %s | %s | %s | %s | %s | %s |\n' "SMB over loopback (smbclient)" vfs_cairn stock \
        "vfs_glusterfs (2 x 2)" "cairn / stock" "cairn / vfs_glusterfs"
    printf '|---|---:|---:|---:|---:|---:|\n'
    row() {
        printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "${R[vol0,$2]}" "${R[stock,$2]}" \
            "${R[gluster,$2]:--}" "$(ratio "$2" stock)" "$(ratio "$2" gluster)"
    }
    row "put ${BIG_MIB} MiB (MiB/s, wall clock)" put
    row "get ${BIG_MIB} MiB (MiB/s, wall clock)" get
    row "create 4 KiB files, one session (files/s)" create
    row "read 4 KiB files, one session (files/s)" read
    row "delete 4 KiB files, one session (files/s)" delete
    row "session setup+ls+teardown (ms)" session
    printf '| %s | %s | %s | %s | | |\n' "smbd descriptors in the $NFILES-file delete session (first -> max)" \
        "${R[vol0,fds]}" "${R[stock,fds]}" "${R[gluster,fds]:--}"
}
echo
table
if [[ ${BENCH_SAVE:-1} == 1 ]]; then
    mkdir -p "$RESULTS"
    f=$(bench_result_base "$RESULTS/$(date +%F)-smb").md
    {
        echo "# SMB benchmark — $(date '+%F %H:%M') on $(hostname)"
        echo
        echo "- tests/bench/smb.sh, commit $(git -C "$CL_REPO" rev-parse --short HEAD 2>/dev/null)," \
            "$(nproc) CPUs; one cairnd ($(build_kind "$CAIRN_BIN_DIR/cairnd") build, $CAIRN_BIN_DIR)," \
            "libcairn $(build_kind "$(readlink -f "$CL_REPO/vfs-module/build/libcairn.so.1")") build;" \
            "volume 2 x 2 (replica 2) on the local disk;" \
            "smbd $(smbd --version | awk '{print $2}') with vfs_cairn and a stock share on the" \
            "same disk, same smbd; $NFILES files of 4 KiB; ${BIG_MIB} MiB file"
        echo "- ratios = vfs_cairn / stock and vfs_cairn / vfs_glusterfs (Gluster $(glusterfs --version 2>/dev/null | head -1 | awk '{print $2}'), gl-rep: replica 2 over 2 sets on the same disk, same smbd, same run; '-' = not measured)"
        echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (other work shares the machine)"
        echo
        table
    } >"$f"
    echo "saved $f"
fi
finish

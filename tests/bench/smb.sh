#!/usr/bin/env bash
# SMB benchmark (not part of make test): smbclient over loopback against the vfs_cairn
# share [vol0] and a stock share on the local filesystem, same smbd, same run.
#   - 1 GiB put and get (wall clock, one session each)
#   - 4 KiB small files: create, read, delete (N files, one session per phase)
#   - session setup + teardown (connect, ls, disconnect)
# Prints a table with the vfs_cairn / stock ratio.  Env: BENCH_BIG_MIB (1024), BENCH_FILES (1000)
set -uo pipefail
# shellcheck source=tests/smb/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../smb/lib.sh"
BIG_MIB=${BENCH_BIG_MIB:-1024}
NFILES=${BENCH_FILES:-1000}
SESSIONS=${BENCH_SESSIONS:-20}

smb_up 1
work=$CL_DIR/bench
mkdir -p "$work/small"
head -c $((BIG_MIB * 1024 * 1024)) /dev/urandom >"$work/big"
for i in $(seq 1 "$NFILES"); do head -c 4096 /dev/urandom >"$work/small/f$i"; done
now() { date +%s.%N; }
rate() { python3 -c "import sys; print('%.1f' % (float(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2]))))" "$@"; }
declare -A R=()

for share in stock vol0; do
    t0=$(now); smbc "$share" "put $work/big big" >/dev/null || fail "$share: put big"; t1=$(now)
    R[$share,put]=$(rate "$BIG_MIB" "$t0" "$t1")
    t0=$(now); smbc "$share" "get big $work/big.back" >/dev/null || fail "$share: get big"; t1=$(now)
    R[$share,get]=$(rate "$BIG_MIB" "$t0" "$t1")
    cmp -s "$work/big" "$work/big.back" || fail "$share: 1 GiB file read back differs"
    rm -f "$work/big.back"

    cmds="mkdir small; cd small; lcd $work/small; prompt off; mput f*"
    t0=$(now); smbc "$share" "$cmds" >/dev/null || fail "$share: create small"; t1=$(now)
    R[$share,create]=$(rate "$NFILES" "$t0" "$t1")
    mkdir -p "$work/back-$share"
    t0=$(now); smbc "$share" "cd small; lcd $work/back-$share; prompt off; mget f*" >/dev/null ||
        fail "$share: read small"; t1=$(now)
    R[$share,read]=$(rate "$NFILES" "$t0" "$t1")
    [[ $(find "$work/back-$share" -type f | wc -l) == "$NFILES" ]] || fail "$share: not all small files read"
    t0=$(now); smbc "$share" "cd small; del f*" >/dev/null || fail "$share: delete small"; t1=$(now)
    R[$share,delete]=$(rate "$NFILES" "$t0" "$t1")

    t0=$(now)
    for i in $(seq 1 "$SESSIONS"); do smbc "$share" "ls big" >/dev/null || fail "$share: session"; done
    t1=$(now)
    R[$share,session]=$(python3 -c "print('%.1f' % ((float('$t1') - float('$t0')) * 1000 / $SESSIONS))")
    smbc "$share" "del big; rmdir small" >/dev/null || true
done

printf '\n%-34s %12s %12s %8s\n' "SMB over loopback (smbclient)" "vfs_cairn" "stock" "ratio"
row() {
    printf '%-34s %12s %12s %8s\n' "$1" "${R[vol0,$2]}" "${R[stock,$2]}" \
        "$(python3 -c "print('%.2f' % (float('${R[vol0,$2]}') / float('${R[stock,$2]}')))")"
}
row "put ${BIG_MIB} MiB (MiB/s, wall clock)" put
row "get ${BIG_MIB} MiB (MiB/s, wall clock)" get
row "create 4 KiB files (files/s)" create
row "read 4 KiB files (files/s)" read
row "delete 4 KiB files (files/s)" delete
row "session setup+ls+teardown (ms)" session
finish

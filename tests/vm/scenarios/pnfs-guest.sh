#!/bin/bash
# Guest side of scenario pnfs: mount the host's MDS (FSAL_CAIRN with PNFS = true) and do
# I/O that must go to the DSs. Runs as root in the guest:
#
# VERS is an NFS version (4.1, 4.2: the FILES export /vol0) or one with "ff" appended
# (4.2ff: the Flexible Files export /vol0ff, mounted with vers=4.2); the mount point and
# the files' directory are named after VERS as given.
#
#   pnfs-guest.sh run VERS PORT SIZES    mount 10.0.2.2:/vol0 with VERS on /mnt/pnfs-VERS,
#                                        write files of SIZES (bytes, comma-separated),
#                                        read them back with a cold cache, check the
#                                        counters (below), leave NAME.md5 next to each
#   pnfs-guest.sh umount VERS
#   pnfs-guest.sh debug VERS             the kernel's pNFS/RPC debug messages (dmesg,
#                                        rpcdebug -m nfs -s pnfs, -m rpc -s call, on from
#                                        the mount of `run`) and this mount's mountstats
#   pnfs-guest.sh big VERS MIB           write file big, 1 MiB at a time with fsync (each
#                                        MiB acknowledged; the host kills its DS on the
#                                        way), read it back with a cold cache, leave
#                                        big.md5 next to it
#
# Counters: this mount's per-op statistics in /proc/self/mountstats: GETDEVICEINFO and
# LAYOUTCOMMIT go to the MDS only and must be > 0 (LAYOUTGET rides in the OPEN compound
# on Linux 6.1 and is then counted as OPEN: the host counts it in the MDS's log). The
# files layout driver counts the READs and WRITEs it sends to a DS under the MDS mount
# too (filelayout_{read,write}_count_stats), so that the I/O went to the DSs and not to
# the MDS is checked on the host, in the op logs of the MDS's and the DSs' Ganeshas.
set -euo pipefail

say() { echo "guest: $*"; }
die() {
    echo "guest FAIL: $*" >&2
    exit 1
}

cmd=$1 tag=$2
vers=${tag%ff} path=/vol0
[[ $tag == *ff ]] && path=/vol0ff
mnt=/mnt/pnfs-$tag

# op_count OP: this mount's count of OP (first number of its per-op line)
op_count() {
    awk -v m=" $mnt " -v op="$1:" '
        /^device / { on = index($0, m) > 0 }
        on && $1 == op { print $2; found = 1; exit }
        END { if (!found) print 0 }' /proc/self/mountstats
}

# proc4 N: the client-wide count of NFSv4 procedure N (1 READ, 2 WRITE, 3 COMMIT)
proc4() { awk -v n="$1" '$1 == "proc4" { print $(n + 3) }' /proc/net/rpc/nfs; }

case $cmd in
run)
    # SIZES comes comma-separated: ssh joins its arguments into one command line, so
    # a space-separated list would arrive as several arguments (only the first used)
    port=$3 sizes=${4//,/ }
    modprobe nfs_layout_nfsv41_files 2>/dev/null || true
    modprobe nfs_layout_flexfiles 2>/dev/null || true
    # A DS that dies with a WRITE in flight: Linux retries that WRITE for dataserver_timeo
    # (60 s) times dataserver_retrans + 1 (6) before it sends it through the MDS, over 6
    # minutes (a DS that dies between two WRITEs is refused at once). The scenario kills
    # a DS during a write: 2 s and 2 retries bound that to about 6 s.
    for m in nfs_layout_nfsv41_files nfs_layout_flexfiles; do
        [[ -d /sys/module/$m/parameters ]] || continue
        echo 20 >"/sys/module/$m/parameters/dataserver_timeo"
        echo 2 >"/sys/module/$m/parameters/dataserver_retrans"
    done
    # debugging aids, printed by `debug` (the host asks for them when a run fails)
    dmesg -C
    rpcdebug -m nfs -s pnfs >/dev/null
    rpcdebug -m rpc -s call >/dev/null
    mkdir -p "$mnt"
    mount -t nfs -o "vers=$vers,proto=tcp,port=$port,hard,timeo=100,retrans=3" \
        "10.0.2.2:$path" "$mnt" || die "mount 10.0.2.2:$path vers=$vers"
    grep " $mnt " /proc/mounts | sed 's/^/guest: /'
    grep -A2 "^device 10.0.2.2:$path mounted on $mnt " /proc/self/mountstats |
        grep -i pnfs | sed 's/^/guest: /' || true
    dir=$mnt/pnfs-$tag
    mkdir -p "$dir"
    r0=$(proc4 1) w0=$(proc4 2)
    for s in $sizes; do
        head -c "$s" /dev/urandom >"/tmp/f$s"
        cp "/tmp/f$s" "$dir/f$s"
    done
    sync
    echo 3 >/proc/sys/vm/drop_caches
    for s in $sizes; do
        cmp "/tmp/f$s" "$dir/f$s" || {
            say "MDS mount: LAYOUTGET $(op_count LAYOUTGET) GETDEVICEINFO $(op_count GETDEVICEINFO) LAYOUTCOMMIT $(op_count LAYOUTCOMMIT) WRITE $(op_count WRITE) COMMIT $(op_count COMMIT); all: READ +$(($(proc4 1) - r0)) WRITE +$(($(proc4 2) - w0))"
            stat -c "guest: %n %s bytes" "$dir"/f*
            die "f$s ($s bytes) read back differs"
        }
        md5sum <"/tmp/f$s" | cut -d' ' -f1 >"/tmp/f$s.md5"
    done
    say "v$tag: wrote and read back (cold cache) files of $sizes bytes"
    for s in $sizes; do cp "/tmp/f$s.md5" "$dir/f$s.md5"; done
    sync
    lg=$(op_count LAYOUTGET) gd=$(op_count GETDEVICEINFO) lc=$(op_count LAYOUTCOMMIT)
    mr=$(op_count READ) mw=$(op_count WRITE)
    r=$(($(proc4 1) - r0)) w=$(($(proc4 2) - w0))
    say "v$tag: MDS mount: LAYOUTGET $lg GETDEVICEINFO $gd LAYOUTCOMMIT $lc READ $mr WRITE $mw (DS I/O included); all connections: READ +$r WRITE +$w"
    ((gd > 0)) || die "no GETDEVICEINFO sent to the MDS"
    ((lc > 0)) || die "no LAYOUTCOMMIT sent to the MDS (the DSs' writes never reach its view)"
    ((r > 0 && w > 0)) || die "no READ/WRITE sent at all (+$r/+$w)?"
    echo "COUNTS lg=$lg gd=$gd lc=$lc read=$mr write=$mw all_read=$r all_write=$w"
    ;;
big)
    mib=$3 dir=$mnt/pnfs-$tag
    head -c "$((mib << 20))" /dev/urandom >/tmp/big
    for ((i = 0; i < mib; i++)); do
        dd if=/tmp/big of="$dir/big" bs=1M skip="$i" seek="$i" count=1 \
            conv=notrunc,fsync status=none || die "writing MiB $i of big"
        sleep 0.5
    done
    echo 3 >/proc/sys/vm/drop_caches
    cmp /tmp/big "$dir/big" || die "big ($mib MiB) read back differs"
    md5sum </tmp/big | cut -d' ' -f1 >"$dir/big.md5"
    say "v$tag: big ($mib MiB, each fsynced) read back the same (cold cache)"
    ;;
umount)
    umount "$mnt" || die "umount $mnt"
    ;;
debug)
    echo "== /proc/self/mountstats"
    cat /proc/self/mountstats
    echo "== /proc/net/rpc/nfs"
    cat /proc/net/rpc/nfs
    echo "== dmesg"
    dmesg
    rpcdebug -m nfs -c all >/dev/null
    rpcdebug -m rpc -c all >/dev/null
    ;;
*) die "unknown command $cmd" ;;
esac

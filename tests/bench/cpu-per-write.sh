#!/usr/bin/env bash
# cpu-per-write.sh BINDIR LABEL [ROUNDS]: 1 GiB sequential write (1 MiB records, fsync)
# through FUSE on a one-node 2x2 (rep) and 4x1 (dist) volume, alternated, ROUNDS (3) times;
# prints MiB/s, the CPU seconds of cairnd, of the mount and of all kworkers over the write,
# and the time the disk was busy (/proc/diskstats io_ticks of DISK, default vda: counts
# every user of the disk). For A/B runs of two builds (docs/benchmarks.md, "Direct writes
# on the brick"); cairnd's environment passes through (CAIRN_DIRECT_WRITES=0).
set -uo pipefail
export CAIRN_BIN_DIR=$1
LABEL=$2 ROUNDS=${3:-3} DISK=${DISK:-vda}
export RUST_LOG=warn
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
cl_one_node rep:2 dist:1
CPID=${CL_PID[n1]}
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
kw() { cat /proc/[0-9]*/stat 2>/dev/null | awk '$2 ~ /kworker/ {s+=$14+$15} END {print s}'; }
for r in $(seq "$ROUNDS"); do
    for v in rep dist; do
        M=$CL_DIR/mnt/$v
        MPID=$(pgrep -f "mount-cairn.*$CL_DIR/mnt/$v" | head -1)
        rm -f "$M/seq.dat"; sync
        c0=$(cpu "$CPID") m0=$(cpu "$MPID") d0=$(awk -v d="$DISK" '$3==d{print $13+0}' /proc/diskstats) k0=$(kw)
        s=$(python3 - "$M/seq.dat" <<'PY'
import os, sys, time
b = b"\xa5" * (1 << 20)
t = time.time()
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL)
for _ in range(1024):
        os.write(fd, b)
os.fsync(fd); os.close(fd)
print(time.time() - t)
PY
)
        c1=$(cpu "$CPID") m1=$(cpu "$MPID") d1=$(awk -v d="$DISK" '$3==d{print $13+0}' /proc/diskstats) k1=$(kw)
        python3 -c "import os,sys;hz=os.sysconf('SC_CLK_TCK');s=float('$s');print(f'$LABEL r$r $v MiB/s={1024/s:6.0f} cairnd_s/GiB={($c1-$c0)/hz:5.2f} mount_s/GiB={($m1-$m0)/hz:5.2f} kworker_s={($k1-$k0)/hz:5.2f} disk_busy_s={($d1-$d0)/1000:4.2f} wall_s={s:4.2f}')"
    done
done
pass "measured"
finish

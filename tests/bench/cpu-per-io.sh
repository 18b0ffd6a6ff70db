#!/usr/bin/env bash
# cpu-per-io.sh BINDIR LABEL: 4 KiB random read and write at QD16 (fio, libaio, O_DIRECT)
# through FUSE on a one-node 2x2 volume, twice each; prints IOPS and the CPU of cairnd and
# of the mount per I/O (from /proc/PID/stat over the run). For A/B runs of two builds
# (docs/benchmarks.md, "CPU per 4 KiB random read and write"). Env: SECS (10), MIB (256).
set -uo pipefail
export CAIRN_BIN_DIR=$1
LABEL=$2 SECS=${SECS:-10} MIB=${MIB:-256}
export RUST_LOG=warn
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
cl_one_node rep:2
M=$CL_DIR/mnt/rep
CPID=${CL_PID[n1]}
MPID=$(pgrep -f "mount-cairn.*$CL_DIR/mnt/rep" | head -1)
dd if=/dev/urandom of="$M/f" bs=1M count="$MIB" status=none conv=fsync
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
for op in randread randwrite randread randwrite; do
    c0=$(cpu "$CPID") m0=$(cpu "$MPID")
    fio --name="$op" --filename="$M/f" --rw="$op" --bs=4k --iodepth=16 --ioengine=libaio \
        --direct=1 --runtime="$SECS" --time_based --size="${MIB}M" --output-format=json \
        >"$CL_DIR/fio.json" 2>/dev/null || fail "fio $op"
    c1=$(cpu "$CPID") m1=$(cpu "$MPID")
    python3 - "$op" "$LABEL" "$((c1 - c0))" "$((m1 - m0))" "$CL_DIR/fio.json" <<'PY'
import json, os, sys
op, label, c, m = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
t = open(sys.argv[5]).read()
j = json.loads(t[t.index("{"):])["jobs"][0]
s = j["read"] if op == "randread" else j["write"]
n, hz = max(s["total_ios"], 1), os.sysconf("SC_CLK_TCK")
print(f"{label:8} {op:9} iops={s['iops']:8.0f} cairnd_us/io={c / hz * 1e6 / n:6.1f} "
      f"mount_us/io={m / hz * 1e6 / n:6.1f}")
PY
done
pass "measured"
finish

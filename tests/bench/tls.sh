#!/usr/bin/env bash
# TLS on vs off (make bench runs it after tests/bench/run.sh; not part of make test): what
# encryption and mutual authentication cost (issue 20 aims for <= 10%). One cluster (one
# etcd, one cairnd, a 2 x 2 replica-2 volume, bricks on the local disk), measured through
# a FUSE mount (mount-cairn) in two transports, alternating round by round so that load
# on this shared machine falls on both:
#
#   tls     the default: TLS 1.3 (rustls), mutual certificates (docs/security.md)
#   plain   cairnd, the CLI and the mount with CAIRN_TRANSPORT=plain (isolated networks)
#
# Between transports cairnd is restarted and the volume remounted; the volume, its bricks
# and their disk stay the same. Workloads (cairn-bench, as in run.sh): sequential write +
# fsync and cold read of BENCH_TLS_MIB MiB in 1 MiB records; 4 KiB small files create /
# read / stat / delete (BENCH_TLS_FILES files, 4-level paths, BENCH_THREADS threads). The
# table shows each number's median over BENCH_ROUNDS rounds, the ratio tls / plain and the
# cost (1 - ratio), and is saved as tests/bench/results/<date>-<host>-tls.md (raw lines
# next to it as .jsonl). It also shows the CPU time cairnd and mount-cairn spent on each
# step (per MiB of the sequential step, per file of the small-file step): on a shared
# machine throughput swings with the load of others, CPU time much less, and CPU is what
# encryption costs.
#
# Env: CAIRN_BIN_DIR (default backend/target/release), BENCH_QUICK=1 (64 MiB, 400 files,
#      1 round, not saved unless BENCH_SAVE=1), BENCH_TLS_MIB (1024), BENCH_TLS_FILES (5000),
#      BENCH_ROUNDS (3), BENCH_THREADS (4), BENCH_TMP, BENCH_RESULTS.
set -uo pipefail

# shellcheck source=tests/bench/env.sh
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [[ ${BENCH_QUICK:-0} == 1 ]]; then
    mode=quick
    : "${BENCH_TLS_MIB:=64}" "${BENCH_TLS_FILES:=400}" "${BENCH_SAVE:=0}" "${BENCH_ROUNDS:=1}"
else
    mode=full
    : "${BENCH_TLS_MIB:=1024}" "${BENCH_TLS_FILES:=5000}" "${BENCH_SAVE:=1}" "${BENCH_ROUNDS:=3}"
fi
: "${BENCH_THREADS:=4}"
BENCH_RESULTS=${BENCH_RESULTS:-$bench_dir/results}
[[ $BENCH_ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "tls.sh: BENCH_ROUNDS must be a positive integer, not '$BENCH_ROUNDS'" >&2; exit 2; }

# shellcheck source=tests/integration/lib.sh
. "$repo/tests/integration/lib.sh"
CAIRN_LOG_TAG=bench-tls

BENCH=$CAIRN_BIN_DIR/cairn-bench
[[ -x $BENCH ]] || fail "$BENCH missing: build it (make bench, or cargo build --release -p cairn-bench)"

cl_init
RAW=$CL_DIR/results.jsonl
: >"$RAW"
MNT=$CL_DIR/mnt/rep
started=$SECONDS

# transport MODE: cairnd, the CLI and the mount in MODE (tls|plain); the volume remounted.
transport() {
    [[ -n ${CL_MOUNTS[$MNT]:-} ]] && mountpoint -q "$MNT" && cl_umount "$MNT"
    cl_stop_node n1 || fail "stopping cairnd to switch to $1"
    if [[ $1 == plain ]]; then export CAIRN_TRANSPORT=plain; else unset CAIRN_TRANSPORT; fi
    cl_start_node n1
    wait_until 30 cairn_cli volume status rep >/dev/null 2>&1 ||
        fail "volume rep does not answer after cairnd restarted with transport $1"
    cl_mount rep "$MNT"
    # the transport really changed: a TLS node refuses a plain CLI, a plain node serves it
    if [[ $1 == plain ]]; then
        cairn_cli --transport plain volume info rep >/dev/null 2>&1 || fail "transport plain: the node does not answer a plain CLI"
    else
        cairn_cli --transport plain volume info rep >/dev/null 2>&1 && fail "transport tls: the node answered a plain CLI"
    fi
    log "transport $1: cairnd restarted, rep remounted"
}

# cpu_ticks: user + system clock ticks of cairnd and the mount so far.
cpu_ticks() {
    local pid t=0 mpid
    mpid=$(pgrep -f "mount-cairn .*:/rep $MNT" | head -1)
    for pid in "${CL_PID[n1]}" "$mpid"; do
        [[ -n $pid && -r /proc/$pid/stat ]] || fail "no process to measure (cairnd ${CL_PID[n1]}, mount '$mpid')"
        # fields after the ')' of comm: utime is the 12th, stime the 13th
        t=$((t + $(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')))
    done
    echo "$t"
}
HZ=$(getconf CLK_TCK)

# step WHAT TRANSPORT KIND PER CMD...: one workload, its JSON lines appended to $RAW, and
# one line of the CPU cairnd and the mount spent on it (op cpu_KIND, microseconds per PER).
step() {
    local what=$1 target=$2 kind=$3 per=$4 out rc t0 t1
    shift 4
    log "$what"
    t0=$(cpu_ticks)
    out=$("$@" 2>"$CL_DIR/log/step.err")
    rc=$?
    t1=$(cpu_ticks)
    printf '%s\n' "$out" | grep '^{' >>"$RAW"
    printf '{"op":"cpu_%s","target":"%s","value":%s,"unit":"CPU us/%s"}\n' "$kind" "$target" \
        "$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" -v n="$per" 'BEGIN { printf "%.1f", (b - a) * 1e6 / hz / n }')" \
        "$([[ $kind == seq ]] && echo MiB || echo file)" >>"$RAW"
    if ((rc != 0)); then
        cat "$CL_DIR/log/step.err" >&2
        fail "$what failed"
    fi
}

cl_start_etcd
cl_start_node n1
cl_create_volume rep 2 4
log "cluster up in $((SECONDS - started))s: $CL_DIR ($mode run)"

for ((round = 1; round <= BENCH_ROUNDS; round++)); do
    # alternate which goes first, so a trend in the machine's load favours neither
    order=(tls plain)
    ((round % 2 == 0)) && order=(plain tls)
    for t in "${order[@]}"; do
        transport "$t"
        step "round $round: sequential $BENCH_TLS_MIB MiB, transport $t" "$t" seq "$((2 * BENCH_TLS_MIB))" \
            "$BENCH" posix-seq --file "$MNT/seq-$t.dat" --target "$t" --mib "$BENCH_TLS_MIB"
        rm -f "$MNT/seq-$t.dat"
        mkdir -p "$MNT/small-$t-$round"
        step "round $round: small files, transport $t" "$t" small "$BENCH_TLS_FILES" \
            "$BENCH" posix-smallfiles --dir "$MNT/small-$t-$round" --target "$t" \
            --files "$BENCH_TLS_FILES" --threads "$BENCH_THREADS"
    done
done
cl_umount "$MNT"
took=$((SECONDS - started))

host=$(hostname -s 2>/dev/null || hostname)
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
table=$(python3 - "$RAW" "$mode" "$host" "$commit" "$took" \
    "size=${BENCH_TLS_MIB}MiB files=$BENCH_TLS_FILES threads=$BENCH_THREADS rounds=$BENCH_ROUNDS" <<'PY'
import json, statistics, sys
raw, mode, host, commit, took, settings = sys.argv[1:7]
vals = {}
for line in open(raw):
    if line.startswith("{"):
        r = json.loads(line)
        vals.setdefault((r["op"], r["target"]), []).append((r["value"], r["unit"]))
rows = [("seq_write", "sequential write + fsync"), ("seq_read", "sequential read (cold)"),
        ("create", "small files: create"), ("read", "small files: read"),
        ("stat", "small files: stat"), ("delete", "small files: delete"),
        ("cpu_seq", "CPU, sequential (write + read, per MiB moved)"),
        ("cpu_small", "CPU, small files (create + read + stat + delete, per file)")]
print(f"# TLS on vs off through FUSE ({mode} run, {host}, commit {commit}, {took} s)")
print()
print(f"2 x 2 replica-2 volume, one cairnd, bricks on the local disk; {settings}; medians.")
print("ratio = tls / plain; cost = 1 - ratio for rates (issue 20 aims for <= 10%), ratio - 1 for")
print("CPU (cairnd + mount-cairn user + system time per MiB or file; lower is better).")
print()
print("| workload | tls | plain | unit | ratio | cost |")
print("| --- | ---: | ---: | --- | ---: | ---: |")
worst = 0.0
for op, name in rows:
    t, p = vals.get((op, "tls")), vals.get((op, "plain"))
    if not t or not p:
        print(f"| {name} | {'-' if not t else ''} | {'-' if not p else ''} | | | |")
        continue
    mt, mp = statistics.median(v for v, _ in t), statistics.median(v for v, _ in p)
    ratio = mt / mp if mp else float("nan")
    cost = ratio - 1 if op.startswith("cpu_") else 1 - ratio
    if not op.startswith("cpu_"):
        worst = max(worst, cost)
    print(f"| {name} | {mt:.1f} | {mp:.1f} | {t[0][1]} | {ratio:.2f} | {cost * 100:+.0f}% |")
print()
print(f"Largest throughput cost: {worst * 100:.0f}% ({'within' if worst <= 0.10 else 'over'} the 10% aim).")
PY
) || fail "could not build the table from $RAW"
printf '%s\n' "$table"
if [[ $BENCH_SAVE == 1 ]]; then
    bench_save_table "$BENCH_RESULTS/$(date +%Y-%m-%d)-$host-tls" "$table" "$RAW"
fi
pass "TLS on/off benchmark done in ${took}s"

#!/usr/bin/env bash
# Cairn benchmark (`make bench`): starts its own single-host cluster (one etcd, one cairnd,
# bricks on the local disk under build/bench-tmp), and measures side by side in one run:
#
#   local     a plain directory on the same disk as the bricks
#   FUSE 2x2  mount-cairn on a 2 x 2 (replica 2) volume
#   FUSE 4x1  mount-cairn on a 4 x 1 distribute volume (replica-vs-distribute ratio)
#   lib 2x2   the Rust client API (cairn-client, what libcairn wraps) on the 2 x 2 volume
#   Gluster   GlusterFS (Debian's 10.3) FUSE mounts of a 2 x 2 and a 4 x 1 volume with its
#             defaults, bricks on the same disk (tests/bench/gluster.sh); the issue's targets
#             are judged against this run's Gluster numbers (BENCH_GLUSTER=0: against the
#             reference numbers of issue 2 instead)
#
# Workloads (docs/benchmarks.md says exactly how): sequential write+fsync and cold read of
# BENCH_SIZE_MIB in 1 MiB records; 4 KiB random read and write at queue depth 16 for
# BENCH_SECONDS each (fio, libaio, O_DIRECT); 4 KiB small files create/read/stat/delete
# (BENCH_FILES files, 4-level paths, 4 threads); BENCH_APPENDS 40-byte appends to one file;
# and the round-trip checks (create on 1 vs 4 replica sets, cold/warm open of a 4-deep
# path), which are assertions: the bench exits 1 if one fails.
#
# The table goes to stdout and to tests/bench/results/<date>-<host>.md (raw results next to
# it as .jsonl). Exit: 0 ok, 1 a workload or a round-trip check failed.
#
# Env: CAIRN_BIN_DIR   binaries (cairnd, cairn, mount-cairn, cairn-bench); default
#                      backend/target/release (make bench builds them)
#      BENCH_QUICK=1   ~1 minute smoke: 64 MiB, 3 s, 400 files, 20000 appends, results
#                      not saved under results/ unless BENCH_SAVE=1
#      BENCH_SECONDS, BENCH_SIZE_MIB, BENCH_FILES, BENCH_APPENDS, BENCH_THREADS: override
#      BENCH_TMP       parent of the cluster dir (default $CAIRN_TEST_TMP if set, as under
#                      tests/run-all.sh, else build/bench-tmp: the repo's disk)
#      BENCH_RESULTS   results dir (default tests/bench/results)
#      BENCH_SAVE=0|1  save the table (default 1, 0 with BENCH_QUICK)
#      BENCH_GLUSTER=0  skip the GlusterFS side-by-side columns
#      BENCH_GLUSTER_ADDR  loopback address glusterd and its bricks bind (default 127.0.0.2:
#                      gluster refuses 127.0.0.1 as a brick host)
#      BENCH_NFS=0    skip the NFS gateway bench (tests/bench/nfs.sh, run after the table)
#      BENCH_NETREP=0 skip the replica-2 vs distribute writes over a shaped client link
#                      (tests/bench/replication-net.sh, run after the NFS bench)
#      BENCH_TLS=0    skip TLS on vs off through FUSE (tests/bench/tls.sh, run last)
#      BENCH_ROUNDS    rounds of the sequential, random and small-file steps (default 3,
#                      quick 1):
#                      each round runs every target once, in turn, and the table shows
#                      each number's median, so a load spike on this shared machine moves
#                      one round of one target, not the ratio
#      BENCH_APPENDS_4X1=0|1  also run the appends on the 4x1 mount (default: quick runs
#                      only; through FUSE each append costs ~2 FUSE requests, so a million
#                      of them take minutes per mount)
set -uo pipefail

# shellcheck source=tests/bench/env.sh
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"

if [[ ${BENCH_QUICK:-0} == 1 ]]; then
    mode=quick
    : "${BENCH_SECONDS:=3}" "${BENCH_SIZE_MIB:=64}" "${BENCH_FILES:=400}" "${BENCH_APPENDS:=20000}"
    : "${BENCH_SAVE:=0}" "${BENCH_APPENDS_4X1:=1}" "${BENCH_ROUNDS:=1}"
else
    mode=full
    : "${BENCH_SECONDS:=30}" "${BENCH_SIZE_MIB:=1024}" "${BENCH_FILES:=5000}" "${BENCH_APPENDS:=1000000}"
    : "${BENCH_SAVE:=1}" "${BENCH_APPENDS_4X1:=0}" "${BENCH_ROUNDS:=3}"
fi
: "${BENCH_THREADS:=4}"
[[ $BENCH_ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: BENCH_ROUNDS must be a positive integer, not '$BENCH_ROUNDS'" >&2; exit 2; }
BENCH_RESULTS=${BENCH_RESULTS:-$bench_dir/results}

# shellcheck source=tests/integration/lib.sh
. "$repo/tests/integration/lib.sh"
CAIRN_LOG_TAG=bench

BENCH=$CAIRN_BIN_DIR/cairn-bench
[[ -x $BENCH ]] || fail "$BENCH missing: build it (make bench, or cargo build --release -p cairn-bench)"
FIO=$(command -v fio || true)
if [[ -z $FIO ]]; then
    log "fio not installed: the random-I/O rows through FUSE and local are skipped (apt-get install fio)"
fi

cl_init
RAW=$CL_DIR/results.jsonl
: >"$RAW"
LOCAL=$CL_DIR/local
mkdir -p "$LOCAL"
started=$SECONDS

# step WHAT CMD...: run one workload, append its JSON lines to $RAW, fail with context.
step() {
    local what=$1 out rc
    shift
    log "$what"
    out=$("$@" 2>"$CL_DIR/log/step.err")
    rc=$?
    printf '%s\n' "$out" | grep '^{' >>"$RAW"
    if ((rc != 0)); then
        cat "$CL_DIR/log/step.err" >&2
        return "$rc"
    fi
}

# fio_rand TARGET OP FILE: 4 KiB random OP (randread|randwrite) at queue depth 16 with
# libaio and O_DIRECT for BENCH_SECONDS on FILE (an existing file of BENCH_SIZE_MIB).
fio_rand() {
    local target=$1 op=$2 file=$3 direct=1 out
    [[ -n $FIO ]] || return 0
    log "fio $op on $target"
    local args=(--name="$op" --filename="$file" --rw="$op" --bs=4k --iodepth=16
        --ioengine=libaio --runtime="$BENCH_SECONDS" --time_based
        --size="${BENCH_SIZE_MIB}M" --output-format=json)
    [[ $op == randwrite ]] && args+=(--end_fsync=1)
    if ! out=$("$FIO" "${args[@]}" --direct=1 2>"$CL_DIR/log/fio.err"); then
        log "fio --direct=1 failed on $target ($(head -c 300 "$CL_DIR/log/fio.err")); retrying buffered"
        direct=0
        out=$("$FIO" "${args[@]}" --direct=0 2>"$CL_DIR/log/fio.err") || {
            cat "$CL_DIR/log/fio.err" >&2
            return 1
        }
    fi
    printf '%s' "$out" | python3 -c '
import json, sys
target, op, direct, qd = sys.argv[1], sys.argv[2], sys.argv[3] == "1", 16
text = sys.stdin.read()
j = json.loads(text[text.index("{"):])["jobs"][0]
side = j["read"] if op == "randread" else j["write"]
name = "rand_read" if op == "randread" else "rand_write"
print(json.dumps({"op": name, "target": target, "value": side["iops"], "unit": "IOPS",
    "qd": qd, "direct": direct, "engine": "libaio", "seconds": j["job_runtime"] / 1000}))
' "$target" "$op" "$direct" >>"$RAW"
}

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }

# --- the cluster ------------------------------------------------------------------------

cl_start_etcd
cl_start_node n1
cl_create_volume rep 2 4
cl_mount rep "$CL_DIR/mnt/rep"
cl_create_volume dist 1 4
cl_mount dist "$CL_DIR/mnt/dist"
cl_create_volume one 1 1
SERVER=$(cl_node_addr n1)
FUSE_REP=$CL_DIR/mnt/rep
FUSE_DIST=$CL_DIR/mnt/dist
log "cluster up in $((SECONDS - started))s: $CL_DIR ($mode run)"

# GlusterFS side by side, on the same disk (tests/bench/gluster.sh).
GL_TARGETS=()
if [[ ${BENCH_GLUSTER:-1} == 1 ]]; then
    # shellcheck source=tests/bench/gluster.sh
    . "$bench_dir/gluster.sh"
    trap 'rc=$?; gl_down; (exit $rc); cl_cleanup' EXIT
    if gl_up "$CL_DIR/gluster"; then
        GL_TARGETS=(gluster-2x2:"$GL_REP" gluster-4x1:"$GL_DIST")
    else
        log "GlusterFS could not be started: the table uses issue 2's reference numbers"
        gl_down
    fi
fi

failed=()
run() { step "$@" || failed+=("$1"); }

# --- round trips (deterministic: assertions) ---------------------------------------------

run "round-trip checks" "$BENCH" rtt --server "$SERVER" --one-set one --four-sets dist --also rep

# --- sequential, then random 4 KiB at QD 16 on the files it left; BENCH_ROUNDS rounds -----

for ((round = 1; round <= BENCH_ROUNDS; round++)); do
    if ((BENCH_ROUNDS > 1)); then log "round $round of $BENCH_ROUNDS (sequential and random)"; fi

    for t in local:"$LOCAL" fuse-2x2:"$FUSE_REP" fuse-4x1:"$FUSE_DIST" "${GL_TARGETS[@]}"; do
        run "sequential ${BENCH_SIZE_MIB} MiB on ${t%%:*}" \
            "$BENCH" posix-seq --file "${t#*:}/seq.dat" --target "${t%%:*}" --mib "$BENCH_SIZE_MIB"
    done
    run "sequential ${BENCH_SIZE_MIB} MiB through the client API" \
        "$BENCH" lib-seq --server "$SERVER" --volume rep --target lib-2x2 --mib "$BENCH_SIZE_MIB"

    # random 4 KiB, QD 16, on the files the sequential step left

    for t in local:"$LOCAL" fuse-2x2:"$FUSE_REP" "${GL_TARGETS[@]:0:1}"; do
        if [[ -f ${t#*:}/seq.dat ]]; then
            drop_caches
            fio_rand "${t%%:*}" randread "${t#*:}/seq.dat" || failed+=("fio randread ${t%%:*}")
            fio_rand "${t%%:*}" randwrite "${t#*:}/seq.dat" || failed+=("fio randwrite ${t%%:*}")
        fi
    done
    for t in fuse-4x1:"$FUSE_DIST" "${GL_TARGETS[@]:1:1}"; do
        if [[ -f ${t#*:}/seq.dat ]]; then
            fio_rand "${t%%:*}" randwrite "${t#*:}/seq.dat" || failed+=("fio randwrite ${t%%:*}")
        fi
    done
    run "random 4 KiB through the client API" \
        "$BENCH" lib-rand --server "$SERVER" --volume rep --target lib-2x2 --seconds "$BENCH_SECONDS"
    rm -f "$LOCAL/seq.dat" "$FUSE_REP/seq.dat" "$FUSE_DIST/seq.dat" ${GL_REP:+"$GL_REP/seq.dat" "$GL_DIST/seq.dat"}
done

# --- small files -------------------------------------------------------------------------

for ((round = 1; round <= BENCH_ROUNDS; round++)); do
    if ((BENCH_ROUNDS > 1)); then log "round $round of $BENCH_ROUNDS (small files)"; fi
    for t in local:"$LOCAL" fuse-2x2:"$FUSE_REP" fuse-4x1:"$FUSE_DIST" "${GL_TARGETS[@]}"; do
        run "small files on ${t%%:*}" "$BENCH" posix-smallfiles --dir "${t#*:}" --target "${t%%:*}" \
            --files "$BENCH_FILES" --threads "$BENCH_THREADS"
    done
    run "small files through the client API" "$BENCH" lib-smallfiles --server "$SERVER" --volume rep \
        --target lib-2x2 --files "$BENCH_FILES" --threads "$BENCH_THREADS"
done

# --- appends -----------------------------------------------------------------------------

append_targets=(local:"$LOCAL" fuse-2x2:"$FUSE_REP" "${GL_TARGETS[@]:0:1}")
[[ $BENCH_APPENDS_4X1 == 1 ]] && append_targets+=(fuse-4x1:"$FUSE_DIST")
for t in "${append_targets[@]}"; do
    run "$BENCH_APPENDS appends on ${t%%:*}" \
        "$BENCH" posix-append --file "${t#*:}/append.log" --target "${t%%:*}" --count "$BENCH_APPENDS"
done
run "$BENCH_APPENDS appends through the client API" \
    "$BENCH" lib-append --server "$SERVER" --volume rep --target lib-2x2 --count "$BENCH_APPENDS"

# --- the table ---------------------------------------------------------------------------

took=$((SECONDS - started))
host=$(hostname -s 2>/dev/null || hostname)
stamp=$(date +%Y-%m-%d)
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
report_args=(--raw "$RAW" --mode "$mode" --host "$host" --commit "$commit" --seconds "$took"
    --settings "size=${BENCH_SIZE_MIB}MiB random=${BENCH_SECONDS}s rounds=$BENCH_ROUNDS files=$BENCH_FILES threads=$BENCH_THREADS appends=$BENCH_APPENDS")
((${#failed[@]})) && report_args+=(--failed "${failed[*]}")
table=$(python3 "$bench_dir/report.py" "${report_args[@]}") || fail "report.py could not build the table from $RAW"
printf '%s\n' "$table"
if [[ $BENCH_SAVE == 1 ]]; then
    bench_save_table "$BENCH_RESULTS/$stamp-$host" "$table" "$RAW"
fi

# Gluster's bricks need port 24007, and replication-net.sh starts its own glusterd: stop ours.
if declare -F gl_down >/dev/null; then gl_down; fi

# --- the NFS gateway: its own cluster, Ganesha and table (tests/bench/nfs.sh) -------------

if [[ ${BENCH_NFS:-1} == 1 ]]; then
    bash "$bench_dir/nfs.sh"
    case $? in 0 | 77) ;; *) failed+=("nfs (tests/bench/nfs.sh)") ;; esac
fi

# --- replica-2 vs distribute writes, client behind a shaped link (replication-net.sh) ----

if [[ ${BENCH_NETREP:-1} == 1 ]]; then
    bash "$bench_dir/replication-net.sh"
    case $? in 0 | 77) ;; *) failed+=("netrep (tests/bench/replication-net.sh)") ;; esac
fi

# --- TLS on vs off through FUSE, same volume (tests/bench/tls.sh) --------------------------

if [[ ${BENCH_TLS:-1} == 1 ]]; then
    bash "$bench_dir/tls.sh" || failed+=("tls (tests/bench/tls.sh)")
fi

if ((${#failed[@]})); then
    fail "failed: ${failed[*]}"
fi
if grep -q '"pass": false' "$RAW"; then
    fail "a round-trip check failed (see the table)"
fi
pass "benchmark done in ${took}s"

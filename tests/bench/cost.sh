#!/usr/bin/env bash
# The work per operation of the client-API small-file workload (cairn-bench lib-smallfiles on
# a 2 x 2 volume served by one cairnd, as in run.sh's lib-2x2 rows), measured so that other
# users' load does not move it: per phase (create, read, stat, delete) the CPU time cairnd
# and the bench process spent (utime+stime from /proc/PID/stat) divided by the files, and,
# in separate traced runs, the system calls cairnd made per file (strace -c -f attached to
# cairnd for that phase only). Wall-clock files/s are shown too, for what they are worth on a
# loaded machine.
#
#   tests/bench/cost.sh [-o OUT.md] LABEL=BINDIR [LABEL=BINDIR ...]
#   tests/bench/cost.sh -o OUT.md --table LABEL ...   (the table again from OUT.jsonl, e.g.
#                                                     after concatenating two runs' files)
#
# BINDIR holds release binaries (cairnd, cairn, cairn-bench). The sides' runs are
# interleaved (a, b, a, b, ...). The bench is stopped (SIGSTOP) at each phase boundary (its
# result line) while the counters are read and strace is attached or detached, so a phase's
# figures are that phase's (a few operations of the next one may slip in before the stop).
#
# The create phase's figures include the bench's mount and its mkdir of the directories.
#
# Env: COST_FILES (2000), COST_THREADS (4), COST_RUNS (3) untraced runs per side,
#      COST_STRACE_RUNS (1) traced runs per side (0: none), COST_STRACE_PHASES (stat delete),
#      COST_STRACE_ARGS (-c) strace's options: "-c -w" sums the wall time threads spent in
#      each call (where they wait), "-k -e trace=NAME" logs NAME's calls with stacks
#      (with CAIRN_TEST_KEEP=1 the log stays in the run's dir as strace-PHASE.txt),
#      COST_PERF=1 perf record of cairnd in the traced phases instead of strace,
#      COST_CONTEXT=1 first the volumes, FUSE mounts and FUSE small-file runs run.sh has
#      before its lib-2x2 small files (the side-by-side table's context),
#      CAIRN_TRANSPORT (plain, as side-by-side.sh), CL_ETCD_TLS (0).
# Needs root (strace attaching to cairnd). Exit 1 if a run failed.
set -uo pipefail

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
: "${COST_FILES:=2000}" "${COST_THREADS:=4}" "${COST_RUNS:=3}" "${COST_STRACE_RUNS:=1}"
: "${COST_STRACE_PHASES:=stat delete}"
export CAIRN_TRANSPORT=${CAIRN_TRANSPORT:-plain} CL_ETCD_TLS=${CL_ETCD_TLS:-0}

# --- one run (the script calls itself): cost.sh --one BINDIR RAW.jsonl SIDE RUN TRACE ----
if [[ ${1:-} == --one ]]; then
    export CAIRN_BIN_DIR=$2
    raw=$3 side=$4 run=$5 trace=$6
    # shellcheck source=tests/bench/env.sh
    . "$bench_dir/env.sh"
    # shellcheck source=tests/integration/lib.sh
    . "$repo/tests/integration/lib.sh"
    CAIRN_LOG_TAG=cost
    command -v strace >/dev/null || fail "strace not installed (apt-get install strace)"
    cl_start_etcd
    cl_start_node n1
    cl_create_volume rep 2 4
    cairnd=${CL_PID[n1]}
    if [[ ${COST_CONTEXT:-0} == 1 ]]; then
        # As run.sh before its lib-2x2 small files: two more volumes, both mounted, and the
        # same small-file workload through FUSE on each first.
        cl_create_volume dist 1 4
        cl_create_volume one 1 1
        cl_mount rep "$CL_DIR/mnt/rep"
        cl_mount dist "$CL_DIR/mnt/dist"
        for t in fuse-2x2:rep fuse-4x1:dist; do
            "$CAIRN_BIN_DIR/cairn-bench" posix-smallfiles --dir "$CL_DIR/mnt/${t#*:}" --target "${t%%:*}" \
                --files "$COST_FILES" --threads "$COST_THREADS" >/dev/null ||
                fail "cairn-bench posix-smallfiles on ${t%%:*} failed"
        done
    fi
    # cpu PID: utime+stime in clock ticks of the whole process (all threads, live or gone).
    cpu() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
    ucpu() { awk '{ sub(/^.*\) /, ""); print $12 }' "/proc/$1/stat"; }
    tck=$(getconf CLK_TCK)
    strace_pid="" strace_out=""
    # strace_on PHASE: attach to every thread of cairnd; returns once they are all traced.
    strace_on() {
        strace_out=$CL_DIR/strace-$1.txt
        if [[ ${COST_PERF:-0} == 1 ]]; then
            # A profile instead (perf report -i $CL_DIR/perf-PHASE.data; CAIRN_TEST_KEEP=1).
            perf record -F 2000 -p "$cairnd" -o "$CL_DIR/perf-$1.data" 2>"$CL_DIR/log/strace-$1.err" &
            strace_pid=$!
            sleep 1
            return 0
        fi
        # shellcheck disable=SC2086 # word-split on purpose
        strace ${COST_STRACE_ARGS:--c} -f -p "$cairnd" -o "$strace_out" 2>"$CL_DIR/log/strace-$1.err" &
        strace_pid=$!
        local t ok
        for _ in $(seq 100); do
            ok=1
            for t in /proc/"$cairnd"/task/*/status; do
                awk '$1 == "TracerPid:" { exit $2 == 0 }' "$t" 2>/dev/null || ok=0
            done
            ((ok)) && return 0
            sleep 0.1
        done
        fail "strace did not attach to cairnd ($(cat "$CL_DIR/log/strace-$1.err"))"
    }
    strace_off() {
        [[ -n $strace_pid ]] || return 0
        kill -INT "$strace_pid"
        wait "$strace_pid"
        strace_pid=
    }
    exec {out}< <(exec "$CAIRN_BIN_DIR/cairn-bench" lib-smallfiles --server "$(cl_node_addr n1)" \
        --volume rep --target lib-2x2 --files "$COST_FILES" --threads "$COST_THREADS" \
        2>"$CL_DIR/log/bench.err")
    bench=$!
    phases=(create read stat delete)
    c0=$(cpu "$cairnd") u0=$(ucpu "$cairnd") b0=$(cpu "$bench")
    n=0
    if [[ $trace == 1 && " $COST_STRACE_PHASES " == *" create "* ]]; then strace_on create; fi
    while IFS= read -r -u "$out" line; do
        [[ $line == '{'* ]] || continue
        kill -STOP "$bench" 2>/dev/null
        # (the bench may have exited after its last line: its CPU is then unknown)
        c1=$(cpu "$cairnd") u1=$(ucpu "$cairnd") b1=$(cpu "$bench" 2>/dev/null || echo -1)
        phase=${phases[n]}
        sys=null
        if [[ -n $strace_pid ]]; then
            strace_off
            [[ ${COST_PERF:-0} == 1 ]] || sys=$(python3 - "$strace_out" <<'EOF'
import json, sys
calls = {}
for l in open(sys.argv[1]):
    f = l.split()
    # "% time seconds usecs/call calls [errors] syscall"
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
        calls[f[-1]] = int(f[3])
print(json.dumps(calls))
EOF
            )
        fi
        python3 -c '
import json, sys
line, side, run, phase, cd, bd, tck, sys_, trace, ud = sys.argv[1:11]
j = json.loads(line)
files = j.get("files") or 1
out = {"side": side, "run": int(run), "traced": trace == "1", "phase": phase, "files_s": j["value"],
       "rt_per_op": j.get("rt_per_op"),
       "cairnd_us": int(cd) / int(tck) * 1e6 / files,
       "cairnd_user_us": int(ud) / int(tck) * 1e6 / files,
       "bench_us": int(bd) / int(tck) * 1e6 / files if int(bd) >= 0 else None}
s = json.loads(sys_)
if s is not None:
    out["syscalls"] = {k: v / files for k, v in s.items()}
print(json.dumps(out))' "$line" "$side" "$run" "$phase" $((c1 - c0)) "$( ((b1 < 0)) && echo -1 || echo $((b1 - b0)))" "$tck" "$sys" "$trace" $((u1 - u0)) >>"$raw"
        n=$((n + 1))
        if [[ $trace == 1 && $n -lt ${#phases[@]} && " $COST_STRACE_PHASES " == *" ${phases[n]} "* ]]; then
            strace_on "${phases[n]}"
        fi
        c0=$(cpu "$cairnd") u0=$(ucpu "$cairnd") b0=$(cpu "$bench" 2>/dev/null || echo 0)
        kill -CONT "$bench" 2>/dev/null
    done
    strace_off
    wait "$bench" || { cat "$CL_DIR/log/bench.err" >&2; fail "cairn-bench lib-smallfiles failed"; }
    ((n == ${#phases[@]})) || fail "cairn-bench printed $n of ${#phases[@]} phases"
    pass "$side run $run (trace=$trace)"
    finish
    exit 0
fi

# --- the driver -------------------------------------------------------------------------
out=$bench_dir/results/$(date +%Y-%m-%d)-cost.md
if [[ ${1:-} == -o ]]; then out=$2; shift 2; fi
raw=${out%.md}.jsonl
table_only=0
if [[ ${1:-} == --table ]]; then table_only=1; shift; fi
(($# >= 1)) || { echo "usage: $0 [-o OUT.md] LABEL=BINDIR [LABEL=BINDIR ...]" >&2; exit 2; }
labels=() dirs=()
for a in "$@"; do
    if ((table_only)); then labels+=("$a"); continue; fi
    [[ $a == *=* && -x ${a#*=}/cairn-bench && -x ${a#*=}/cairnd ]] ||
        { echo "cost.sh: '$a' is not LABEL=DIR with cairnd and cairn-bench in DIR" >&2; exit 2; }
    labels+=("${a%%=*}") dirs+=("$(cd "${a#*=}" && pwd -P)")
done
failed=0
((table_only)) || : >"$raw"
for ((r = 1; !table_only && r <= COST_RUNS + COST_STRACE_RUNS; r++)); do
    trace=0
    ((r > COST_RUNS)) && trace=1
    for i in "${!labels[@]}"; do
        echo "=== ${labels[i]} run $r (strace: $trace), load $(cut -d' ' -f1-3 /proc/loadavg)"
        bash "$0" --one "${dirs[i]}" "$raw" "${labels[i]}" "$r" "$trace" || failed=1
    done
done
python3 - "$raw" "$COST_FILES" "$COST_THREADS" "${labels[@]}" >"$out" <<'EOF'
import json, statistics, sys
raw, files, threads, labels = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = [json.loads(l) for l in open(raw)]
med = lambda xs: statistics.median(xs) if xs else float("nan")
print(f"# Work per small-file operation (tests/bench/cost.sh)\n")
print(f"- lib-smallfiles, {files} files, {threads} threads, 2 x 2 volume on one cairnd, plain transport")
print("- sides: " + ", ".join(labels))
print("- cells: median over the untraced runs [each run]; CPU in µs per file (utime+stime, "
      "10 ms ticks), syscalls per file from one strace -c -f of cairnd per phase\n")
print("| phase | metric | " + " | ".join(labels) + " |")
print("|---|---|" + "---:|" * len(labels))
for phase in ["create", "read", "stat", "delete"]:
    for key, name in [("cairnd_us", "cairnd CPU µs/file"),
                      ("cairnd_user_us", "… of it in user space"), ("bench_us", "bench CPU µs/file"),
                      ("files_s", "files/s (wall)"), ("rt_per_op", "round trips/file")]:
        cells = []
        for lab in labels:
            xs = [r[key] for r in rows if r["side"] == lab and r["phase"] == phase
                  and not r["traced"] and r.get(key) is not None]
            cells.append(f"{med(xs):.0f} [" + ", ".join(f"{x:.0f}" for x in xs) + "]"
                         if key != "rt_per_op" else f"{med(xs):.2f}")
        print(f"| {phase} | {name} | " + " | ".join(cells) + " |")
traced = [r for r in rows if "syscalls" in r]
for phase in ["create", "read", "stat", "delete"]:
    per = {lab: [r["syscalls"] for r in traced if r["side"] == lab and r["phase"] == phase]
           for lab in labels}
    per = {lab: v for lab, v in per.items() if v}
    if not per:
        continue
    labels_all, labels = labels, list(per)
    names = sorted({n for v in per.values() for s in v for n in s})
    avg = {lab: {n: med([s.get(n, 0) for s in v]) for n in names} for lab, v in per.items()}
    print(f"\nSystem calls of cairnd per file, {phase} phase (strace -c -f):\n")
    print("| syscall | " + " | ".join(labels) + " |")
    print("|---|" + "---:|" * len(labels))
    tot = {lab: sum(avg[lab].values()) for lab in labels}
    for n in sorted(names, key=lambda n: -max(avg[l][n] for l in labels)):
        if max(avg[l][n] for l in labels) >= 0.05:
            print(f"| {n} | " + " | ".join(f"{avg[l][n]:.2f}" for l in labels) + " |")
    print("| **total** | " + " | ".join(f"{tot[l]:.2f}" for l in labels) + " |")
    labels = labels_all
EOF
cat "$out"
echo "cost.sh: saved $out (raw: $raw)"
exit "$failed"

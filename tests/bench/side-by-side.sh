#!/usr/bin/env bash
# Side by side: the FUSE / client-API part of `make bench` (tests/bench/run.sh without the
# GlusterFS, NFS, shaped-link and TLS parts) for two builds of Cairn on this machine,
# interleaved run by run (old, new, old, new, ...) so that the load of other users falls on
# both, then one table of medians and new/old ratios (tests/bench/side-by-side.py).
#
#   tests/bench/side-by-side.sh OLD NEW [OUT.md]
#
# OLD and NEW are each a directory holding release binaries (cairnd, cairn, mount-cairn,
# cairn-bench), or a commit: then it is checked out in a detached worktree and built in
# release with one CARGO_TARGET_DIR shared by both builds (SBS_TARGET, default
# /tmp/cairn-sbs-target), so third-party crates compile once; the binaries are copied to
# SBS_WORK/bin-COMMIT and the worktree removed. Both sides run this checkout's run.sh and
# cluster helpers, with the same settings:
#
#   CAIRN_TRANSPORT=plain and CL_ETCD_TLS=0 (default; SBS_PLAIN=0 keeps TLS on): a commit from
#   before TLS (issue 20) has none, and this compares the code, not the transport
#   BENCH_SIZE_MIB (512), BENCH_SECONDS (10), BENCH_FILES (2000), BENCH_APPENDS (100000),
#   BENCH_THREADS (4), BENCH_ROUNDS (1) per run; SBS_PAIRS (2) runs of each side
#
# OUT.md (default tests/bench/results/<date>-side-by-side.md) gets the table, the raw lines
# of each run go next to it as OUT-old-N.jsonl / OUT-new-N.jsonl. Root (FUSE mounts, drop
# caches), as make bench. Exit 1 if a run failed.
set -uo pipefail

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$bench_dir/../.." && pwd -P)
# shellcheck source=scripts/common.sh
. "$repo/scripts/common.sh"

(($# == 2 || $# == 3)) || { echo "usage: $0 OLD NEW [OUT.md] (each a binary directory or a commit)" >&2; exit 2; }
: "${SBS_PAIRS:=2}" "${SBS_PLAIN:=1}" "${SBS_TARGET:=/tmp/cairn-sbs-target}"
: "${SBS_WORK:=$repo/build/side-by-side}"
[[ $SBS_PAIRS =~ ^[1-9][0-9]*$ ]] || { echo "side-by-side.sh: SBS_PAIRS must be a positive integer, not '$SBS_PAIRS'" >&2; exit 2; }
out=${3:-$bench_dir/results/$(date +%Y-%m-%d)-side-by-side.md}
mkdir -p "$SBS_WORK" "$(dirname "$out")"

BINS=(cairnd cairn mount-cairn cairn-bench)

# bins_of WHAT: print the binary directory for WHAT (a directory, or a commit built here).
bins_of() {
    local what=$1 commit wt dest b
    if [[ -d $what ]]; then
        for b in "${BINS[@]}"; do
            [[ -x $what/$b ]] || { echo "side-by-side.sh: $what/$b missing" >&2; return 1; }
        done
        (cd "$what" && pwd -P)
        return
    fi
    commit=$(git -C "$repo" rev-parse --short=12 "$what^{commit}") ||
        { echo "side-by-side.sh: '$what' is neither a directory nor a commit" >&2; return 1; }
    dest=$SBS_WORK/bin-$commit
    if [[ -x $dest/cairn-bench ]]; then echo "$dest"; return; fi
    wt=$SBS_WORK/wt-$commit
    git -C "$repo" worktree add --detach "$wt" "$commit" >&2 || return 1
    echo "side-by-side.sh: building $commit in release (CARGO_TARGET_DIR=$SBS_TARGET)" >&2
    if ! (cd "$wt/backend" && CARGO_TARGET_DIR=$SBS_TARGET nice -n 10 cargo build --release \
        -p cairnd -p cairn-cli -p cairn-mount -p cairn-bench >&2); then
        echo "side-by-side.sh: release build of $commit failed (worktree kept: $wt)" >&2
        return 1
    fi
    mkdir -p "$dest"
    for b in "${BINS[@]}"; do cp -a "$SBS_TARGET/release/$b" "$dest/"; done
    git -C "$repo" worktree remove --force "$wt" >&2
    echo "$dest"
}

old_bin=$(bins_of "$1") || exit 1
new_bin=$(bins_of "$2") || exit 1
describe() { if [[ -d $1 ]]; then echo "binaries in $1"; else echo "commit $(git -C "$repo" rev-parse --short "$1")"; fi; }

export BENCH_GLUSTER=0 BENCH_NFS=0 BENCH_NETREP=0 BENCH_TLS=0 BENCH_SAVE=1
export BENCH_SIZE_MIB=${BENCH_SIZE_MIB:-512} BENCH_SECONDS=${BENCH_SECONDS:-10}
export BENCH_FILES=${BENCH_FILES:-2000} BENCH_APPENDS=${BENCH_APPENDS:-100000}
export BENCH_THREADS=${BENCH_THREADS:-4} BENCH_ROUNDS=${BENCH_ROUNDS:-1}
if [[ $SBS_PLAIN == 1 ]]; then export CAIRN_TRANSPORT=plain CL_ETCD_TLS=0; fi

runs=()
failed=0
for ((i = 1; i <= SBS_PAIRS; i++)); do
    for side in old new; do
        bin=$old_bin
        [[ $side == new ]] && bin=$new_bin
        res=$SBS_WORK/results-$side-$i
        rm -rf "$res"
        load_before=$(cut -d' ' -f1-3 /proc/loadavg)
        t0=$SECONDS
        echo "=== run $i, $side ($bin), load $load_before"
        if ! CAIRN_BIN_DIR=$bin BENCH_RESULTS=$res bash "$bench_dir/run.sh"; then
            echo "side-by-side.sh: run $i of $side failed" >&2
            failed=1
        fi
        load_after=$(cut -d' ' -f1-3 /proc/loadavg)
        raw=$(find "$res" -name '*.jsonl' 2>/dev/null | head -n 1)
        if [[ -n $raw ]]; then
            cp "$raw" "${out%.md}-$side-$i.jsonl"
            runs+=("$side:$i:$((SECONDS - t0)):$load_before:$load_after:${out%.md}-$side-$i.jsonl")
        fi
    done
done

settings="size=${BENCH_SIZE_MIB}MiB random=${BENCH_SECONDS}s files=$BENCH_FILES threads=$BENCH_THREADS appends=$BENCH_APPENDS rounds=$BENCH_ROUNDS, $SBS_PAIRS runs per side"
[[ $SBS_PLAIN == 1 ]] && settings+=", CAIRN_TRANSPORT=plain, etcd without TLS"
python3 "$bench_dir/side-by-side.py" --old "$(describe "$1")" --new "$(describe "$2")" \
    --settings "$settings" "${runs[@]}" >"$out" || { echo "side-by-side.sh: the table could not be built" >&2; exit 1; }
cat "$out"
echo "side-by-side.sh: saved $out"
exit "$failed"

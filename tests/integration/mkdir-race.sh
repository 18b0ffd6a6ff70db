#!/usr/bin/env bash
# `mkdir -p` of one new deep path on three FUSE mounts at once, as the HA agents of three
# gateways make the same recovery directories on their own mounts (docs/ha.md). A mkdir
# makes the directory on its hashed set first, then on the other set of this 2 x 2
# volume; a mount that found it on the hashed set (the kernel's lookup, or EEXIST from
# its own mkdir) went on into it before the other set had it and got ESTALE ("Stale file
# handle") for the next component: ha/bad-input failed in its setup so. The client now
# waits for the directory to reach that set and completes it after an EEXIST
# (docs/architecture.md). Failed on the old client: 39 of 90 runs of `mkdir -p`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"

cluster_up 1 mkrace 2 4
mnts=("$CL_MNT")
for m in b c; do
    cl_mount mkrace "$CL_DIR/mnt-$m"
    mnts+=("$CL_MNT")
done

rounds=30 failed=0 t0=$SECONDS
for ((r = 0; r < rounds; r++)); do
    pids=()
    for m in "${mnts[@]}"; do
        mkdir -p "$m/r$r/.cairn-ha/nfs/vip/10.78.0.33" "$m/r$r/.cairn-ha/nfs/gw${#pids[@]}" \
            2>>"$CL_DIR/mkdir.err" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        wait "$p" || failed=$((failed + 1))
    done
done
((failed == 0)) ||
    fail "$failed of $((rounds * 3)) concurrent mkdir -p failed: $(sort "$CL_DIR/mkdir.err" | uniq -c | sort -rn | head -5)"
pass "$((rounds * 3)) mkdir -p of one new path on three mounts at once ($rounds rounds) all succeeded in $((SECONDS - t0))s"

# Every mount sees the whole tree, and a file made in a leaf through one mount is seen
# through the others.
for ((r = 0; r < rounds; r++)); do
    leaf=r$r/.cairn-ha/nfs/vip/10.78.0.33
    echo "$r" >"${mnts[r % 3]}/$leaf/holder"
    for m in "${mnts[@]}"; do
        [[ $(cat "$m/$leaf/holder" 2>&1) == "$r" ]] || fail "$m/$leaf/holder: $(cat "$m/$leaf/holder" 2>&1)"
    done
done
pass "each mount sees every directory and the files made in them"
finish

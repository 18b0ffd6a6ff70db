#!/usr/bin/env bash
# LOOKUP and GETATTR wait for their reply on the FUSE session thread that read them, but
# never all of the threads: with 2 session threads and the only node stopped (SIGSTOP), a
# crowd of lookups that cannot be answered must leave a thread reading /dev/fuse, so a
# request answered from memory (the mount's stats xattr) still gets its answer. Fails if
# the hanging lookups take every session thread (getfattr then hangs until the node is
# continued, and the guard below fails it).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"

export CAIRN_MOUNT_FUSE_THREADS=2
# The stats xattr is read on the mount's root: once the root's attributes expire, the
# kernel asks GETATTR of it (permission check of the path walk) before the GETXATTR, and
# that GETATTR waits for the stopped node like the lookups do (on the runtime, not on a
# session thread, yet getfattr waits for it). Under load the default 1 s expired between
# the last answered request and the reads below: keep the root's attributes for the run.
export CL_MOUNT_OPTS=attr_timeout=60
cluster_up 1 ft 2 4
m=$CL_MNT
# (timeout: a guard against a hang, not a timing check; the answer comes from memory)
stats() { timeout 20 getfattr --only-values -n trusted.cairn.mount-stats "$m" 2>/dev/null || true; }
lookups() { stats | awk '$1 == "fuse.lookup" { print $2; f = 1 } END { if (!f) print 0 }'; }

mkdir "$m/d"
echo hello >"$m/d/f"
l0=$(lookups)
pid=${CL_PID[n1]}
kill -STOP "$pid"
waiters=()
for i in 0 1 2 3; do
    stat "$m/d/missing-$i" >/dev/null 2>&1 &
    waiters+=($!)
done
# All four LOOKUPs reached the mount (counted as they are read from /dev/fuse): each is
# now waiting for the stopped node, one on a session thread, the others on the runtime.
n=0
while :; do
    s=$(stats)
    [[ -n $s ]] || { kill -CONT "$pid"; fail "the stats xattr waited behind lookups to a stopped node"; }
    (($(awk '$1 == "fuse.lookup" { print $2 }' <<<"$s") - l0 >= 4)) && break
    ((++n < 200)) || { kill -CONT "$pid"; fail "the 4 lookups never reached the mount"; }
    sleep 0.05
done
timeout 20 getfattr -n trusted.cairn.mount-stats "$m" >/dev/null 2>&1 ||
    { kill -CONT "$pid"; fail "a request answered from memory waited behind lookups to a stopped node"; }
pass "stats xattr answered while lookups to a stopped node wait"
kill -CONT "$pid"
for w in "${waiters[@]}"; do
    if wait "$w"; then fail "stat of a missing file succeeded"; fi
done
pass "the waiting lookups were answered (ENOENT) once the node continued"
[[ $(cat "$m/d/f") == hello ]] || fail "d/f reads wrong after the node continued"
pass "the mount works after"
finish

#!/usr/bin/env bash
# Backend round trips per small-file NFSv3 operation through Ganesha and FSAL_CAIRN stay
# within their budgets (tests/bench/nfs-rt.sh: 8 files of 4 KiB in 4-level paths on a
# 2 x 2 volume, libcairn's CAIRN_TRACE_RT; docs/nfs.md, Round trips). Counts, not times;
# but a cached entry or attribute that expires (1 s; the machine under load) costs a round
# trip, so the totals have room (each file has a leaf directory of its own, whose first
# getattr costs 2 round trips once expired), and the unlink's budget is the firm check.
# - create: CREATE, and the new file's first WRITE made durable with it (cairn_write_sync,
#   answered FILE_SYNC), so the COMMIT has nothing to do; the parent's attributes from
#   libcairn's cache. Before 2026-11-28 (speed5) 3.0: the WRITE flushed by Ganesha's
#   post-op getattr, then the COMMIT's fsync (1.0 per file, the firm check here);
# - stat: mdcache answers; read: one READ;
# - delete: the unlink is one round trip. Before 2026-11-28 it looked the name up first
#   for its attributes, which the read had dropped (its atime moved): 2.0 per file.
# ~40 s.
set -uo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
# shellcheck source=tests/support/roundtrips.sh
. "$CL_REPO/tests/support/roundtrips.sh"
trap rt_cleanup EXIT

rt_run nfs-rt.sh 8
rt_budget create cairn_fsync 0.3 "no COMMIT round trip: the first WRITE was made durable"
rt_budget create total 4.0 "CREATE and a durable WRITE, one round trip each"
rt_budget stat total 0.5 "stat from mdcache"
rt_budget read total 1.5 "one READ"
rt_budget delete cairn_unlink 1.5 "the unlink without a lookup of its own"
rt_budget delete total 3.0 "delete"
finish

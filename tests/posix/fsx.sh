#!/usr/bin/env bash
# fsx-style randomized checker over the FUSE mount: writes, truncates, punch holes,
# copy_file_range within the file, reads,
# renames, reopens and fsyncs compared against a local reference file. Seeds are printed
# so a failure can be replayed with tools/fsx.py --seed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/../integration/lib.sh"

cluster_up 1 fsx 2 4
seeds=${FSX_SEEDS:-"$RANDOM $RANDOM"}
for seed in $seeds; do
    mkdir -p "$CL_MNT/fsx-$seed"
    python3 "$here/tools/fsx.py" --ops "${FSX_OPS:-4000}" --seed "$seed" "$CL_MNT/fsx-$seed" ||
        fail "fsx failed with seed $seed (replay: tests/posix/tools/fsx.py --seed $seed DIR)"
    pass "fsx seed $seed: ${FSX_OPS:-4000} ops match the reference"
done
finish

#!/usr/bin/env bash
# The C ABI end to end: build backend/libcairn/tests/c/abi_test.c against libcairn.so and
# run every call against a live 2 x 2 volume.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cluster_up 1 abi 2 4
lib_dir=$CAIRN_BIN_DIR
[[ -f $lib_dir/libcairn.so ]] || fail "libcairn.so not built in $lib_dir"
make -s -C "$CL_REPO/backend/libcairn/tests/c" BUILD="$CL_DIR/abi" \
    TARGET_DIR="$(dirname "$lib_dir")" PROFILE="$(basename "$lib_dir")" ||
    fail "building abi_test"
out=$(LD_LIBRARY_PATH="$CL_DIR/abi:$lib_dir" "$CL_DIR/abi/abi_test" "$(cl_node_addr n1)" abi 2>&1) || {
    echo "$out" | tail -20 >&2
    fail "abi_test against the live volume"
}
echo "$out" | tail -1
pass "abi_test: $(echo "$out" | tail -1)"
finish

#!/usr/bin/env bash
# No import cycle between the modules of the crates listed below (issue 21): the top-level
# modules of each crate's src/ must form a DAG (tests/support/import_cycles.py; a module
# naming `crate::other` anywhere outside comments depends on it). First the checker is
# tried on two stand-in crates (one with a cycle through a `use crate::{..}` group and an
# inline path, one without). Every crate of backend/ is checked (a glob: a new crate is
# covered without editing this file). Under a second; no cluster.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CYCLE_FREE=()
for d in "$CL_REPO"/backend/*/src; do
    CYCLE_FREE+=("${d#"$CL_REPO"/}")
done
[ "${#CYCLE_FREE[@]}" -ge 13 ] || fail "only ${#CYCLE_FREE[@]} crates found under backend/: ${CYCLE_FREE[*]}"
CHECK=$CL_REPO/tests/support/import_cycles.py

T=$(mktemp -d "${CAIRN_TEST_TMP:-${TMPDIR:-/tmp}}/import-cycles.XXXXXX")
trap 'rm -rf "$T"' EXIT

# The checker itself: a cycle a -> b/inner.rs -> a, and the same crate without it.
mkdir -p "$T/cyc/src/b" "$T/dag/src/b"
printf 'mod a;\nmod b;\n' >"$T/cyc/src/lib.rs"
printf 'use crate::{b::inner::X, c};\n// crate::c in a comment is no edge\n' >"$T/cyc/src/a.rs"
printf 'pub fn f() -> crate::a::Y { todo!() }\n' >"$T/cyc/src/b/inner.rs"
printf 'mod inner;\n' >"$T/cyc/src/b/mod.rs"
printf '' >"$T/cyc/src/c.rs"
cp -r "$T/cyc/src/." "$T/dag/src/"
printf 'pub fn f() {} // not crate::a::Y\n' >"$T/dag/src/b/inner.rs"
rc=0
out=$(python3 "$CHECK" "$T/cyc/src") || rc=$?
assert_eq 1 "$rc" "a crate whose modules a and b import each other fails"
grep -q 'import cycle between a, b' <<<"$out" || fail "the cycle is not named: $out"
grep -q 'b -> a .*inner.rs:1' <<<"$out" || fail "the edge b -> a is not shown with its line: $out"
rc=0
out=$(python3 "$CHECK" "$T/dag/src") || rc=$?
assert_eq 0 "$rc" "the same crate without the back edge passes ($out)"

for src in "${CYCLE_FREE[@]}"; do
    rc=0
    out=$(python3 "$CHECK" "$CL_REPO/$src") || rc=$?
    printf '%s\n' "$out"
    assert_eq 0 "$rc" "no import cycle in $src"
done
finish

#!/usr/bin/env bash
# Fuzz the handler's config-string parser (iscsi/cairn_cfg.c, cairn_cfg_parse) under
# AddressSanitizer and UBSan: tests/iscsi/cfg_fuzz.c generates valid config strings and
# checks their fields, and mutates valid ones, checking that each is refused with a reason
# or accepted with fields that keep cairn_cfg.h's rules and round-trip. No cluster needed.
#
# Env: CAIRN_CFG_FUZZ_SECONDS (default 3; e.g. 600 for a long run), CAIRN_CFG_FUZZ_SEED
# (default: from the clock; the seed is printed, and a failure prints how to rerun it).
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"

repo=$CL_REPO
build=${ISCSI_BUILD:-$repo/build/iscsi}
command -v cc >/dev/null || skip "no C compiler"
# the sanitizer runtimes (libasan, libubsan) come with gcc; skip where they are missing
probe=$(mktemp -d)
echo 'int main(void) { return 0; }' >"$probe/p.c"
if ! { cc -fsanitize=address,undefined -o "$probe/p" "$probe/p.c" 2>/dev/null && "$probe/p"; }; then
    rm -rf "$probe"
    skip "cc cannot build with -fsanitize=address,undefined here"
fi
rm -rf "$probe"

make -s -C "$repo/iscsi" BUILD="$build" cfg-fuzz || fail "building cfg_fuzz"
"$build/cfg_fuzz" "${CAIRN_CFG_FUZZ_SECONDS:-3}" ${CAIRN_CFG_FUZZ_SEED:+"$CAIRN_CFG_FUZZ_SEED"} ||
    fail "cairn_cfg_parse fuzzing (see the FAIL line or sanitizer report above)"
pass "cairn_cfg_parse fuzzed for ${CAIRN_CFG_FUZZ_SECONDS:-3} s under ASan+UBSan"
finish

# shellcheck shell=bash
# When a skipped test (exit 77) may pass: sourced by tests/run-all.sh and tests/faults/run.sh.
#
# A test that cannot run here exits 77 after one of two kinds of line:
#   SKIP - <reason>        a missing package, tool or privilege: `make deps` or root would
#                          fix it. Counted as skipped on a developer's machine; in strict
#                          mode (CI) it fails the run, so that no suite turns green silently.
#   SKIP-KERNEL: <what> (covered by make vm-test SCENARIO=<name>)
#                          this kernel truly lacks <what>, and the named VM scenario (an
#                          existing tests/vm/scenarios/<name>.sh) runs the same checks in a
#                          guest that has it. Allowed in strict mode too.
# Strict mode: CAIRN_STRICT=1, or CI set (to anything but "", 0 or false) unless
# CAIRN_STRICT=0.

# skips_strict: 0 (true) in strict mode.
skips_strict() {
    [[ ${CAIRN_STRICT:-} == 1 ]] && return 0
    [[ -z ${CAIRN_STRICT:-} && -n ${CI:-} && ${CI,,} != false && $CI != 0 ]]
}

# skips_kernel_line LOG REPO: print LOG's SKIP-KERNEL line if it names a VM scenario of
# REPO (not a *-guest helper); return 1 if there is none or it names none.
skips_kernel_line() {
    local line scen
    line=$(grep -m1 '^SKIP-KERNEL: ' "$1") || return 1
    scen=$(sed -nE 's/.*\(covered by make vm-test SCENARIO=([A-Za-z0-9_-]+)\)[[:space:]]*$/\1/p' <<<"$line")
    [[ -n $scen && $scen != *-guest && -f $2/tests/vm/scenarios/$scen.sh ]] || return 1
    echo "$line"
}

#!/usr/bin/env bash
# Run the pjdfstest POSIX conformance suite (the Rust rewrite, crates.io `pjdfstest`) inside
# a directory — normally a Cairn FUSE mount — and compare its failures with the reviewed
# list of known failures.
#
# usage: run-pjdfstest.sh MOUNTPOINT [TEST_PATTERN...]
#
# Environment:
#   PJDFSTEST_KNOWN      known-failures list (default: pjdfstest-known-failures.txt here);
#                        one test name per line, each followed by "# reason"
#   PJDFSTEST_RESULTS    where per-test results go (default: ./pjdfstest-results.txt);
#                        the raw log goes next to it (.log)
#   PJDFSTEST_FEATURES   opt-in features the file system has (default below)
#   PJDFSTEST_SECONDARY  a directory on another file system (enables the EXDEV tests)
#   PJDFSTEST_NAPTIME    seconds between timestamp-changing steps (default 0.01)
#
# Exit status: 0 when every failure is a known one, 1 on any unexpected failure (or when
# the suite could not run), 2 on bad usage. Known failures that now pass are reported so
# that the list can be trimmed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
PJDFSTEST_VERSION=0.2.2

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
mnt=$1
shift
known=${PJDFSTEST_KNOWN:-$here/../pjdfstest-known-failures.txt}
results=${PJDFSTEST_RESULTS:-$PWD/pjdfstest-results.txt}
features=${PJDFSTEST_FEATURES:-posix_fallocate utime_now utimensat rename_ctime}
naptime=${PJDFSTEST_NAPTIME:-0.01}

die() { echo "run-pjdfstest: $*" >&2; exit 1; }

[[ -d $mnt ]] || die "$mnt: not a directory"
[[ -f $known ]] || die "$known: known-failures list missing"
[[ $(id -u) -eq 0 ]] || die "must run as root (pjdfstest switches users and chowns)"

if ! command -v pjdfstest >/dev/null 2>&1; then
    [[ -x $HOME/.cargo/bin/pjdfstest ]] && export PATH=$HOME/.cargo/bin:$PATH
fi
if ! command -v pjdfstest >/dev/null 2>&1; then
    echo "run-pjdfstest: installing pjdfstest $PJDFSTEST_VERSION (cargo install)" >&2
    cargo install --quiet --locked pjdfstest --version "$PJDFSTEST_VERSION" >&2 ||
        die "cargo install pjdfstest failed"
    export PATH=$HOME/.cargo/bin:$PATH
fi

# pjdfstest switches to two unprivileged users: use ones every Debian system has, so the
# run does not have to add accounts.
user_entry() { # NAME -> ["NAME", "GROUP"]
    local g
    g=$(id -gn "$1" 2>/dev/null) || die "user $1 missing"
    printf '["%s", "%s"]' "$1" "$g"
}

work=$(mktemp -d "$mnt/pjdfstest.XXXXXX") || die "cannot create a work directory in $mnt"
chmod 0755 "$work" # the unprivileged users must reach the test directories
conf=$(mktemp /tmp/pjdfstest-conf.XXXXXX.toml)
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() { rm -rf "$work" "$conf"; }
trap cleanup EXIT

{
    echo "[features]"
    for f in $features; do echo "$f = {}"; done
    echo
    echo "[settings]"
    echo "naptime = $naptime"
    echo "allow_remount = false"
    echo
    echo "[dummy_auth]"
    echo "entries = [ $(user_entry nobody), $(user_entry daemon) ]"
} >"$conf"

log=${results%.txt}.log
sec_args=()
[[ -n ${PJDFSTEST_SECONDARY:-} ]] && sec_args=(-s "$PJDFSTEST_SECONDARY")

echo "run-pjdfstest: running in $work (features: $features); log: $log" >&2
set +e
NO_COLOR=1 CLICOLOR=0 pjdfstest -c "$conf" -p "$work" "${sec_args[@]}" "$@" >"$log" 2>&1
suite_rc=$?
set -e

# Result lines are "NAME <padding> STATUS"; strip any colour codes.
sed 's/\x1b\[[0-9;]*m//g' "$log" |
    awk '
        / (ok|FAILED|skipped|PASSED UNEXPECTEDLY|failed as expected)$/ && $1 ~ /::/ {
            st = $NF
            if ($0 ~ /PASSED UNEXPECTEDLY$/) st = "ok"
            else if ($0 ~ /failed as expected$/) st = "FAILED"
            print $1, st
        }' >"$results"

[[ -s $results ]] || die "pjdfstest produced no results (exit $suite_rc); see $log"

known_names=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$known" | grep -v '^$' | sort -u || true)
failed=$(awk '$2 == "FAILED" {print $1}' "$results" | sort -u)
passed=$(awk '$2 == "ok" {print $1}' "$results" | sort -u)

unexpected=$(comm -23 <(echo "$failed" | grep -v '^$' || true) <(echo "$known_names"))
now_pass=$(comm -12 <(echo "$passed" | grep -v '^$' || true) <(echo "$known_names"))

n() { grep -c . <<<"$1" || true; }
total=$(wc -l <"$results")
echo "run-pjdfstest: $total tests: $(n "$passed") ok, $(n "$failed") failed," \
    "$(awk '$2 == "skipped"' "$results" | wc -l) skipped; results in $results"
if [[ -n $now_pass ]]; then
    echo "run-pjdfstest: known failures that now PASS (remove them from $(basename "$known")):"
    while IFS= read -r t; do echo "  $t"; done <<<"$now_pass"
fi
if [[ -n $unexpected ]]; then
    echo "run-pjdfstest: UNEXPECTED failures:"
    while read -r t; do
        echo "  $t"
        # The failure message follows the test's line in the log.
        sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -A2 -F "$t " | sed -n '2,3p' | sed 's/^/      /'
    done <<<"$unexpected"
    echo "$(n "$passed") passed, $(n "$unexpected") failed"
    exit 1
fi
echo "$(n "$passed") passed, 0 failed"
exit 0

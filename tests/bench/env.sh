# tests/bench/env.sh, sourced first by the bench scripts (run.sh, nfs.sh,
# replication-net.sh): where the repo and the binaries are, quiet daemons, and the
# directory the clusters live in. Sets bench_dir and repo; exports CAIRN_BIN_DIR (default
# backend/target/release), RUST_LOG (warn), CAIRN_TEST_TMP (BENCH_TMP, else an outer
# CAIRN_TEST_TMP as under tests/run-all.sh, else build/bench-tmp: the repo's disk) and
# the TLS CA and credential (CAIRN_CA_DIR, CAIRN_CREDENTIALS).
# shellcheck shell=bash
bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$bench_dir/../.." && pwd -P)
export CAIRN_BIN_DIR=${CAIRN_BIN_DIR:-$repo/backend/target/release}
export RUST_LOG=${RUST_LOG:-warn}
export CAIRN_TEST_TMP=${BENCH_TMP:-${CAIRN_TEST_TMP:-$repo/build/bench-tmp}}
mkdir -p "$CAIRN_TEST_TMP"
# TLS (docs/security.md): the first cairnd creates the clusters' CA here with the admin
# credential every client uses, as under tests/run-all.sh.
export CAIRN_CA_DIR=${CAIRN_CA_DIR:-$CAIRN_TEST_TMP/ca}
export CAIRN_CREDENTIALS=${CAIRN_CREDENTIALS:-$CAIRN_CA_DIR/admin.pem}

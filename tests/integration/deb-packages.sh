#!/usr/bin/env bash
# `make deps` installs what every target uses: each package that scripts/, the suites, the
# VM scenarios (tests/vm) and the benchmarks (tests/bench) tell a user to `apt-get install`
# when a tool is missing must be in the Makefile's DEB_PACKAGES (BENCH_DEB_PACKAGES for
# tests/bench), or a dependency of one, and installed here. On a machine where something
# was installed by hand, a scenario passes only there (issue 25: qemu-io's iscsi protocol
# comes from qemu-block-extra, which was in no list). Also checks that qemu-io here has
# the iscsi protocol the iscsi scenario uses. A few seconds; no cluster.
set -euo pipefail
# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

lists=$(make -s --no-print-directory -C "$CL_REPO" print-deb-packages) || fail "make print-deb-packages"
deb=$(sed -n 's/^DEB_PACKAGES=//p' <<<"$lists")
bench=$(sed -n 's/^BENCH_DEB_PACKAGES=//p' <<<"$lists")
[[ -n $deb ]] || fail "no DEB_PACKAGES from the Makefile"
# What installing DEB_PACKAGES brings (make deps: --no-install-recommends), and what every
# Debian system has.
# shellcheck disable=SC2086 # package lists
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances $deb 2>/dev/null | grep -v '^ ' | sort -u)
required=$(dpkg-query -W -f='${Package} ${Essential} ${Priority}\n' |
    awk '$2 == "yes" || $3 == "required" { print $1 }')
has() { grep -qxF -- "$1" <<<"$2"; }

checked=0
while IFS=: read -r file pkgs; do
    for p in $pkgs; do
        [[ $p == -* ]] && continue
        checked=$((checked + 1))
        if [[ $file == tests/bench/* ]] && has "$p" "$(tr ' ' '\n' <<<"$bench")"; then
            continue # installed by make bench itself
        fi
        has "$p" "$(tr ' ' '\n' <<<"$deb")" || has "$p" "$closure" || has "$p" "$required" ||
            fail "$file tells to apt-get install $p, which is not in the Makefile's DEB_PACKAGES (nor a dependency of one)"
        [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] ||
            fail "$p (named by $file, in DEB_PACKAGES) is not installed: run make deps"
    done
done < <(cd "$CL_REPO" && grep -rhoE --include='*.sh' --include='*.py' --exclude=deb-packages.sh \
    'apt-get install [a-z0-9][a-z0-9.+ -]*[a-z0-9]' scripts tests .ci 2>/dev/null |
    sed -E 's/^apt-get install //' | sort -u | while read -r l; do
        # the file is needed for the bench rule: find one that names this hint
        f=$(cd "$CL_REPO" && grep -rlF --include='*.sh' --include='*.py' --exclude=deb-packages.sh "apt-get install $l" scripts tests .ci | head -n 1)
        echo "$f:$l"
    done)
((checked > 5)) || fail "found only $checked apt-get install hints: the scan is broken"
pass "$checked packages named by apt-get install hints are in DEB_PACKAGES (or its dependencies) and installed"

qemu-img --help | grep -qw iscsi ||
    fail "qemu-img/qemu-io have no iscsi protocol (qemu-block-extra): make vm-test SCENARIO=iscsi would fail"
pass "qemu-io has the iscsi:// protocol (make vm-test SCENARIO=iscsi)"
finish

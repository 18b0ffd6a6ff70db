#!/usr/bin/env bash
# Run one VM test scenario: tests/vm/run.sh NAME (what `make vm-test SCENARIO=NAME` runs).
# A scenario is tests/vm/scenarios/NAME.sh defining scenario_main (and optionally
# scenario_cleanup); it uses the functions of tests/vm/lib.sh. Progress lines go to
# stdout; on failure the logs are kept under build/vm-logs/. See docs/vm-harness.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
if (($# != 1)) || [[ ! -f $here/scenarios/$1.sh ]]; then
    echo "usage: tests/vm/run.sh SCENARIO   (make vm-test SCENARIO=NAME)" >&2
    names=()
    for f in "$here"/scenarios/*.sh; do
        [[ $f == *-guest.sh ]] || names+=("$(basename "$f" .sh)")
    done
    echo "scenarios: ${names[*]}" >&2
    exit 2
fi
VM_SCENARIO=$1
# shellcheck source=tests/vm/lib.sh
. "$here/lib.sh"
vm_init
# shellcheck source=/dev/null
. "$here/scenarios/$VM_SCENARIO.sh"
vm_step "scenario $VM_SCENARIO: start"
scenario_main
vm_step "scenario $VM_SCENARIO: passed"

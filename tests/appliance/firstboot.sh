#!/usr/bin/env bash
# Suite appliance/firstboot: the unit tests of the appliance's first-boot program
# (tests/appliance/test_firstboot*.py: the cairn: user-data parser and validator, the
# machine checks, the rendered files, cairn-appliance ensure) with Python's unittest.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
cd "$here"
tests=(test_firstboot*.py)
[[ -f ${tests[0]} ]] || {
    echo "FAIL - no tests/appliance/test_firstboot*.py"
    exit 1
}
python3 -m unittest -v "${tests[@]%.py}" 2>&1

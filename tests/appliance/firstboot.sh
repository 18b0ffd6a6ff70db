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
# Debian's python3, as on the appliance (PyYAML from python3-yaml in DEB_PACKAGES), not
# whatever python3 comes first on PATH (a pyenv one need not have yaml).
/usr/bin/python3 -m unittest -v "${tests[@]%.py}" 2>&1

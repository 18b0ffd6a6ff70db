#!/usr/bin/env bash
# ansible-lint (production profile, ansible/.ansible-lint) and ansible-playbook
# --syntax-check of every playbook in ansible/. ansible-lint comes from PyPI, pinned, in a
# venv under build/ that this script makes once; ansible-playbook is Debian's (ansible).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
venv=${ANSIBLE_LINT_VENV:-$repo/build/ansible-lint-venv}
lint_version=6.22.2   # the last line that supports ansible-core 2.14 (Debian 12's)

command -v ansible-playbook >/dev/null || {
    echo "ansible-lint.sh: ansible-playbook is missing (apt-get install ansible-core; in DEB_PACKAGES)" >&2
    exit 1
}
if [[ ! -x $venv/bin/ansible-lint ]] ||
    [[ $("$venv/bin/pip" show ansible-lint 2>/dev/null | sed -n 's/^Version: //p') != "$lint_version" ]]; then
    echo "ansible-lint.sh: installing ansible-lint $lint_version into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "ansible-lint==$lint_version" 'ansible-core>=2.14,<2.15'
fi

cd "$repo/ansible"
fail=0
for pb in *.yml; do
    case $pb in inventory*) continue ;; esac
    if ansible-playbook --syntax-check -i inventory.example.yml "$pb" >/dev/null 2>"$repo/build/ansible-syntax.err"; then
        echo "syntax ok: ansible/$pb"
    else
        cat "$repo/build/ansible-syntax.err" >&2
        echo "syntax FAILED: ansible/$pb" >&2
        fail=1
    fi
done
rm -f "$repo/build/ansible-syntax.err"
# NO_COLOR: plain output in logs; PATH: the venv's ansible-lint finds its own ansible-core
if NO_COLOR=1 PATH=$venv/bin:$PATH ansible-lint --offline --nocolor; then
    echo "ansible-lint ok"
else
    echo "ansible-lint FAILED" >&2
    fail=1
fi
exit $fail

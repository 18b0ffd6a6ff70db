# shellcheck shell=bash
# shellcheck disable=SC2034 # variables for the suites that source this
# Shared by the appliance suites (tests/appliance/build.sh, vm.sh): the image's name and
# appliance_image, which runs `make image` with the profile of CAIRN_BIN_DIR (the
# debug build of make test: IMAGE_PROFILE=debug). make image reuses build/image when its
# inputs did not change, so the second suite of a run does not build again.
# Env: CAIRN_BIN_DIR (its last path component is the profile), APPLIANCE_IMAGE_PREBUILT.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
VM_SCENARIO=appliance
# shellcheck source=tests/vm/lib.sh
. "$repo/tests/vm/lib.sh"

bin_dir=${CAIRN_BIN_DIR:-$repo/backend/target/debug}
profile=$(basename "$bin_dir")
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/backend/Cargo.toml" | head -n1)
out=$repo/build/image
name=cairn-appliance-$version

ok() { echo "ok - $*"; }

# appliance_image: make image (log in $VM_DIR/make-image.log), fail the suite if it fails.
# APPLIANCE_IMAGE_PREBUILT=1 (for working on the tests by hand) takes build/image as it is.
appliance_image() {
    local target_dir
    target_dir=$(dirname "$bin_dir")
    vm_init
    if [[ ${APPLIANCE_IMAGE_PREBUILT:-} == 1 ]]; then
        vm_step "APPLIANCE_IMAGE_PREBUILT=1: using $out as it is"
        return 0
    fi
    vm_step "make image IMAGE_PROFILE=$profile (reused when its inputs did not change)"
    make --no-print-directory -C "$repo" image IMAGE_PROFILE="$profile" \
        ${target_dir:+CARGO_TARGET_DIR="$target_dir"} >"$VM_DIR/make-image.log" 2>&1 || {
        tail -n 40 "$VM_DIR/make-image.log" >&2
        vm_fail "make image (log $VM_DIR/make-image.log)"
    }
    grep -E '^(\[image|    )' "$VM_DIR/make-image.log" | sed 's/^/    /'
}

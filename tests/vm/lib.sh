# shellcheck shell=bash
# shellcheck disable=SC2034 # VM_* variables are for the scenarios that source this
# VM test harness: boot throwaway Debian 12 guests under qemu (TCG) and run commands in
# them. Sourced by tests/vm/run.sh, which then sources tests/vm/scenarios/NAME.sh.
# See docs/vm-harness.md.
#
#   vm_image                       build or reuse the cached base image (sets VM_IMAGE)
#   vm_boot NAME [opts]            boot guest NAME on a throwaway overlay of the base image
#       --fwd GUESTPORT            forward 127.0.0.1:<free port> to the guest's GUESTPORT
#                                  (the host port is then $(vm_port NAME GUESTPORT))
#       --share DIR                export DIR read-only to the guest at /mnt/cairn (9p)
#       --link listen|connect PORT  a second NIC on a private link between two guests
#                                  (qemu socket netdev on 127.0.0.1:PORT; guest side eth1)
#       --link-mac MAC             the MAC address of the link NIC (default qemu's, the
#                                  same in every guest: set it when the guest's network
#                                  config matches the NIC by MAC, as cloud-init's does)
#       --mem MIB, --smp N         defaults 2048 and 2
#       --disk QCOW2               boot from this disk image's own boot loader (firmware,
#                                  GRUB) on a throwaway overlay, instead of the base image
#                                  by direct kernel boot (the appliance tests)
#       --uefi                     UEFI firmware (OVMF, a private copy of its variables)
#                                  instead of SeaBIOS; with --disk
#       --seed ISO                 attach ISO read-only (a NoCloud cidata seed)
#       --key FILE                 ssh private key for this guest (default the base image's)
#       --user NAME                log in as NAME (default root); vm_ssh then runs CMD
#                                  with sudo (cloud images: the default user, e.g. debian)
#   vm_wait NAME                   wait until ssh into NAME works (VM_BOOT_TIMEOUT, 300 s)
#   vm_ssh NAME CMD...             run CMD (a shell command line) as root in NAME
#   vm_copy_in NAME SRC DST        scp a host file into the guest
#   vm_port NAME GUESTPORT         the host port forwarded to GUESTPORT
#   vm_stop NAME                   power the guest off (SIGTERM, then SIGKILL, to qemu)
#   vm_step MSG                    progress line with the elapsed time
#
# Guests use user-mode networking: their only way out is qemu's gateway 10.0.2.2, which
# is the host's loopback, so host services keep listening on 127.0.0.1. Each guest's
# console goes to $VM_DIR/NAME/console.log. An EXIT trap always stops every guest; the
# run directory (logs, overlays) is kept when the scenario failed.
#
# Env: VM_BOOT_TIMEOUT (300), VM_KEEP=1 (keep the run dir), VM_RUN_ROOT (build/vm-run),
#      VM_LOG_DIR (build/vm-logs: logs of failed runs are copied there).

VM_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
# shellcheck source=scripts/common.sh
. "$VM_REPO/scripts/common.sh"

VM_IMAGE=
VM_DIR=
VM_NAMES=()
VM_START=$SECONDS
declare -A VM_PIDFILE=()
declare -A VM_FWD=() # "NAME:GUESTPORT" -> host port
declare -A VM_KEY=()  # NAME -> ssh private key (--key)
declare -A VM_USER=() # NAME -> login user (--user)

vm_step() { printf '[vm +%3ds] %s\n' "$((SECONDS - VM_START))" "$*"; }

vm_fail() {
    echo "FAIL - $*" >&2
    exit 1
}

vm_init() {
    [[ -z $VM_DIR ]] || return 0
    local root=${VM_RUN_ROOT:-$VM_REPO/build/vm-run}
    command -v qemu-system-x86_64 >/dev/null || vm_fail "qemu-system-x86_64 missing (apt-get install qemu-system-x86)"
    mkdir -p "$root"
    VM_DIR=$(mktemp -d "$root/${VM_SCENARIO:-vm}.XXXXXX")
    trap vm_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

vm_cleanup() {
    local rc=$? name keep
    trap - EXIT
    for name in "${VM_NAMES[@]}"; do
        vm_stop "$name" || rc=1
    done
    # the scenario's own cleanup (host cluster etc.), if it registered one
    if declare -F scenario_cleanup >/dev/null; then
        scenario_cleanup || rc=1
    fi
    if ((rc == 0)) && [[ ${VM_KEEP:-} != 1 ]]; then
        rm -rf "$VM_DIR"
    else
        keep=${VM_LOG_DIR:-$VM_REPO/build/vm-logs}/$(basename "$VM_DIR")
        mkdir -p "$keep"
        # logs only: overlays are large and worthless after the run
        (cd "$VM_DIR" && find . -name '*.log' -o -name '*.out' -o -name '*.txt' |
            while read -r f; do cp --parents "$f" "$keep" 2>/dev/null || true; done)
        echo "vm: run dir kept: $VM_DIR (logs copied to $keep)" >&2
    fi
    exit "$rc"
}

vm_image() {
    vm_init
    vm_step "base image (cached by package-list hash; a first build takes minutes)"
    VM_IMAGE=$("$VM_REPO/tests/vm/build-image.sh") || vm_fail "building the base image"
    vm_step "base image: $VM_IMAGE"
}

vm_port() { echo "${VM_FWD[$1:$2]:?no forward of guest port $2 for $1}"; }

vm_boot() {
    local name=$1 mem=2048 smp=2 share='' fwds=() links=() hostfwd='' p gp dir nics=()
    local disk='' uefi='' seed='' boot=() shareopt=() linkmac=''
    shift
    while (($#)); do
        case $1 in
        --disk) disk=$2 && shift 2 ;;
        --uefi) uefi=1 && shift ;;
        --seed) seed=$2 && shift 2 ;;
        --key) VM_KEY[$name]=$2 && shift 2 ;;
        --user) VM_USER[$name]=$2 && shift 2 ;;
        --fwd) fwds+=("$2") && shift 2 ;;
        --share) share=$2 && shift 2 ;;
        --link) links+=("$2:$3") && shift 3 ;;
        --link-mac) linkmac=$2 && shift 2 ;;
        --mem) mem=$2 && shift 2 ;;
        --smp) smp=$2 && shift 2 ;;
        *) vm_fail "vm_boot: unknown option $1" ;;
        esac
    done
    [[ -n $disk || -n $VM_IMAGE ]] || vm_image
    vm_init
    dir=$VM_DIR/$name
    mkdir -p "$dir"
    qemu-img create -q -f qcow2 -F qcow2 -b "${disk:-$VM_IMAGE/base.qcow2}" "$dir/overlay.qcow2" ||
        vm_fail "overlay for $name"
    if [[ -z $disk ]]; then
        boot=(-kernel "$VM_IMAGE/vmlinuz" -initrd "$VM_IMAGE/initrd.img"
            -append "root=/dev/vda rw console=ttyS0 net.ifnames=0 systemd.show_status=false")
    fi
    if [[ -n $uefi ]]; then
        [[ -f /usr/share/OVMF/OVMF_CODE_4M.fd ]] || vm_fail "OVMF missing (apt-get install ovmf)"
        cp /usr/share/OVMF/OVMF_VARS_4M.fd "$dir/OVMF_VARS.fd"
        boot+=(-drive "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd"
            -drive "if=pflash,format=raw,unit=1,file=$dir/OVMF_VARS.fd")
    fi
    # after the boot disk: the firmware boots from the first disk
    [[ -z $seed ]] || shareopt+=(-drive "file=$seed,if=virtio,format=raw,readonly=on")
    VM_FWD[$name:22]=$(free_port)
    hostfwd="hostfwd=tcp:127.0.0.1:${VM_FWD[$name:22]}-:22"
    for gp in "${fwds[@]}"; do
        p=$(free_port)
        VM_FWD[$name:$gp]=$p
        hostfwd+=",hostfwd=tcp:127.0.0.1:$p-:$gp"
    done
    nics=(-netdev "user,id=n0,restrict=off,$hostfwd" -device "virtio-net-pci,netdev=n0")
    local i=1 l
    for l in "${links[@]}"; do
        case ${l%%:*} in
        listen | connect) ;;
        *) vm_fail "vm_boot --link: listen or connect, not ${l%%:*}" ;;
        esac
        nics+=(-netdev "socket,id=l$i,${l%%:*}=127.0.0.1:${l#*:}" -device "virtio-net-pci,netdev=l$i${linkmac:+,mac=$linkmac}")
        i=$((i + 1))
    done
    [[ -z $share ]] || shareopt+=(-virtfs "local,path=$share,mount_tag=cairn,security_model=none,readonly=on")
    VM_PIDFILE[$name]=$dir/qemu.pid
    VM_NAMES+=("$name")
    vm_step "booting $name (TCG, ${smp} vCPU, ${mem} MiB${disk:+, from its disk}${uefi:+, UEFI}; ssh on 127.0.0.1:${VM_FWD[$name:22]})"
    qemu-system-x86_64 -name "cairn-vm-$name" -machine pc -accel tcg -cpu max \
        -smp "$smp" -m "$mem" "${boot[@]}" \
        -drive "file=$dir/overlay.qcow2,if=virtio,format=qcow2,cache=unsafe" \
        "${nics[@]}" "${shareopt[@]}" \
        -display none -monitor none -serial "file:$dir/console.log" \
        -pidfile "$dir/qemu.pid" -daemonize >"$dir/qemu.out" 2>&1 ||
        vm_fail "qemu for $name did not start: $(cat "$dir/qemu.out")"
}

# ConnectTimeout covers the TCP connect and the SSH banner exchange: qemu's user-mode
# forward accepts at once, but under TCG on a loaded host sshd in the guest can take well
# over 5 s to send its banner, and a command that fails that way fails the scenario.
vm_ssh_opts() {
    local name=$1
    echo "-i ${VM_KEY[$name]:-$VM_IMAGE/id_ed25519} -p ${VM_FWD[$name:22]} -o StrictHostKeyChecking=no
          -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes
          -o ConnectTimeout=30 -o ServerAliveInterval=10 -o ServerAliveCountMax=6"
}

vm_ssh() {
    local name=$1 user=${VM_USER[$1]:-root}
    shift
    if [[ $user != root ]]; then
        # shellcheck disable=SC2046,SC2029 # the options split; CMD runs in the guest
        ssh $(vm_ssh_opts "$name") "$user@127.0.0.1" "sudo -n sh -c $(printf '%q' "$*")"
        return
    fi
    # shellcheck disable=SC2046,SC2029 # the options split; CMD runs in the guest
    ssh $(vm_ssh_opts "$name") root@127.0.0.1 "$@"
}

vm_copy_in() {
    local name=$1 src=$2 dst=$3
    # shellcheck disable=SC2046
    scp -q $(vm_ssh_opts "$name" | sed 's/-p /-P /') "$src" "root@127.0.0.1:$dst"
}

vm_wait() {
    local name=$1 timeout=${VM_BOOT_TIMEOUT:-300} t0=$SECONDS
    while ! vm_ssh "$name" true 2>/dev/null; do
        pidfile_alive "${VM_PIDFILE[$name]}" qemu ||
            vm_fail "guest $name died while booting (console: $VM_DIR/$name/console.log)"
        ((SECONDS - t0 < timeout)) ||
            vm_fail "guest $name: no ssh after ${timeout}s (console: $VM_DIR/$name/console.log)"
        sleep 2
    done
    vm_step "$name is up (ssh after $((SECONDS - t0)) s)"
}

vm_stop() {
    local name=$1 f=${VM_PIDFILE[$1]:-}
    [[ -n $f && -f $f ]] || return 0
    stop_pidfile "$f" "cairn-vm-$name" 10
}

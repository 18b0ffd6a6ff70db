# shellcheck shell=bash
# shellcheck disable=SC2034 # SMB_* variables are for the suites that source this
# Shared setup of the SMB suites: a Cairn cluster (tests/integration/lib.sh) plus an smbd
# on a free 127.0.0.1 port with its own config under $CL_DIR/smb (never
# /etc/samba/smb.conf), serving
#   [vol0]   the Cairn volume through vfs_cairn (no FUSE in the path)
#   [stock]  a plain directory, for side-by-side comparisons
# and a local test user. Source it, then call smb_up.
#
#   smb_up [NODES] [EXTRA_SHARE_FN]   cluster + smbd; EXTRA_SHARE_FN DIR may append shares
#   smbc SHARE CMDS...                run smbclient commands on //127.0.0.1/SHARE as the user
#
# Env: SMB_CAIRN_EXTRA  one more smb.conf line for [vol0] (e.g. cairn:trace round trips = yes)
# Variables: SMB_DIR, SMB_PORT, SMB_USER, SMB_PASS, SMB_CONF, SMB_LOG, SMB_STOCK_DIR.

# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
# smbd loads this tree's vfs_cairn under a name of its own (vfs/cairn_<hash>.so, a link to
# this tree's build; the module registers the name it is loaded as), so a test never runs
# another tree's module linked as vfs/cairn.so on the same machine.
SMB_VFS_NAME=${SMB_VFS_NAME:-cairn_$(printf %s "$CL_REPO" | md5sum | cut -c1-8)}
# ... and the shares `cairn smb share add` writes name it too.
export CAIRN_SMB_VFS_NAME=$SMB_VFS_NAME
# shellcheck source=scripts/smb.sh
. "$CL_REPO/scripts/smb.sh"

SMB_USER=${SMB_USER:-cairnsmb}
SMB_PASS=${SMB_PASS:-cairn-Test-1}
SMB_DIR=
SMB_PORT=
SMB_CONF=
SMB_LOG=
SMB_STOCK_DIR=

smb_need_tools() {
    local t
    for t in smbd smbclient smbpasswd; do
        command -v "$t" >/dev/null || skip "$t not installed (apt-get install samba smbclient)"
    done
    # (re)build the module: the first time this prepares the Samba tree (a few minutes)
    make -s -C "$CL_REPO/vfs-module" >&2 || fail "building vfs_cairn (make -C vfs-module)"
    [[ -n $(smb_module_path) ]] || fail "vfs_cairn not installed in Samba's module dir"
}

smb_cleanup() {
    local rc=$?
    [[ -z $SMB_DIR ]] || smb_stop "$SMB_DIR"
    (exit "$rc")
    cl_cleanup
}

smb_up() {
    local nodes=${1:-1} extra=${2:-}
    smb_need_tools
    cl_start_etcd
    local i
    for ((i = 1; i <= nodes; i++)); do cl_start_node "n$i"; done
    for ((i = 2; i <= nodes; i++)); do cl_peer_probe "n$i"; done
    cl_create_volume vol0 2 4
    # A FUSE mount only to prepare the volume (its root belongs to root) and to check
    # from the side what SMB clients did; smbd itself goes through libcairn.
    cl_mount vol0
    chmod 0777 "$CL_MNT" || fail "chmod of the volume root through $CL_MNT"
    trap smb_cleanup EXIT
    SMB_DIR=$CL_DIR/smb
    SMB_PORT=$(free_port)
    SMB_CONF=$SMB_DIR/smb.conf
    SMB_LOG=$CL_DIR/log/smbd.log
    SMB_STOCK_DIR=$CL_DIR/stock
    smb_ensure_user "$SMB_USER" || fail "cannot create local user $SMB_USER"
    smb_write_conf "$SMB_DIR" "$SMB_PORT"
    smb_add_cairn_share "$SMB_DIR" vol0 vol0 "$(cl_node_addr n1)" / \
        "valid users = $SMB_USER root" ${SMB_CAIRN_EXTRA:+"$SMB_CAIRN_EXTRA"} ||
        fail "cannot add share vol0"
    chmod 0711 "$CL_DIR" # the stock share lives below it
    mkdir -p "$SMB_STOCK_DIR"
    chmod 0777 "$SMB_STOCK_DIR"
    smb_add_stock_share "$SMB_DIR" stock "$SMB_STOCK_DIR" "valid users = $SMB_USER root"
    [[ -z $extra ]] || "$extra" "$SMB_DIR"
    smb_set_password "$SMB_DIR" "$SMB_USER" "$SMB_PASS" || fail "smbpasswd for $SMB_USER"
    smb_start "$SMB_DIR" "$SMB_LOG" || fail "smbd did not start (log $SMB_LOG)"
}

smbc() {
    local share=$1
    shift
    smbclient "//127.0.0.1/$share" -p "$SMB_PORT" -s "$SMB_CONF" -m SMB3 -t 600 \
        -U "$SMB_USER%$SMB_PASS" -c "$*"
}

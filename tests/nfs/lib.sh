# shellcheck shell=bash
# NFS suites: a cluster from tests/integration/lib.sh plus Ganesha instances with
# FSAL_CAIRN on free 127.0.0.1 ports, driven by userspace clients (libnfs-utils for
# NFSv3, the nfs-rs Python client for v3/v4.0/v4.1 — see tests/nfs/nfsclient.py).
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   nfs_suite_up vol0            # cluster (1 node, 2x2) + Ganesha instance "g1"
#   nfs_client g1 4.1 write /f hello
#
# Ganesha instances: nfs_gw_start NAME [EXPORTS_FILE] sets NFS_PORT[NAME], NFS_DIR[NAME].
# They are stopped by the EXIT trap before the cluster.

# shellcheck source=tests/integration/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
# shellcheck source=scripts/nfs-ganesha.sh
. "$CL_REPO/scripts/nfs-ganesha.sh"

NFS_VENV=${NFS_VENV:-$CL_REPO/build/nfs-venv}
NFS_PLUGINS=${NFS_PLUGINS:-$CL_REPO/build/fsal/plugins}
declare -A NFS_PORT=() NFS_MNT_PORT=() NFS_DIR=()
NFS_GWS=()

nfs_prereqs() {
    command -v ganesha.nfsd >/dev/null || skip "nfs-ganesha is not installed (apt-get install nfs-ganesha nfs-ganesha-vfs)"
    command -v nfs-cat >/dev/null || skip "libnfs-utils is not installed"
    [[ $(id -u) == 0 ]] || skip "ganesha.nfsd needs root here (rpcbind registration, ports)"
    make -s -C "$CL_REPO/fsal" plugins LIBCAIRN_DIR="$CAIRN_BIN_DIR" >/dev/null ||
        fail "building fsal/ failed"
    if [[ ! -x $NFS_VENV/bin/python ]] || ! "$NFS_VENV/bin/python" -c 'import nfs_rs' 2>/dev/null; then
        if ! { python3 -m venv "$NFS_VENV" >/dev/null && "$NFS_VENV/bin/pip" install -q nfs-rs; }; then
            skip "cannot install the nfs-rs client from PyPI"
        fi
    fi
}

nfs_cleanup_all() {
    local g
    for g in "${NFS_GWS[@]}"; do
        nfs_stop_ganesha "${NFS_DIR[$g]}" || true
    done
}

# nfs_suite_up VOLUME: cluster + EXIT trap that stops the gateways first.
nfs_suite_up() {
    nfs_prereqs
    cluster_up 1 "$1" 2 4
    # set +e: under errexit, (exit $rc) would end the trap before cl_cleanup on a failure
    trap 'rc=$?; set +e; nfs_cleanup_all; (exit $rc); cl_cleanup' EXIT
}

# nfs_exports_default VOLUME: EXPORT block for VOLUME at /VOLUME, clients 127.0.0.1.
nfs_exports_default() {
    nfs_export_block 1 "$1" "$(cl_node_addr n1)" "/$1"
}

# nfs_gw_start NAME EXPORTS_FILE: start (or restart, same ports) instance NAME.
nfs_gw_start() {
    local name=$1 exports=$2 dir=$CL_DIR/ganesha-$1
    if [[ -z ${NFS_PORT[$name]:-} ]]; then
        NFS_PORT[$name]=$(free_port)
        NFS_MNT_PORT[$name]=$(free_port)
        NFS_NLM_PORT[$name]=$(free_port)
        NFS_DIR[$name]=$dir
        NFS_GWS+=("$name")
    fi
    mkdir -p "$dir"
    nfs_render_config "$dir" "${NFS_PORT[$name]}" "${NFS_MNT_PORT[$name]}" \
        "${NFS_NLM_PORT[$name]}" "$exports" true "$NFS_PLUGINS"
    nfs_start_ganesha "$dir" "${NFS_PORT[$name]}" || fail "ganesha $name did not start"
}
declare -A NFS_NLM_PORT=()

nfs_gw_stop() { nfs_stop_ganesha "${NFS_DIR[$1]}"; }

# nfs_url NAME EXPORT_PATH: libnfs URL (NFSv3) with explicit ports (no portmapper lookups).
nfs_url() {
    echo "nfs://127.0.0.1/${2#/}?nfsport=${NFS_PORT[$1]}&mountport=${NFS_MNT_PORT[$1]}&version=3"
}

# nfs_client NAME VERSION CMD ARGS...: run tests/nfs/nfsclient.py against instance NAME.
nfs_client() {
    local name=$1 version=$2
    shift 2
    "$NFS_VENV/bin/python" "$CL_REPO/tests/nfs/nfsclient.py" \
        --port "${NFS_PORT[$name]}" --mount-port "${NFS_MNT_PORT[$name]}" \
        --version "$version" --export "/$CL_VOLUME" "$@"
}

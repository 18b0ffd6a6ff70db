# shellcheck shell=bash
# pNFS suites (pnfs.sh, pnfs-state.sh, pnfs-ds.sh): a 2-node 2 x 2 cluster, a DS
# Ganesha per node and an MDS Ganesha (/vol0 FILES, /vol0ff Flexible Files), driven by
# tests/nfs/pnfs_state.py (a raw NFSv4.1 client with a back channel).
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib-pnfs.sh"
#   pnfs_up LEASE          # sets DS_PORT[n1|n2], NFS_DIR[ds-n1|ds-n2], mds_pid; MDS exports
#                          # /vol0 (FILES), /vol0ff and /vol0slow (Flexible Files; its DSs
#                          # are down after 100 failed probes, DS_Probe_Fails)
#   pnfs_ds_up             # the cluster and the DSs only (pnfs.sh writes its own MDS)
#   state --export /vol0 layout f1
#   hold_layouts NAME; ...; check_recalled NAME WHAT

# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

declare -A DS_PORT=()

# pnfs_ds_up: the cluster and a DS per node (each on its own port, /vol0 and /vol0ff
# served through that node's cairnd); sets DS_PORT and DS_ADDRS (the MDS's DS_Addrs).
pnfs_ds_up() {
    local node dir
    nfs_prereqs
    cluster_up 2 vol0 2 4
    trap 'rc=$?; set +e; nfs_cleanup_all; (exit $rc); cl_cleanup' EXIT
    for node in n1 n2; do
        dir=$CL_DIR/ds-$node
        DS_PORT[$node]=$(free_port)
        NFS_DIR[ds-$node]=$dir
        NFS_GWS+=("ds-$node")
        mkdir -p "$dir"
        {
            nfs_ds_export_block 1 vol0 "$(cl_node_addr "$node")" /vol0
            nfs_ds_export_block 3 vol0 "$(cl_node_addr "$node")" /vol0ff
            nfs_ds_export_block 5 vol0 "$(cl_node_addr "$node")" /vol0slow
        } >"$dir/ds.conf"
        nfs_render_ds_config "$dir" "${DS_PORT[$node]}" "$dir/ds.conf" "$NFS_PLUGINS"
        ds_start "$node"
    done
    DS_ADDRS="n1=127.0.0.1:${DS_PORT[n1]},n2=127.0.0.1:${DS_PORT[n2]}"
}

# pnfs_up LEASE: pnfs_ds_up and the MDS (NFSv4 lease LEASE seconds).
pnfs_up() {
    pnfs_ds_up
    {
        nfs_export_block 1 vol0 "$(cl_node_addr n1)" /vol0 127.0.0.1 / RW No_Root_Squash none \
            "$DS_ADDRS"
        nfs_export_block 3 vol0 "$(cl_node_addr n1)" /vol0ff 127.0.0.1 / RW No_Root_Squash none \
            "$DS_ADDRS" flexfiles
        # a dead DS alone is noticed here only after 100 s: pnfs-ds.sh's client error reports
        nfs_export_block 5 vol0 "$(cl_node_addr n1)" /vol0slow 127.0.0.1 / RW No_Root_Squash none \
            "$DS_ADDRS" flexfiles "DS_Probe_Fails = 100;"
    } >"$CL_DIR/exports.conf"
    NFS_LEASE_LIFETIME=$1 nfs_gw_start mds "$CL_DIR/exports.conf"
    mds_pid=$(cat "${NFS_DIR[mds]}/ganesha.pid.self")
}

# ds_start NODE: start (or start again, same port and config) NODE's DS Ganesha.
ds_start() {
    nfs_start_ganesha "${NFS_DIR[ds-$1]}" "${DS_PORT[$1]}" || fail "DS ganesha on $1 did not start"
    grep -q "CAIRN: DS 1 serves volume vol0" "${NFS_DIR[ds-$1]}/ganesha.log" ||
        fail "DS on $1: no 'DS 1 serves volume vol0' in its log"
}

# ds_kill NODE: kill NODE's DS Ganesha with SIGKILL (cairnd and its bricks stay up).
ds_kill() {
    local pidfile=${NFS_DIR[ds-$1]}/ganesha.pid.self pid
    pid=$(cat "$pidfile")
    kill -KILL "$pid"
    # a child of this shell stays a zombie (kill -0 succeeds) until it is waited for
    wait "$pid" 2>/dev/null || true
    wait_until 10 bash -c "! kill -0 $pid 2>/dev/null" || fail "DS ganesha on $1 (pid $pid) did not die"
    rm -f "$pidfile"
}

state() { python3 "$CL_REPO/tests/nfs/pnfs_state.py" --port "${NFS_PORT[mds]}" "$@"; }

# mds_alive WHAT: the MDS Ganesha still runs (else its log's last lines, and fail)
mds_alive() {
    if ! kill -0 "$mds_pid" 2>/dev/null; then
        tail -n 20 "${NFS_DIR[mds]}/ganesha.log" >&2
        fail "the MDS Ganesha died: $1"
    fi
}

# hold_layouts NAME [TYPES]: a FILES and a Flexible Files holder (TYPES: "files ff" by
# default) of files NAME-files, NAME-ff, each answering CB_LAYOUTRECALL (HOLDERS: their
# pids), once they have their layouts
hold_layouts() {
    local t
    HOLD_TYPES=${2:-files ff}
    HOLDERS=()
    for t in $HOLD_TYPES; do
        if [[ $t == ff ]]; then
            state --export /vol0ff --flexfiles hold "$1-ff" --ready "$CL_DIR/ready-$1-ff" \
                --timeout 60 >"$CL_DIR/hold-$1-ff.out" 2>&1 &
        else
            state --export /vol0 hold "$1-files" --ready "$CL_DIR/ready-$1-files" \
                --timeout 60 >"$CL_DIR/hold-$1-files.out" 2>&1 &
        fi
        HOLDERS+=($!)
    done
    for t in $HOLD_TYPES; do
        wait_until 30 test -s "$CL_DIR/ready-$1-$t" ||
            { cat "$CL_DIR/hold-$1-$t.out" >&2; fail "$1-$t holder: no layout"; }
    done
}

# check_recalled NAME WHAT: the holders of hold_layouts NAME were recalled and returned
check_recalled() {
    local t
    wait "${HOLDERS[@]}" || true
    for t in $HOLD_TYPES; do
        cat "$CL_DIR/hold-$1-$t.out"
        grep -q "^recalled .* file " "$CL_DIR/hold-$1-$t.out" ||
            fail "$1-$t: no CB_LAYOUTRECALL within 60 s of $2"
        grep -q "^returned " "$CL_DIR/hold-$1-$t.out" || fail "$1-$t: the recalled layout was not returned"
        ! grep -q "recall-of-another-file" "$CL_DIR/hold-$1-$t.out" || fail "$1-$t: a recall named another file"
    done
    mds_alive "after the recalls of $2"
}

# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are used by the scripts that source this
# Settings of the single-host cluster that `make up` starts and `make down` stops.
# Every one can be overridden from the environment.

CAIRN_REPO=${CAIRN_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)}
CAIRN_RUN_DIR=${CAIRN_RUN_DIR:-$CAIRN_REPO/run}
CAIRN_NODE=${CAIRN_NODE:-$(hostname -s)}
CAIRN_HOST=${CAIRN_HOST:-127.0.0.1}
CAIRN_PORT=${CAIRN_PORT:-7420}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-23790}
CAIRN_ETCD_PEER_PORT=${CAIRN_ETCD_PEER_PORT:-23800}
CAIRN_VOLUME=${CAIRN_VOLUME:-vol0}
CAIRN_REPLICA=${CAIRN_REPLICA:-2}
CAIRN_BRICKS=${CAIRN_BRICKS:-4}
# Empty: use the installed binaries (cairnd, cairn, mount.cairn on PATH, as `make install`
# puts them). Set to a cargo target dir (backend/target/debug) to run a build in place.
CAIRN_BIN_DIR=${CAIRN_BIN_DIR:-}

# TLS (docs/security.md): the first cairnd creates the cluster CA and the admin
# credential here; cairn and mount.cairn connect with it.
export CAIRN_CA_DIR=${CAIRN_CA_DIR:-$CAIRN_RUN_DIR/ca}
export CAIRN_CREDENTIALS=${CAIRN_CREDENTIALS:-$CAIRN_CA_DIR/admin.pem}

# 1 (default): etcd over TLS with client certificates and auth, from a CA made for this
# instance in $CAIRN_ETCD_TLS_DIR (scripts/etcd-tls.sh; docs/security.md#etcd). 0: plain HTTP.
CAIRN_ETCD_TLS=${CAIRN_ETCD_TLS:-1}
CAIRN_ETCD_TLS_DIR=${CAIRN_ETCD_TLS_DIR:-$CAIRN_RUN_DIR/etcd-tls}
if [[ $CAIRN_ETCD_TLS == 1 ]]; then
    CAIRN_ETCD_URL=https://$CAIRN_HOST:$CAIRN_ETCD_PORT
else
    CAIRN_ETCD_URL=http://$CAIRN_HOST:$CAIRN_ETCD_PORT
fi
CAIRN_ADDR=$CAIRN_HOST:$CAIRN_PORT
CAIRN_MNT=$CAIRN_RUN_DIR/mnt/$CAIRN_VOLUME
PID_DIR=$CAIRN_RUN_DIR/pid
LOG_DIR=$CAIRN_RUN_DIR/log

# bin NAME: path of one of our binaries (cairnd, cairn, mount).
bin() {
    if [[ -n $CAIRN_BIN_DIR ]]; then
        case $1 in
        mount) echo "$CAIRN_BIN_DIR/mount-cairn" ;;
        *) echo "$CAIRN_BIN_DIR/$1" ;;
        esac
    else
        case $1 in
        mount) command -v mount.cairn || echo /usr/local/sbin/mount.cairn ;;
        *) command -v "$1" || echo "/usr/local/sbin/$1" ;;
        esac
    fi
}

cairn_cli() { "$(bin cairn)" --host "$CAIRN_ADDR" "$@"; }

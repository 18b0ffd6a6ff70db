# shellcheck shell=bash
# etcd with TLS, client certificates and auth, for make up and the test clusters.
#
#   etcd_tls_make DIR [IP...]     a CA for this cluster's etcd and, signed by it: the server
#                                 certificate (127.0.0.1, localhost and each IP), and client
#                                 certificates with CN root (administration) and cairn (every
#                                 cairnd). Keys 0600 in DIR (0700). Kept if DIR has them.
#   etcd_tls_server_args DIR      etcd's flags: server certificate, --client-cert-auth,
#                                 --trusted-ca-file, and the same for peer traffic
#   etcd_tls_cairnd_args DIR      cairnd's flags: --etcd-ca, --etcd-cert, --etcd-key
#   etcd_tls_auth ENDPOINT DIR PREFIX
#                                 turn etcd auth on: users root and cairn (no passwords: the
#                                 certificate's CN is the user), role cairn with read-write
#                                 on keys under PREFIX only. Idempotent.
#   etcd_tls_healthy ENDPOINT DIR etcd at ENDPOINT answers /health over TLS as root
#   etcd_tls_client DIR NAME      a client certificate NAME.pem (CN NAME, key 0600) of DIR's
#                                 CA: a node's own etcd identity (cairn-NODE), kept if there
#   etcd_tls_node_user ENDPOINT DIR NAME
#                                 etcd user NAME (no password: its certificate's CN) with
#                                 role cairn, so a node's own certificate works and the
#                                 etcd audit trail names the node. Idempotent.
#   etcd_tls_own_node_user ENDPOINT DIR NODE PREFIX
#                                 etcd user cairn-NODE with its own role cairn-NODE: read
#                                 everything under PREFIX, write everything there except
#                                 other nodes' liveness keys (PREFIX/live/OTHER; its own
#                                 PREFIX/live/NODE only). Replaces role cairn. Idempotent.
#   etcd_tls_lock_user ENDPOINT DIR NAME KEY
#                                 etcd user NAME (its certificate's CN) whose role NAME may
#                                 read and write the one key KEY and nothing else: the CTDB
#                                 cluster lock helper's identity (ctdb-etcd-reclock --tls),
#                                 which cannot read the cluster's keys. Idempotent.
#
# The *_args functions print one argument per line (read them with mapfile).

etcd_tls_make() {
    local dir=$1 ip san n
    shift
    [[ -s $dir/ca.pem && -s $dir/server.pem && -s $dir/cairn.pem && -s $dir/root.pem ]] && return 0
    mkdir -p "$dir" && chmod 700 "$dir" || return 1
    san="IP:127.0.0.1,DNS:localhost"
    for ip in "$@"; do san+=",IP:$ip"; done
    (
        umask 077
        set -e
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
            -subj "/CN=cairn etcd CA" -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" 2>/dev/null
        for n in server root cairn; do
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                -subj "/CN=$n" -keyout "$dir/$n-key.pem" -out "$dir/$n.csr" 2>/dev/null
            if [[ $n == server ]]; then
                printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$dir/$n.ext"
            else
                printf 'extendedKeyUsage=clientAuth\n' >"$dir/$n.ext"
            fi
            openssl x509 -req -in "$dir/$n.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
                -CAcreateserial -days 3650 -extfile "$dir/$n.ext" -out "$dir/$n.pem" 2>/dev/null
            rm -f "$dir/$n.csr" "$dir/$n.ext"
        done
        chmod 644 "$dir/ca.pem" "$dir/server.pem" "$dir/root.pem" "$dir/cairn.pem"
    ) || { echo "etcd_tls_make: openssl failed making the etcd CA and certificates in $dir (apt-get install openssl)" >&2; return 1; }
}

etcd_tls_server_args() {
    local d=$1
    printf '%s\n' --cert-file "$d/server.pem" --key-file "$d/server-key.pem" \
        --client-cert-auth --trusted-ca-file "$d/ca.pem" \
        --peer-cert-file "$d/server.pem" --peer-key-file "$d/server-key.pem" \
        --peer-client-cert-auth --peer-trusted-ca-file "$d/ca.pem"
}

# etcd_tls_cairnd_args DIR [NAME]: with NAME, the client certificate NAME.pem
# (etcd_tls_client) instead of the shared cairn.pem.
etcd_tls_cairnd_args() {
    local d=$1 n=${2:-cairn}
    printf '%s\n' --etcd-ca "$d/ca.pem" --etcd-cert "$d/$n.pem" --etcd-key "$d/$n-key.pem"
}

etcd_tls_client() {
    local d=$1 n=$2
    [[ $n =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$ ]] || {
        echo "etcd_tls_client: bad certificate name '$n' (1-63 of A-Z a-z 0-9 . _ -)" >&2
        return 1
    }
    [[ -s $d/$n.pem && -s $d/$n-key.pem ]] && return 0
    (
        umask 077
        set -e
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -subj "/CN=$n" -keyout "$d/$n-key.pem" -out "$d/$n.csr" 2>/dev/null
        printf 'extendedKeyUsage=clientAuth\n' >"$d/$n.ext"
        openssl x509 -req -in "$d/$n.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" \
            -CAcreateserial -days 3650 -extfile "$d/$n.ext" -out "$d/$n.pem" 2>/dev/null
        rm -f "$d/$n.csr" "$d/$n.ext"
        chmod 644 "$d/$n.pem"
    ) || { echo "etcd_tls_client: openssl failed making $d/$n.pem" >&2; return 1; }
}

etcd_tls_node_user() {
    local endpoint=$1 d=$2 n=$3
    etcd_tls_ctl "$endpoint" "$d" user get "$n" >/dev/null 2>&1 ||
        etcd_tls_ctl "$endpoint" "$d" user add "$n" --no-password >/dev/null || return 1
    etcd_tls_ctl "$endpoint" "$d" user get "$n" 2>/dev/null | grep -q 'Roles:.*cairn' ||
        etcd_tls_ctl "$endpoint" "$d" user grant-role "$n" cairn >/dev/null
}

# The byte after PREFIX's range: PREFIX with its last byte incremented (etcd's prefix end).
etcd_tls_prefix_end() {
    local p=$1 c
    c=$(printf '%d' "'${p: -1}")
    printf '%s%b' "${p:0:${#p}-1}" "$(printf '\\%03o' $((c + 1)))"
}

etcd_tls_own_node_user() {
    local endpoint=$1 d=$2 node=$3 prefix=$4 n="cairn-$3" end
    [[ $prefix == /* && $prefix != */ ]] || {
        echo "etcd_tls_own_node_user: the prefix must be absolute, without a trailing /: '$prefix'" >&2
        return 1
    }
    end=$(etcd_tls_prefix_end "$prefix")
    etcd_tls_ctl "$endpoint" "$d" user get "$n" >/dev/null 2>&1 ||
        etcd_tls_ctl "$endpoint" "$d" user add "$n" --no-password >/dev/null || return 1
    etcd_tls_ctl "$endpoint" "$d" role get "$n" >/dev/null 2>&1 ||
        etcd_tls_ctl "$endpoint" "$d" role add "$n" >/dev/null || return 1
    # etcd's permissions only allow: the liveness keys are left out of the write ranges
    # (cairnd's watch and snapshots read the whole prefix)
    etcd_tls_ctl "$endpoint" "$d" role grant-permission "$n" read --prefix=true "$prefix" >/dev/null &&
        etcd_tls_ctl "$endpoint" "$d" role grant-permission "$n" readwrite "$prefix" "$prefix/live/" >/dev/null &&
        etcd_tls_ctl "$endpoint" "$d" role grant-permission "$n" readwrite "$prefix/live0" "$end" >/dev/null &&
        etcd_tls_ctl "$endpoint" "$d" role grant-permission "$n" readwrite "$prefix/live/$node" >/dev/null ||
        return 1
    etcd_tls_ctl "$endpoint" "$d" user get "$n" 2>/dev/null | grep -q "Roles:.*\b$n\b" ||
        etcd_tls_ctl "$endpoint" "$d" user grant-role "$n" "$n" >/dev/null || return 1
    # a user made by etcd_tls_node_user before: its role cairn would write everything
    if etcd_tls_ctl "$endpoint" "$d" user get "$n" 2>/dev/null | grep -Eq 'Roles:(.* )?cairn( |$)'; then
        etcd_tls_ctl "$endpoint" "$d" user revoke-role "$n" cairn >/dev/null || return 1
    fi
}

etcd_tls_lock_user() {
    local endpoint=$1 d=$2 n=$3 key=$4
    [[ $key == /* ]] || {
        echo "etcd_tls_lock_user: the lock key must be absolute: '$key'" >&2
        return 1
    }
    etcd_tls_ctl "$endpoint" "$d" user get "$n" >/dev/null 2>&1 ||
        etcd_tls_ctl "$endpoint" "$d" user add "$n" --no-password >/dev/null || return 1
    etcd_tls_ctl "$endpoint" "$d" role get "$n" >/dev/null 2>&1 ||
        etcd_tls_ctl "$endpoint" "$d" role add "$n" >/dev/null || return 1
    etcd_tls_ctl "$endpoint" "$d" role grant-permission "$n" readwrite "$key" >/dev/null || return 1
    etcd_tls_ctl "$endpoint" "$d" user get "$n" 2>/dev/null | grep -q "Roles:.*\b$n\b" ||
        etcd_tls_ctl "$endpoint" "$d" user grant-role "$n" "$n" >/dev/null
}

etcd_tls_ctl() {
    local endpoint=$1 d=$2
    shift 2
    ETCDCTL_API=3 etcdctl --endpoints "$endpoint" --cacert "$d/ca.pem" \
        --cert "$d/root.pem" --key "$d/root-key.pem" --dial-timeout 3s --command-timeout 5s "$@"
}

etcd_tls_auth() {
    local endpoint=$1 d=$2 prefix=$3
    # Every step checks first or is idempotent; with auth on, root acts by its certificate.
    etcd_tls_ctl "$endpoint" "$d" user get root >/dev/null 2>&1 ||
        etcd_tls_ctl "$endpoint" "$d" user add root --no-password >/dev/null || return 1
    etcd_tls_ctl "$endpoint" "$d" user get root 2>/dev/null | grep -q 'Roles: root' ||
        etcd_tls_ctl "$endpoint" "$d" user grant-role root root >/dev/null || return 1
    etcd_tls_ctl "$endpoint" "$d" user get cairn >/dev/null 2>&1 ||
        etcd_tls_ctl "$endpoint" "$d" user add cairn --no-password >/dev/null || return 1
    etcd_tls_ctl "$endpoint" "$d" role get cairn >/dev/null 2>&1 ||
        etcd_tls_ctl "$endpoint" "$d" role add cairn >/dev/null || return 1
    etcd_tls_ctl "$endpoint" "$d" role grant-permission cairn --prefix=true readwrite "$prefix" >/dev/null &&
        etcd_tls_ctl "$endpoint" "$d" user grant-role cairn cairn >/dev/null &&
        etcd_tls_ctl "$endpoint" "$d" auth enable >/dev/null
}

etcd_tls_healthy() {
    local endpoint=$1 d=$2
    curl -fsS --max-time 2 --cacert "$d/ca.pem" --cert "$d/root.pem" --key "$d/root-key.pem" \
        "$endpoint/health" 2>/dev/null | grep -q '"health":"true"'
}

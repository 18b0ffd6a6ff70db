#!/usr/bin/env bash
# NFSv4 behaviours where FSAL_CAIRN must answer as the stock server does (issue 25, items
# 2-4), checked side by side: one Ganesha serves vol0 through FSAL_CAIRN at /vol0 and a
# local directory through FSAL_VFS at /local, and every check runs against both exports
# (v4.0 and v4.1, raw compounds from tests/nfs/nfsraw.py): a check the stock export fails
# is a broken check, one only Cairn fails is a Cairn defect.
#   - SETATTR(mode) on a symlink's own handle: NFS4_OK, nothing changed (Linux keeps no
#     symlink mode; FSAL_VFS skips the chmod).
#   - READ at offsets at and past 2^63 (up to 2^64-1), v4.0, v4.1 and v3: OK, 0 bytes,
#     eof (RFC 7530 §16.23: a read at or past the end of file is eof, not an error).
#     Against the RFC only: the stock server answers FBIG or INVAL there (logged). A
#     WRITE at 2^63 is FBIG on both.
#   - EXCHANGE_ID sets an acceptable USE_PNFS_*/USE_NON_PNFS combination (RFC 8881 §18.35)
#     whatever pNFS role the client asks for, the same as Ganesha with its packaged
#     defaults (a second instance, g2).
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nfs_suite_up vol0
LOCAL=$CL_DIR/local
mkdir -p "$LOCAL"
local_export() {
    cat <<CONF
EXPORT {
    Export_Id = 2; Path = "$LOCAL"; Pseudo = "/local"; Protocols = 3, 4;
    Transports = TCP; SecType = sys; Access_Type = None; Squash = No_Root_Squash;
    CLIENT { Clients = 127.0.0.1; Access_Type = RW; }
    FSAL { Name = VFS; }
}
CONF
}
{
    nfs_exports_default vol0
    local_export
} >"$CL_DIR/exports.conf"
nfs_gw_start g1 "$CL_DIR/exports.conf"
pass "ganesha serves vol0 (FSAL_CAIRN) at /vol0 and a directory (FSAL_VFS) at /local"

# expect EXPECTED ACTUAL WHAT: like assert_eq, but goes on to the next case (the suite
# fails at the end, listing every case that differed).
MISSES=()
expect() {
    if [[ $1 == "$2" ]]; then
        pass "$3"
    else
        MISSES+=("$3: expected '$1', got '$2'")
        echo "not ok - $3: expected '$1', got '$2'" >&2
    fi
}
raw() { "$NFS_VENV/bin/python" "$CL_REPO/tests/nfs/nfsraw.py" --port "${NFS_PORT[g1]}" "$@"; }

# The same tree under both exports: a 5-byte file and a symlink to it.
for root in "$CL_MNT" "$LOCAL"; do
    mkdir -p "$root/p"
    printf 'hello' >"$root/p/f"
    chmod 0644 "$root/p/f"
    ln -s f "$root/p/s"
done

# SETATTR(mode) on a symlink: what a client cleaning a tree (chmod -R, then remove) sends.
for v in 0 1; do
    for e in local vol0; do
        expect NFS4_OK "$(raw --minor "$v" setattr-mode "/$e/p/s" 700)" \
            "v4.$v SETATTR(mode) on a symlink of /$e"
    done
done
expect "644 644" "$(stat -c %a "$LOCAL/p/f" "$CL_MNT/p/f" | xargs)" \
    "SETATTR(mode) on a symlink changed neither target"
for e in local vol0; do
    expect NFS4_OK "$(raw setattr-mode "/$e/p/f" 600)" "v4.1 SETATTR(mode) on a file of /$e"
done
expect "600 600" "$(stat -c %a "$LOCAL/p/f" "$CL_MNT/p/f" | xargs)" "SETATTR(mode) on a file"

# READ far past the end of file, at offsets a 64-bit client may send: NFS4_OK, 0 bytes,
# eof. Here the RFC is the reference, not the stock server: Ganesha 4.3 refuses offsets
# past 2^63 - 1 with FBIG (its export MaxOffsetRead, which Cairn's exports set to 2^64 - 1)
# and FSAL_VFS's preadv then refuses those past 2^63 with INVAL; its answers are logged.
offsets=(4096 9223372036854775807 9223372036854775808 18446744073709547520 18446744073709551615)
for v in 0 1; do
    expect "NFS4_OK false 4" "$(raw --minor "$v" read /vol0/p/f 0 4)" "v4.$v READ of 4 bytes at 0"
    for off in "${offsets[@]}"; do
        expect "NFS4_OK true 0" "$(raw --minor "$v" read /vol0/p/f "$off" 4096)" \
            "v4.$v READ at offset $off"
        echo "# stock FSAL_VFS: v4.$v READ at offset $off: $(raw --minor "$v" read /local/p/f "$off" 4096)"
    done
done
# A WRITE there stays FBIG, on both (Ganesha's MaxOffsetWrite, 2^63 - 1, is left as is).
for e in local vol0; do
    expect NFS4ERR_FBIG "$(raw write "/$e/p/f" 9223372036854775808 data)" "v4.1 WRITE at offset 2^63 of /$e"
done
# NFSv3 READ goes through the same FSAL read: nfs-rs over v3 (which refuses a range that
# wraps past 2^64 itself), 4 KiB at offsets up to the last 4 KiB below 2^64.
for off in 9223372036854775807 9223372036854775808 18446744073709547519; do
    expect 0 "$(nfs_client g1 3 read-at /p/f "$off" 4096)" "v3 READ at offset $off"
done

# EXCHANGE_ID: the pNFS role flags of the reply, for each role a client may ask for. g2 is
# Ganesha as packaged (no PNFS_* settings: its defaults) serving /local only.
NFS_PORT[g2]=$(free_port) NFS_MNT_PORT[g2]=$(free_port) NFS_NLM_PORT[g2]=$(free_port)
NFS_DIR[g2]=$CL_DIR/ganesha-g2
NFS_GWS+=(g2)
local_export >"$CL_DIR/exports-stock.conf"
nfs_render_config "${NFS_DIR[g2]}" "${NFS_PORT[g2]}" "${NFS_MNT_PORT[g2]}" "${NFS_NLM_PORT[g2]}" \
    "$CL_DIR/exports-stock.conf" true "$NFS_PLUGINS"
sed -i '/PNFS_/d' "${NFS_DIR[g2]}/ganesha.conf"
nfs_start_ganesha "${NFS_DIR[g2]}" "${NFS_PORT[g2]}" || fail "stock ganesha g2 did not start"
eid() { "$NFS_VENV/bin/python" "$CL_REPO/tests/nfs/nfsraw.py" --port "${NFS_PORT[$1]}" exchange-id "$2"; }
# RFC 8881 §18.35: the acceptable combinations of USE_PNFS_MDS (0x20000), USE_PNFS_DS
# (0x40000) and USE_NON_PNFS (0x10000).
acceptable() { case $(($1 & 0x70000)) in $((0x20000)) | $((0x60000)) | $((0x40000)) | $((0x10000)) | $((0x50000))) return 0 ;; esac; return 1; }
for asked in 0 0x10000 0x20000 0x40000 0x60000 0x30000 0x50000; do
    stock=$(eid g2 "$asked")
    acceptable "$stock" || fail "stock EXCHANGE_ID(flags $asked) answered $stock: no acceptable pNFS role (the check is wrong)"
    got=$(eid g1 "$asked")
    acceptable "$got" || expect "an acceptable USE_* role" "$got" "EXCHANGE_ID(flags $asked) (RFC 8881 §18.35)"
    expect "$(printf '0x%x' $((stock & 0x70000)))" "$(printf '0x%x' $((got & 0x70000)))" \
        "EXCHANGE_ID(flags $asked): the stock server's pNFS role flags"
done

((${#MISSES[@]} == 0)) || fail "${#MISSES[@]} cases differ from the stock server or the RFC: $(printf '\n  %s' "${MISSES[@]}")"
finish

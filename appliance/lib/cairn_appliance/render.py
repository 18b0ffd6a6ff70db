"""Config files the appliance writes, as pure functions of their inputs (unit-tested).
The Ansible roles render the same files through `cairn-appliance render ...`, so a node
set up by first boot and one set up by site.yml look the same."""

from __future__ import annotations

import shlex
from typing import Iterable, Optional, Sequence

from . import paths


def firewall_ports(roles: Iterable[str], etcd_member: bool = False) -> dict[str, list[int]]:
    """{"tcp": [...], "udp": [...]} for a node with these roles (all-in-one, brick,
    gateway, etcd). SSH always; cairnd on every node (clients and peers reach it); etcd's
    client and peer ports on a member of a multi-node etcd; an all-in-one node's client port
    (its single etcd serves the brick nodes and gateways that join it by user-data; TLS
    with client certificates of its etcd CA only; its peer port stays on 127.0.0.1); NFS
    (with rpcbind, mountd, NLM and statd pinned), SMB and iSCSI on gateways; the pNFS data
    server's port on nodes with bricks."""
    roles = set(roles)
    tcp = {22, paths.CAIRND_PORT}
    udp: set[int] = set()
    if etcd_member or "etcd" in roles:
        tcp |= {paths.ETCD_CLIENT_PORT, paths.ETCD_PEER_PORT}
    if "all-in-one" in roles:
        tcp.add(paths.ETCD_CLIENT_PORT)
    if roles & {"all-in-one", "gateway"}:
        tcp |= {111, paths.NFS_PORT, paths.NFS_MNT_PORT, paths.NFS_NLM_PORT, paths.STATD_PORT,
                paths.SMB_PORT, paths.ISCSI_PORT}
        udp |= {111, paths.STATD_PORT}
    if roles & {"all-in-one", "brick"}:
        tcp.add(paths.NFS_DS_PORT)  # the pNFS data server (NFSv4.1+ clients of the MDSs)
    return {"tcp": sorted(tcp), "udp": sorted(udp)}


def nftables(ports: dict[str, list[int]]) -> str:
    """/etc/nftables.conf: drop what is not asked for; loopback, established, ICMP(v6)
    and the given ports pass; nothing is filtered on the way out."""
    def setof(p):
        return "{ " + ", ".join(str(x) for x in p) + " }"
    lines = [
        "#!/usr/sbin/nft -f",
        "# Written by cairn-appliance (first boot or ansible/site.yml); do not edit:",
        "# rerun 'cairn-appliance render firewall' after changing the role.",
        "flush ruleset",
        "",
        "table inet cairn {",
        "    chain input {",
        "        type filter hook input priority filter; policy drop;",
        "        iif lo accept",
        "        ct state established,related accept",
        "        ct state invalid drop",
        "        meta l4proto icmp accept",
        "        meta l4proto ipv6-icmp accept",
    ]
    if ports.get("tcp"):
        lines.append(f"        tcp dport {setof(ports['tcp'])} accept")
    if ports.get("udp"):
        lines.append(f"        udp dport {setof(ports['udp'])} accept")
    # DHCPv4 replies, for the first lease and renewals
    lines.append("        udp sport 67 udp dport 68 accept")
    lines += [
        "    }",
        "    chain forward {",
        "        type filter hook forward priority filter; policy drop;",
        "    }",
        "}",
        "",
    ]
    return "\n".join(lines)


def etcd_env(name: str, advertise_ip: str, members: Sequence[tuple[str, str]],
             token: str, state: str = "new", loopback_only: bool = False,
             tls_dir: Optional[str] = None, serve_network: bool = False) -> str:
    """/etc/cairn/etcd.env for cairn-etcd.service. MEMBERS: (name, ip) of every member.
    loopback_only: a single-member etcd, its peer URL on 127.0.0.1 (all-in-one); with
    serve_network its clients are served on every address (0.0.0.0, advertised as
    ADVERTISE_IP), so that nodes can join the all-in-one node, else on 127.0.0.1 only.
    tls_dir: TLS for clients and peers, as scripts/etcd-tls.sh makes it (ca.pem, and
    server.pem / server-key.pem, readable by etcd): https URLs, client certificates
    required (--client-cert-auth) and checked against ca.pem, peers likewise."""
    s = "https" if tls_dir else "http"
    if loopback_only:
        client = f"{s}://127.0.0.1:{paths.ETCD_CLIENT_PORT}"
        peer = f"{s}://127.0.0.1:{paths.ETCD_PEER_PORT}"
        listen_client, listen_peer, initial = client, peer, f"{name}={peer}"
        if serve_network:
            listen_client = f"{s}://0.0.0.0:{paths.ETCD_CLIENT_PORT}"
            client = f"{s}://{_host(advertise_ip)}:{paths.ETCD_CLIENT_PORT}"
    else:
        client = f"{s}://{_host(advertise_ip)}:{paths.ETCD_CLIENT_PORT}"
        peer = f"{s}://{_host(advertise_ip)}:{paths.ETCD_PEER_PORT}"
        listen_client = f"{client},{s}://127.0.0.1:{paths.ETCD_CLIENT_PORT}"
        listen_peer = peer
        initial = ",".join(f"{n}={s}://{_host(ip)}:{paths.ETCD_PEER_PORT}" for n, ip in members)
    env = {
        "ETCD_NAME": name,
        "ETCD_DATA_DIR": "/var/lib/cairn/etcd",
        "ETCD_LISTEN_CLIENT_URLS": listen_client,
        "ETCD_ADVERTISE_CLIENT_URLS": client,
        "ETCD_LISTEN_PEER_URLS": listen_peer,
        "ETCD_INITIAL_ADVERTISE_PEER_URLS": peer,
        "ETCD_INITIAL_CLUSTER": initial,
        "ETCD_INITIAL_CLUSTER_STATE": state,
        "ETCD_INITIAL_CLUSTER_TOKEN": token,
        "ETCD_HEARTBEAT_INTERVAL": "100",
        "ETCD_ELECTION_TIMEOUT": "1000",
    }
    if tls_dir:
        cert, key, ca = (f"{tls_dir}/server.pem", f"{tls_dir}/server-key.pem", f"{tls_dir}/ca.pem")
        env.update({
            "ETCD_CERT_FILE": cert, "ETCD_KEY_FILE": key,
            "ETCD_CLIENT_CERT_AUTH": "true", "ETCD_TRUSTED_CA_FILE": ca,
            "ETCD_PEER_CERT_FILE": cert, "ETCD_PEER_KEY_FILE": key,
            "ETCD_PEER_CLIENT_CERT_AUTH": "true", "ETCD_PEER_TRUSTED_CA_FILE": ca,
        })
    return "# Written by cairn-appliance; read by cairn-etcd.service\n" + \
        "".join(f"{k}={v}\n" for k, v in env.items())


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def appliance_env(role: str, node: str, advertise: str, etcd: Sequence[str],
                  join: Optional[str] = None, ca_cert_hash: Optional[str] = None,
                  etcd_tls: Optional[tuple[str, str, str]] = None,
                  etcd_member: Optional[tuple[str, str]] = None) -> str:
    """/etc/cairn/appliance.env, read by cairnd.service (through cairnd-start) and the CLI
    helpers. ADVERTISE may be `auto`: the primary address at each start. JOIN and
    CA_CERT_HASH (user-data cluster.join, cluster.ca_cert_hash): the member a node without a
    certificate enrolls through, and the pinned hash of the cluster CA. ETCD_TLS: (CA,
    client certificate, key) PEM paths cairnd presents to an etcd with client-cert-auth
    (CAIRN_ETCD_CA, CAIRN_ETCD_CERT, CAIRN_ETCD_KEY; cairnd-start passes them). ETCD_MEMBER:
    (certificate, key) where a joining node stores the etcd server and peer certificate its
    enrollment brings (CAIRN_ETCD_MEMBER_CERT, CAIRN_ETCD_MEMBER_KEY; with ETCD_TLS and
    JOIN only)."""
    env = {
        "CAIRN_ROLE": role,
        "CAIRN_NODE": node,
        "CAIRN_ADVERTISE": advertise,
        "CAIRN_ETCD": ",".join(etcd),
    }
    if join and ca_cert_hash:
        env["CAIRN_JOIN"] = join
        env["CAIRN_CA_CERT_HASH"] = ca_cert_hash
    if etcd_tls:
        env["CAIRN_ETCD_CA"], env["CAIRN_ETCD_CERT"], env["CAIRN_ETCD_KEY"] = etcd_tls
        if etcd_member and "CAIRN_JOIN" in env:
            env["CAIRN_ETCD_MEMBER_CERT"], env["CAIRN_ETCD_MEMBER_KEY"] = etcd_member
    return "# Written by cairn-appliance; read by cairnd.service and cairn-appliance\n" + \
        "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items())


def parse_env(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        parts = shlex.split(v) if v else [""]
        out[k] = parts[0] if parts else ""
    return out


def smb_conf(netbios: str) -> str:
    """/etc/samba/smb.conf of a gateway: standalone server, users in tdbsam, SMB2+ only,
    shares from `cairn smb sync` included at the end of [global] (docs/cli.md)."""
    netbios = "".join(c for c in netbios.upper() if c.isalnum() or c == "-")[:15] or "CAIRN"
    return f"""# Written by cairn-appliance; shares come from the config store ('cairn smb share'),
# rendered into {paths.SMB_CONF_DIR}/shares.conf by 'cairn smb sync'.
[global]
    server role = standalone server
    workgroup = CAIRN
    netbios name = {netbios}
    disable netbios = yes
    smb ports = 445
    server min protocol = SMB2_02
    server signing = default
    smb encrypt = if_required
    passdb backend = tdbsam
    map to guest = never
    restrict anonymous = 2
    log file = /var/log/samba/log.%m
    max log size = 10000
    logging = file
    load printers = no
    printcap name = /dev/null
    disable spoolss = yes
    kernel share modes = no
    kernel oplocks = no
    posix locking = yes
    store dos attributes = yes
    ea support = yes
    usershare path =
    include = {paths.SMB_CONF_DIR}/shares.conf
"""


def nfs_conf_d() -> str:
    """/etc/nfs.conf.d/cairn.conf: statd on fixed ports, so the firewall can open them."""
    return ("# Written by cairn-appliance: rpc.statd on fixed ports (NFSv3 locking)\n"
            f"[statd]\nport={paths.STATD_PORT}\noutgoing-port={paths.STATD_OUT_PORT}\n")


def nfs_ds_env(credentials: str = paths.NODE_PEM, bus: str = paths.NFS_DS_BUS) -> str:
    """/etc/cairn/nfs-ds.env, read by cairn-nfs-ds and cairn-nfs-ds-sync: the node's own
    certificate (role node: data ops and reads of the exports, on every brick node, also
    one that joined by token and holds no admin credential) and the DS Ganesha's private
    bus (an all-in-one node's gateway Ganesha owns org.ganesha.nfsd on the system bus)."""
    return ("# Written by cairn-appliance; read by cairn-nfs-ds and cairn-nfs-ds-sync\n"
            f"CAIRN_CREDENTIALS={credentials}\n"
            f"DBUS_SYSTEM_BUS_ADDRESS=unix:path={bus}\n")


def nfs_ds_bus_conf(bus: str = paths.NFS_DS_BUS) -> str:
    """The private bus of the DS Ganesha (cairn-nfs-ds-bus.service): root only, as
    scripts/nfs-ganesha.sh's nfs_start_bus makes it for `make up`'s DS."""
    return f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<!-- Written by cairn-appliance: the bus of the pNFS data server's Ganesha -->
<busconfig>
  <type>system</type>
  <listen>unix:path={bus}</listen>
  <auth>EXTERNAL</auth>
  <policy user="root">
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"""


def connect_text(role: str, node: str, addrs: Sequence[str], volume: str | None,
                 services: dict[str, bool], smb_user: str | None,
                 password: str | None) -> str:
    """How to connect: printed on the console (with the password) and in /etc/motd
    (password=None: says where it is instead)."""
    a = addrs[0] if addrs else "ADDRESS"
    out = [f"Cairn appliance {node}: role {role}; addresses {', '.join(addrs) or 'none yet'}"]
    if volume and services.get("nfs"):
        out += [f"  NFS   mount -t nfs -o vers=4.2 {a}:/{volume} /mnt",
                f"        mount -t nfs -o vers=3 {a}:/{volume} /mnt"]
    if volume and services.get("smb"):
        out.append(f"  SMB   //{a}/{volume}  user {smb_user}")
        if password:
            out.append(f"        password {password}")
        else:
            out.append(f"        password: in {paths.CREDENTIALS} (root only) and on the serial console at first boot")
    if services.get("iscsi"):
        v = volume or "VOLUME"
        out += [f"  iSCSI cairn iscsi lun create lun0 --volume {v} --size 10G",
                f"        cairn iscsi target create iqn.2026-11.io.cairn:{node} && "
                f"cairn iscsi target lun add iqn.2026-11.io.cairn:{node} lun0",
                f"        (portal {a}:3260; add initiators with 'cairn iscsi target acl add')"]
    out.append("  Status: cairn-appliance status    Volumes: cairn volume status")
    return "\n".join(out) + "\n"

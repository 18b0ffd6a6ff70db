"""`cairn-appliance`: status, first boot, and the idempotent steps the Ansible roles run.

    cairn-appliance status [--json]
    cairn-appliance firstboot [--force]
    cairn-appliance ensure peer ADDR
    cairn-appliance ensure volume NAME --replica N [--force] [--options-json OBJ]
                                  [--root-mode OCTAL [--root-owner UID:GID]] BRICK...
    cairn-appliance ensure nfs-export VOLUME[/SUBDIR] --path /PSEUDO [--clients SPEC]
                                      [--access rw|ro] [--squash SQUASH]
    cairn-appliance ensure smb-share NAME --volume VOLUME[/SUBDIR] [--read-only] [--users LIST]
    cairn-appliance ensure iscsi-lun NAME --volume VOL --size SIZE [--thin]
    cairn-appliance ensure iscsi-target IQN [--lun NAME]... [--portal IP:PORT]... [--open]
    cairn-appliance ensure smb-user NAME          (password on stdin)
    cairn-appliance prepare-disks [DEVICE...]     (format blank, mount at /srv/cairn/diskN)
    cairn-appliance setup-gateway --node NAME [--no-nfs] [--no-smb] [--no-iscsi]
    cairn-appliance setup-ds                      (a brick node's pNFS data server)
    cairn-appliance etcd-tls ca [--ip IP]...      (the etcd CA and server certificate, kept)
    cairn-appliance etcd-tls client NAME          (a client certificate NAME of the etcd CA)
    cairn-appliance etcd-tls install-server       (etcd's files from the CA dir, this node)
    cairn-appliance etcd-tls install-client NAME  (this node's etcd identity from the CA dir)
    cairn-appliance etcd-tls install-reclock      (the CTDB lock helper's, cairn-reclock)
    cairn-appliance etcd-tls auth [--endpoint URL] [--user cairn-NODE]...
                                                  (etcd auth on: users by certificate CN)
    cairn-appliance render firewall ROLE... [--etcd-member]
    cairn-appliance render etcd-env --name N --ip IP --member NAME=IP... --token T [--state new|existing]
    cairn-appliance render appliance-env --role R --node N --advertise IP|auto --etcd URL...
    cairn-appliance render smb-conf --netbios NAME
    cairn-appliance render nfs-conf

`ensure`, `etcd-tls` print one JSON line {"changed": BOOL} (or {"failed": true, "msg": ...} and exit
1), for Ansible's changed_when. `render` prints the file on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import config, ensure, etcdtls, firstboot, render, status


def _ensure(a) -> bool:
    if a.what == "peer":
        return ensure.peer(a.name)
    if a.what == "volume":
        try:
            options = json.loads(a.options_json)
        except ValueError as e:
            raise ensure.CairnError(f"volume {a.name}: --options-json: {e}")
        if not isinstance(options, dict):
            raise ensure.CairnError(f"volume {a.name}: --options-json must be an object")
        changed = ensure.volume(a.name, a.replica, a.bricks, force=a.force)
        for k, v in options.items():
            changed |= ensure.volume_option(a.name, k, ("on" if v else "off") if isinstance(v, bool) else str(v))
        if a.root_mode:
            try:
                mode = int(a.root_mode, 8)
            except ValueError:
                raise ensure.CairnError(f"volume {a.name}: --root-mode {a.root_mode!r} is not octal")
            if not 0 <= mode <= 0o7777:
                raise ensure.CairnError(f"volume {a.name}: --root-mode {a.root_mode} is out of range")
            owner = None
            if a.root_owner:
                try:
                    uid, gid = (int(x) for x in a.root_owner.split(":"))
                except ValueError:
                    raise ensure.CairnError(f"volume {a.name}: --root-owner {a.root_owner!r} is not UID:GID")
                owner = (uid, gid)
            changed |= ensure.volume_root_mode(a.name, mode, owner=owner)
        return changed
    if a.what == "volume-option":
        return ensure.volume_option(a.name, a.key, a.value)
    if a.what == "nfs-export":
        return ensure.nfs_export(a.name, a.path, a.clients, a.access, a.squash)
    if a.what == "smb-share":
        return ensure.smb_share(a.name, a.volume, a.read_only, a.users)
    if a.what == "iscsi-lun":
        return ensure.iscsi_lun(a.name, a.volume, a.size, a.thin)
    if a.what == "iscsi-target":
        return ensure.iscsi_target(a.name, a.lun, a.portal, a.open)
    if a.what == "smb-user":
        pw = sys.stdin.readline().rstrip("\n")
        if not pw:
            raise ensure.CairnError(f"smb-user {a.name}: no password on stdin")
        return firstboot.smb_login(a.name, pw)
    raise SystemExit(f"unknown ensure {a.what}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cairn-appliance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("status")
    s.add_argument("--json", action="store_true")
    f = sub.add_parser("firstboot")
    f.add_argument("--force", action="store_true")

    e = sub.add_parser("ensure")
    es = e.add_subparsers(dest="what", required=True)
    x = es.add_parser("peer")
    x.add_argument("name", metavar="ADDR")
    x = es.add_parser("volume")
    x.add_argument("name")
    x.add_argument("--replica", type=int, default=1)
    x.add_argument("--force", action="store_true")
    x.add_argument("--options-json", default="{}", help='{"KEY": "VALUE", ...} set with volume set')
    x.add_argument("--root-mode", default="", help="permission bits of the volume's root (octal, e.g. 1777)")
    x.add_argument("--root-owner", default="", help="UID:GID of the volume's root (with --root-mode)")
    x.add_argument("bricks", nargs="+")
    x = es.add_parser("volume-option")
    x.add_argument("name")
    x.add_argument("key")
    x.add_argument("value")
    x = es.add_parser("nfs-export")
    x.add_argument("name", metavar="VOLUME[/SUBDIR]")
    x.add_argument("--path", required=True)
    x.add_argument("--clients", default="*")
    x.add_argument("--access", default="rw", choices=["rw", "ro"])
    x.add_argument("--squash", default="root_squash",
                   choices=["root_squash", "no_root_squash", "all_squash"])
    x = es.add_parser("smb-share")
    x.add_argument("name")
    x.add_argument("--volume", required=True)
    x.add_argument("--read-only", action="store_true")
    x.add_argument("--users")
    x = es.add_parser("iscsi-lun")
    x.add_argument("name")
    x.add_argument("--volume", required=True)
    x.add_argument("--size", required=True)
    x.add_argument("--thin", action="store_true")
    x = es.add_parser("iscsi-target")
    x.add_argument("name", metavar="IQN")
    x.add_argument("--lun", action="append", default=[])
    x.add_argument("--portal", action="append", default=[])
    x.add_argument("--open", action="store_true")

    x = es.add_parser("smb-user")
    x.add_argument("name")
    x = sub.add_parser("prepare-disks")
    x.add_argument("disks", nargs="*")
    x = sub.add_parser("setup-gateway")
    x.add_argument("--node", required=True)
    x.add_argument("--no-nfs", action="store_true")
    x.add_argument("--no-smb", action="store_true")
    x.add_argument("--no-iscsi", action="store_true")
    sub.add_parser("setup-ds")

    t = sub.add_parser("etcd-tls")
    ts = t.add_subparsers(dest="tls", required=True)
    x = ts.add_parser("ca")
    x.add_argument("--ip", action="append", default=[], help="an etcd member's address (server certificate SAN)")
    x = ts.add_parser("client")
    x.add_argument("name")
    ts.add_parser("install-server")
    x = ts.add_parser("install-client")
    x.add_argument("name")
    ts.add_parser("install-reclock")
    x = ts.add_parser("auth")
    x.add_argument("--endpoint", default="https://127.0.0.1:2379", help="an etcd client URL")
    x.add_argument("--user", action="append", default=[],
                   help="a node's etcd user (its certificate's CN, cairn-NODE): its own role")
    r = sub.add_parser("render")
    rs = r.add_subparsers(dest="what", required=True)
    x = rs.add_parser("firewall")
    x.add_argument("roles", nargs="+", choices=["all-in-one", "brick", "gateway", "etcd", "managed"])
    x.add_argument("--etcd-member", action="store_true")
    x = rs.add_parser("etcd-env")
    x.add_argument("--name", required=True)
    x.add_argument("--ip", required=True)
    x.add_argument("--member", action="append", default=[], metavar="NAME=IP")
    x.add_argument("--token", required=True)
    x.add_argument("--state", default="new", choices=["new", "existing"])
    x.add_argument("--tls-dir", help="etcd TLS for clients and peers (scripts/etcd-tls.sh's files)")
    x = rs.add_parser("appliance-env")
    x.add_argument("--role", required=True)
    x.add_argument("--node", required=True)
    x.add_argument("--advertise", default="auto")
    x.add_argument("--etcd", action="append", default=[])
    x.add_argument("--etcd-tls", nargs=3, metavar=("CA", "CERT", "KEY"),
                   help="the CA, client certificate and key cairnd presents to etcd")
    x = rs.add_parser("smb-conf")
    x.add_argument("--netbios", required=True)
    rs.add_parser("nfs-conf")
    return p


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    if a.cmd == "status":
        return status.main(["--json"] if a.json else [])
    if a.cmd == "firstboot":
        return firstboot.main(["--force"] if a.force else [])
    if a.cmd in ("ensure", "prepare-disks", "setup-gateway", "setup-ds", "etcd-tls"):
        extra = {}
        try:
            if a.cmd == "ensure":
                changed = _ensure(a)
            elif a.cmd == "etcd-tls":
                changed = {"ca": lambda: etcdtls.make_ca(a.ip),
                           "client": lambda: etcdtls.issue_client(a.name),
                           "install-server": etcdtls.install_server,
                           "install-client": lambda: etcdtls.install_client(a.name),
                           "install-reclock": etcdtls.install_reclock,
                           "auth": lambda: etcdtls.enable_auth(a.endpoint, a.user)}[a.tls]()
            elif a.cmd == "prepare-disks":
                changes: list = []
                extra["mounts"] = firstboot.prepare_disks(a.disks, changes)
                extra["changes"] = changes
                changed = bool(changes)
            elif a.cmd == "setup-ds":
                st = {"steps": []}
                changed = firstboot.ds_setup(st)
                extra["steps"] = st["steps"]
            else:
                cfg = config.Config(role="gateway", nfs=not a.no_nfs, smb=not a.no_smb,
                                    iscsi=not a.no_iscsi, smb_user="")
                st = {"steps": []}
                changed = firstboot.gateway_setup(cfg, a.node, st)
                extra["steps"] = st["steps"]
        except (ensure.CairnError, firstboot.StepError, etcdtls.EtcdTlsError, OSError) as e:
            print(json.dumps({"failed": True, "msg": str(e)}))
            return 1
        print(json.dumps({"changed": changed, **extra}))
        return 0
    if a.what == "firewall":
        text = render.nftables(render.firewall_ports(a.roles, a.etcd_member))
    elif a.what == "etcd-env":
        members = []
        for m in a.member:
            n, _, ip = m.partition("=")
            if not n or not ip:
                print(f"cairn-appliance render etcd-env: --member {m!r} is not NAME=IP", file=sys.stderr)
                return 2
            members.append((n, ip))
        text = render.etcd_env(a.name, a.ip, members, a.token, a.state, tls_dir=a.tls_dir)
    elif a.what == "appliance-env":
        text = render.appliance_env(a.role, a.node, a.advertise, a.etcd,
                                    etcd_tls=tuple(a.etcd_tls) if a.etcd_tls else None)
    elif a.what == "smb-conf":
        text = render.smb_conf(a.netbios)
    else:
        text = render.nfs_conf_d()
    sys.stdout.write(text)
    return 0

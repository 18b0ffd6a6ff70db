"""First boot: read the `cairn:` section of user-data, check it, and set up the node's role.

Run by cairn-firstboot.service after cloud-init's config stage. Until it has succeeded
once (DONE_FILE) it runs at every boot, so a fixed user-data or an attached disk is
picked up by a reboot. On a problem it writes what is wrong to the console, the journal,
/etc/motd and STATUS_FILE (`cairn-appliance status`), and stops: sshd is not touched, so
the node stays reachable.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import socket
import string
import subprocess
import sys
import time
from typing import Optional, Sequence

from . import config, ensure, etcdtls, facts, paths, render


class StepError(Exception):
    pass


def log(msg: str) -> None:
    print(f"cairn-firstboot: {msg}", flush=True)


def console(text: str) -> None:
    """Write TEXT to the console (the serial console on a cloud or VM image). Not to the
    journal: this carries the generated password."""
    try:
        with open(paths.CONSOLE, "a", encoding="utf-8") as c:
            c.write("\r\n" + text.replace("\n", "\r\n") + "\r\n")
    except OSError as e:
        log(f"cannot write to /dev/console: {e.strerror}")


def run(cmd: Sequence[str], what: str, timeout: int = 300, env=None,
        input_: Optional[str] = None) -> str:
    try:
        p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout,
                           check=False, env={**os.environ, **(env or {})}, input=input_)
    except FileNotFoundError:
        raise StepError(f"{what}: {cmd[0]} is not installed")
    except subprocess.TimeoutExpired:
        raise StepError(f"{what}: {' '.join(cmd)} did not finish in {timeout}s")
    if p.returncode != 0:
        err = (p.stderr.strip() or p.stdout.strip()).splitlines()[-3:]
        raise StepError(f"{what}: {' '.join(cmd)} failed (exit {p.returncode}): {' / '.join(err)}")
    return p.stdout


def write(path: str, text: str, mode: int = 0o644) -> bool:
    """Write PATH atomically; True if its content changed."""
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                os.chmod(path, mode)
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


def systemctl(*args: str) -> None:
    run(["systemctl", *args], f"systemctl {' '.join(args)}")


# --- facts of this instance --------------------------------------------------------------

def primary_addresses(advertise: Optional[str] = None) -> list[str]:
    """Global unicast addresses, the one of the default route first; ADVERTISE (the node's
    cairn.address, `auto` or None for none) before them all. The default route's address
    is the one to show only when nothing is advertised: behind NAT (qemu's user network, a
    cloud's private address) it is not what other nodes and clients reach."""
    addrs = [advertise] if advertise and advertise != "auto" else []
    try:
        out = run(["ip", "-j", "-4", "route", "get", "192.0.2.1"], "route lookup", 10)
        src = json.loads(out)[0].get("prefsrc")
        if src and src not in addrs:
            addrs.append(src)
    except (StepError, ValueError, IndexError):
        pass
    try:
        for link in json.loads(run(["ip", "-j", "addr", "show", "scope", "global"], "addresses", 10)):
            for a in link.get("addr_info", []):
                if a.get("local") and a["local"] not in addrs and not a.get("deprecated"):
                    addrs.append(a["local"])
    except (StepError, ValueError):
        pass
    return addrs


def blank_disks() -> list[str]:
    """Whole disks with no partitions, no file system and nothing mounted, not read-only,
    at least 1 GiB: the data disks an all-in-one node takes when user-data names none."""
    try:
        out = run(["lsblk", "-J", "-b", "-o", "NAME,TYPE,FSTYPE,RO,SIZE,MOUNTPOINT"], "lsblk", 30)
        devs = json.loads(out)["blockdevices"]
    except (StepError, ValueError, KeyError):
        return []
    found = []
    for d in devs:
        if d.get("type") != "disk" or d.get("children") or d.get("fstype") or d.get("mountpoint"):
            continue
        if d.get("ro") in (True, "1", 1) or int(d.get("size") or 0) < (1 << 30):
            continue
        found.append("/dev/" + d["name"])
    return found


def etcd_server_ips(address: Optional[str], addrs: Sequence[str]) -> list[str]:
    """The addresses an all-in-one node's etcd server certificate names besides 127.0.0.1:
    cairn.address first, then this boot's global addresses (IP literals only)."""
    out: list[str] = []
    for a in ([address] if address else []) + list(addrs):
        try:
            ip = ipaddress.ip_address(a)
        except ValueError:
            continue
        if not ip.is_loopback and str(ip) not in out:
            out.append(str(ip))
    return out


# --- steps -------------------------------------------------------------------------------

def prepare_disks(disks: list[str], changes: Optional[list] = None) -> list[str]:
    """Format blank DISKS (ext4, label cairn-dataN), mount them at /srv/cairn/diskN (fstab,
    by UUID, nofail) and return the mount points. A disk that already holds a file system
    is mounted as it is, never formatted (a Cairn disk moved from another instance keeps
    its bricks). With no disks: /srv/cairn/disk0 on the root file system."""
    changes = [] if changes is None else changes
    if not disks:
        d = f"{paths.DISKS_DIR}/disk0"
        if not os.path.isdir(d):
            os.makedirs(d)
            changes.append(f"created {d}")
        return [d]
    mounts = []
    for i, dev in enumerate(disks, 1):
        mnt = f"{paths.DISKS_DIR}/disk{i}"
        fstype = ""
        if _has_signature(dev):
            fstype = run(["blkid", "-p", "-s", "TYPE", "-o", "value", dev], f"probing {dev}", 30).strip()
            if not fstype:
                raise StepError(f"data disk {dev} holds a partition table but no file system: "
                                f"name a partition in cairn.disks, or wipe it (wipefs -a {dev})")
        if not fstype:
            log(f"formatting {dev} (ext4, label cairn-data{i})")
            run(["mkfs.ext4", "-q", "-F", "-m", "0", "-L", f"cairn-data{i}", dev], f"formatting {dev}", 900)
            changes.append(f"formatted {dev}")
        uuid = run(["blkid", "-s", "UUID", "-o", "value", dev], f"UUID of {dev}", 30).strip()
        if not uuid:
            raise StepError(f"data disk {dev}: no file system UUID after formatting")
        os.makedirs(mnt, exist_ok=True)
        # nofail: a missing disk does not stop the boot (its bricks show down); cairnd
        # starts after the mount, or after the device wait gave up (slow hypervisors)
        line = (f"UUID={uuid} {mnt} auto defaults,nofail,x-systemd.device-timeout=3min,"
                "x-systemd.before=cairnd.service 0 2\n")
        with open("/etc/fstab", encoding="utf-8") as f:
            fstab = f.read()
        if f"UUID={uuid} " not in fstab:
            with open("/etc/fstab", "a", encoding="utf-8") as f:
                f.write(line)
            changes.append(f"fstab: {dev} at {mnt}")
        if subprocess.run(["mountpoint", "-q", mnt], check=False).returncode != 0:
            run(["mount", mnt], f"mounting {dev} at {mnt}", 120)
            changes.append(f"mounted {dev} at {mnt}")
        mounts.append(mnt)
    return mounts


def _has_signature(dev: str) -> bool:
    return subprocess.run(["blkid", "-p", dev], capture_output=True, check=False).returncode == 0


NODE_PEM = paths.NODE_PEM  # cairnd --state-dir (cairnd-start)


def wait_cairnd(timeout: int = 60) -> None:
    """cairnd answers: its pool list through the CLI; on a node without a CLI credential
    (a brick node or gateway that joined by token), its node certificate is there and its
    port accepts connections (it listens only once it is a member)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if ensure.cli_credential() is None:
            if not os.path.exists(NODE_PEM):
                last = f"no node certificate {NODE_PEM} yet (did it join? journalctl -u cairnd)"
            else:
                try:
                    socket.create_connection(("127.0.0.1", paths.CAIRND_PORT), timeout=3).close()
                    return
                except OSError as e:
                    last = f"port {paths.CAIRND_PORT}: {e.strerror or e}"
            time.sleep(1)
            continue
        p = ensure.cairn(["--json", "pool", "list"], check=False)
        if p.returncode == 0:
            return
        last = (p.stderr or p.stdout).strip()
        time.sleep(1)
    raise StepError(f"cairnd does not answer on 127.0.0.1:{paths.CAIRND_PORT} after {timeout}s: "
                    f"{last} (journalctl -u cairnd)")


# How long first boot waits for a volume's mount to answer. Under load (TCG, a busy host)
# cairnd can miss its 6 s lease, and its bricks then catch up before serving: a mount made
# then fails its first stat with "brick is healing" (ESTALEMAP) for a minute or more.
MOUNT_WAIT = 300


def wait_mounted(mnt: str, timeout: float = MOUNT_WAIT, answers=None) -> bool:
    """MNT is a mount point whose root answers (`mountpoint -q` stats it), waiting up to
    TIMEOUT seconds. ANSWERS (tests) replaces the check."""
    answers = answers or (lambda: subprocess.run(["mountpoint", "-q", mnt],
                                                 check=False).returncode == 0)
    deadline = time.monotonic() + timeout
    while not answers():
        if time.monotonic() >= deadline:
            return False
        time.sleep(2)
    return True


def generate_password(n: int = 20) -> str:
    alphabet = string.ascii_letters + string.digits
    # at least one of each class, for Samba policies that want it
    while True:
        p = "".join(secrets.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in p) and any(c.isupper() for c in p) and any(c.islower() for c in p):
            return p


def smb_user(user: str) -> Optional[str]:
    """Create the SMB login (a local user without shell or password) and give it a
    generated password, once; returns the password if it was generated now."""
    if subprocess.run(["id", user], capture_output=True, check=False).returncode != 0:
        run(["useradd", "-M", "-N", "-g", "users", "-s", "/usr/sbin/nologin", user], f"creating user {user}")
    cred = _read_credentials()
    if cred.get("smb_user") == user and cred.get("smb_password"):
        return None
    pw = generate_password()
    run(["smbpasswd", "-s", "-a", user], f"smbpasswd for {user}", input_=f"{pw}\n{pw}\n")
    cred.update({"smb_user": user, "smb_password": pw})
    write(paths.CREDENTIALS, "".join(f"{k}={v}\n" for k, v in cred.items()), 0o600)
    return pw


def smb_login(user: str, password: str) -> bool:
    """The SMB login USER exists (a local user without shell, and a Samba account with
    PASSWORD when it has none yet: an existing password is left alone). True if created."""
    changed = False
    if subprocess.run(["id", user], capture_output=True, check=False).returncode != 0:
        run(["useradd", "-M", "-N", "-g", "users", "-s", "/usr/sbin/nologin", user], f"creating user {user}")
        changed = True
    if subprocess.run(["pdbedit", "-L", "-u", user], capture_output=True, check=False).returncode != 0:
        run(["smbpasswd", "-s", "-a", user], f"smbpasswd for {user}", input_=f"{password}\n{password}\n")
        changed = True
    return changed


def _read_credentials() -> dict:
    try:
        with open(paths.CREDENTIALS, encoding="utf-8") as f:
            return render.parse_env(f.read())
    except OSError:
        return {}


def setup(cfg: config.Config, st: dict) -> None:
    node = cfg.node_name or socket.gethostname().split(".")[0]
    if cfg.node_name and socket.gethostname() != cfg.node_name:
        run(["hostnamectl", "set-hostname", cfg.node_name], "setting the host name")
    addrs = primary_addresses(cfg.address)
    st.update(node=node, addresses=addrs)
    step = st["steps"].append

    # firewall first: services started below are never open beyond their ports
    ports = render.firewall_ports([cfg.role])
    if write(paths.NFTABLES, render.nftables(ports), 0o755) or not _active("nftables.service"):
        systemctl("enable", "nftables.service")
        systemctl("restart", "nftables.service")
    step(f"firewall: tcp {ports['tcp']} udp {ports['udp']}")

    if cfg.role == "managed":
        step("role managed: nothing else to do here; ansible/site.yml configures the node")
        return

    # etcd over TLS with client certificates (etcdtls.py): an all-in-one node makes the
    # etcd CA and its own certificates; a node joining an https etcd gets its client
    # certificate in the enrollment answer (cairnd --join writes etcdtls.CLIENT).
    etcd = ["https://127.0.0.1:2379"] if cfg.runs_etcd else cfg.etcd
    etcd_tls = etcdtls.CLIENT if etcdtls.uses_tls(etcd) else None
    if cfg.token:
        write(paths.TOKEN_FILE, cfg.token + "\n", 0o600)
    write(paths.APPLIANCE_ENV, render.appliance_env(cfg.role, node, cfg.address or "auto", etcd,
                                                    cfg.join, cfg.ca_cert_hash, etcd_tls,
                                                    etcdtls.MEMBER))

    if cfg.runs_etcd:
        # Served on every address, so that brick nodes and gateways can join this node by
        # user-data (cluster.etcd: https://ADDRESS:2379): the server certificate names
        # cairn.address and this boot's addresses; only certificates of this node's etcd
        # CA get in (enrollment hands one to each joining node).
        ips = etcd_server_ips(cfg.address, addrs)
        try:
            etcdtls.make_ca(ips)
            etcdtls.install_server()
            etcdtls.install_client("cairn")
        except (etcdtls.EtcdTlsError, OSError) as e:
            raise StepError(f"etcd certificates: {e}")
        write(paths.ETCD_ENV, render.etcd_env(node, ips[0] if ips else "127.0.0.1", [],
                                              secrets.token_hex(8), loopback_only=True,
                                              tls_dir=etcdtls.SERVER_PATH, serve_network=True))
        systemctl("enable", "--now", "cairn-etcd.service")
        # etcd auth on (users by certificate CN: cairn for this node's cairnd, cairn-reclock
        # for the CTDB lock helper, root with the CA); retried while etcd starts.
        deadline = time.monotonic() + 90
        while True:
            try:
                etcdtls.enable_auth("https://127.0.0.1:2379")
                break
            except etcdtls.EtcdTlsError as e:
                if time.monotonic() > deadline:
                    raise StepError(f"etcd auth: {e}")
                time.sleep(2)
        step(f"etcd: auth on (users by certificate CN: cairn, {etcdtls.RECLOCK_USER}, root)")
        if cfg.is_gateway:
            # CTDB's lock helper presents cairn-reclock (its lock key only), not cairn
            try:
                etcdtls.install_reclock()
            except (etcdtls.EtcdTlsError, OSError) as e:
                raise StepError(f"etcd: the CTDB lock helper's certificate: {e}")
            step(f"etcd: CTDB lock helper's identity {etcdtls.RECLOCK_USER} (lock key only) "
                 f"in {paths.ETCD_RECLOCK_DIR}")
        step(f"etcd: single member on https://127.0.0.1:2379 and https://"
             f"{ips[0] if ips else 'ADDRESS'}:2379 (client certificates required; "
             f"server certificate for {', '.join(['127.0.0.1', *ips])})")

    bricks_root = []
    if cfg.has_bricks:
        disks = cfg.disks if cfg.disks is not None else blank_disks()
        bricks_root = prepare_disks(disks)
        step(f"data: {', '.join(disks) or 'no data disk: a folder of the root disk'} at {', '.join(bricks_root)}")
        st["data"] = {"disks": disks, "mounts": bricks_root}

    systemctl("enable", "--now", "cairnd.service")
    wait_cairnd()
    step(f"cairnd: {node} on port {paths.CAIRND_PORT}, etcd {','.join(etcd)}")
    if etcd_tls and not cfg.runs_etcd:
        etcd_member_step(st)

    if cfg.has_bricks:
        # optional: without it pNFS clients do their I/O through the gateways (the MDS
        # leaves a DS that does not answer out of layouts), so it does not fail first boot
        try:
            ds_setup(st)
        except StepError as e:
            log(f"the pNFS data server did not start: {e}")
            step(f"nfs: the pNFS data server did not start ({e}); pNFS clients use the "
                 "gateways (journalctl -u cairn-nfs-ds; cairn-appliance setup-ds to retry)")

    if cfg.is_gateway:
        gateway_setup(cfg, node, st)

    if cfg.role == "all-in-one" and cfg.volume:
        v = cfg.volume
        bricks = []
        for i in range(v.bricks):
            root = bricks_root[i % len(bricks_root)]
            d = f"{root}/bricks/b{i + 1}"
            os.makedirs(d, exist_ok=True)
            bricks.append(f"{node}:{d}")
        # force: the bricks of a replica set share this one node
        ensure.volume(v.name, v.replica, bricks, force=True)
        systemctl("enable", "--now", f"cairn-mount@{v.name}.service")
        mnt = f"{paths.MNT_DIR}/{v.name}"
        if not wait_mounted(mnt):
            raise StepError(f"volume {v.name}: cairn-mount@{v.name} started but {mnt} is not a "
                            f"mount point that answers after {MOUNT_WAIT}s (journalctl -u "
                            f"cairn-mount@{v.name}, /var/log/cairn/mount-*.log)")
        # The volume root: open to create in for NFS clients and SMB users, sticky (users
        # cannot remove each other's entries), and owned by the anonymous user root is
        # squashed to. A Linux client with fs.protected_regular (Debian: 2) refuses root an
        # O_CREAT open of a file in a sticky world-writable directory unless the file is
        # root's or the directory owner's; a squashed root's files are 65534's, so with a
        # root-owned vol0 even its own create failed (EACCES, an empty file left behind).
        os.chown(mnt, ANON_ID, ANON_ID)
        os.chmod(mnt, 0o1777)
        step(f"volume {v.name}: replica {v.replica}, {v.bricks} bricks, mounted at {paths.MNT_DIR}/{v.name}")
        st["volume"] = v.name
        if cfg.nfs:
            ensure.nfs_export(v.name, f"/{v.name}", "*", squash="root_squash")
            step(f"nfs: export /{v.name} (clients *, root squashed)")
        if cfg.smb:
            ensure.smb_share(v.name, v.name)
            step(f"smb: share {v.name}")
        # The gateway daemons connect with their own certificate (role gateway, this
        # volume only), not admin.pem: restart those already running to load it.
        if ensure.gateway_credential(node, [v.name]):
            for u in ("cairn-nfs.service", "smbd.service", "tcmu-runner.service"):
                if _active(u):
                    systemctl("restart", u)
        step(f"gateway certificate: {node}, role gateway, volume {v.name} only ({paths.GATEWAY_PEM})")


def etcd_member_step(st: dict) -> None:
    """A node that enrolled through cluster.join got an etcd server and peer certificate for
    its address (cairnd --etcd-member-cert): installed for etcd, so that the node can be
    made an etcd member later (docs/appliance.md, "Joining an appliance by user-data")."""
    try:
        installed = etcdtls.install_member()
    except (etcdtls.EtcdTlsError, OSError) as e:
        raise StepError(f"etcd member certificate: {e}")
    if installed:
        st["steps"].append(f"etcd: server and peer certificate from the enrollment in "
                           f"{etcdtls.SERVER_PATH} (not a member: etcdctl member add makes it one)")


def gateway_setup(cfg: config.Config, node: str, st: dict) -> bool:
    """Configure and start the gateway services cfg asks for; a daemon is restarted only
    when its config changed. Returns True when something changed (Ansible runs this too,
    `cairn-appliance setup-gateway`)."""
    step = st["steps"].append
    changed = False
    if cfg.nfs:
        os.makedirs(paths.NFS_CONF_DIR, exist_ok=True)
        exports = f"{paths.NFS_CONF_DIR}/exports.conf"
        if not os.path.exists(exports):
            write(exports, "")
        statd = write(paths.NFS_CONF_D, render.nfs_conf_d())
        conf = f"{paths.NFS_DIR}/ganesha.conf"
        old = _read(conf)
        # the config as `make up` renders it (scripts/nfs-ganesha.sh), on every address
        run(["bash", "-c", f'. {paths.LIBEXEC}/scripts/common.sh && . {paths.LIBEXEC}/scripts/nfs-ganesha.sh && '
             'nfs_render_config "$@"', "render", paths.NFS_DIR, str(paths.NFS_PORT),
             str(paths.NFS_MNT_PORT), str(paths.NFS_NLM_PORT), exports, "false"],
            "rendering ganesha.conf", env={"NFS_BIND_ADDR": "0.0.0.0"})
        ganesha = _read(conf) != old
        changed |= _enable(["rpcbind.socket", "rpcbind.service"])
        if statd or not _active("rpc-statd.service"):
            systemctl("restart", "rpc-statd.service")
            changed = True
        changed |= _enable(["cairn-nfs.service", "cairn-nfs-sync.service"], restart=ganesha)
        changed |= statd or ganesha
        step("nfs: ganesha (FSAL_CAIRN) on 2049, v3 (rpcbind 111, mountd 20048, NLM 32803, statd 32765) and v4.0-4.2")
    if cfg.smb:
        os.makedirs(paths.SMB_CONF_DIR, exist_ok=True)
        shares = f"{paths.SMB_CONF_DIR}/shares.conf"
        if not os.path.exists(shares):
            write(shares, "")
        conf = write(paths.SMB_CONF, render.smb_conf(node))
        changed |= conf
        changed |= _enable(["smbd.service"], restart=conf)
        changed |= _enable(["cairn-smb-sync.service"])
        if cfg.smb_user:
            pw = smb_user(cfg.smb_user)
            changed |= pw is not None
            st["smb_user"] = cfg.smb_user
            st["_password"] = pw
            step(f"smb: smbd on 445 (vfs_cairn), user {cfg.smb_user} (password in {paths.CREDENTIALS})")
        else:
            step("smb: smbd on 445 (vfs_cairn)")
    if cfg.iscsi:
        if not os.path.isdir(paths.ISCSI_CONF_DIR):
            os.makedirs(paths.ISCSI_CONF_DIR)
            changed = True
        changed |= write(ROOT_MODULES, "# Written by cairn-appliance: LIO userspace backstores\ntarget_core_user\n")
        run(["modprobe", "target_core_user"], "loading target_core_user (LIO userspace backstores)")
        changed |= _enable(["tcmu-runner.service", "cairn-iscsi-sync.service"])
        step("iscsi: LIO with tcmu-runner (handler_cairn) ready; portal port 3260")
    return changed


DS_UNITS = ["cairn-nfs-ds-bus.service", "cairn-nfs-ds.service", "cairn-nfs-ds-sync.service"]


def ds_files(bind: str = "0.0.0.0", plugins: str = "") -> bool:
    """Write the pNFS data server's files: its ganesha.conf (scripts/nfs-ganesha.sh's
    nfs_render_ds_config, as `make up`'s DS: NFSv4.1+ only, PNFS_DS, on BIND and port
    NFS_DS_PORT, including the DS blocks `cairn nfs sync --ds` writes), its private bus's
    config and the units' env. PLUGINS: Ganesha's FSAL dir (tests). True if one changed."""
    os.makedirs(paths.NFS_DS_CONF_DIR, exist_ok=True)
    exports = f"{paths.NFS_DS_CONF_DIR}/exports.conf"
    changed = False
    if not os.path.exists(exports):
        changed |= write(exports, "")
    changed |= write(f"{paths.NFS_DS_DIR}/dbus.conf", render.nfs_ds_bus_conf())
    changed |= write(paths.NFS_DS_ENV, render.nfs_ds_env())
    conf = f"{paths.NFS_DS_DIR}/ganesha.conf"
    old = _read(conf)
    run(["bash", "-c", f'. {paths.LIBEXEC}/scripts/common.sh && . {paths.LIBEXEC}/scripts/nfs-ganesha.sh && '
         'nfs_render_ds_config "$@"', "render", paths.NFS_DS_DIR, str(paths.NFS_DS_PORT), exports,
         plugins], "rendering the pNFS data server's ganesha.conf", env={"NFS_BIND_ADDR": bind})
    return changed or _read(conf) != old


def ds_setup(st: dict) -> bool:
    """A node with bricks runs a pNFS data server: a Ganesha with FSAL_CAIRN in DS mode
    on port NFS_DS_PORT (cairn-nfs-ds), its private bus (cairn-nfs-ds-bus) and
    `cairn nfs sync --watch --ds` (cairn-nfs-ds-sync), which gives it a DS block of every
    pNFS export of the config store. A gateway's `cairn nfs export add --pnfs` then
    names it in layouts without --ds-addrs (FSAL_CAIRN's default: the node's cairnd host,
    port NFS_DS_PORT). Returns True when something changed (Ansible's brick role runs
    this too, `cairn-appliance setup-ds`)."""
    changed = ds_files()
    changed |= _enable(DS_UNITS, restart=changed)
    st["steps"].append(f"nfs: pNFS data server (Ganesha, FSAL_CAIRN DS mode) on {paths.NFS_DS_PORT}, "
                       "serving every pNFS export (cairn nfs sync --ds)")
    return changed


ROOT_MODULES = paths.ROOT + "/etc/modules-load.d/cairn-iscsi.conf"
# NFS's anonymous uid and gid (`cairn nfs export add` renders Anonymous_Uid/Gid 65534)
ANON_ID = 65534


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _active(unit: str) -> bool:
    return subprocess.run(["systemctl", "is-active", "--quiet", unit], check=False).returncode == 0


def _enable(units: list[str], restart: bool = False) -> bool:
    """Enable and start UNITS (restart them if RESTART); True if any was not running."""
    changed = False
    for u in units:
        enabled = subprocess.run(["systemctl", "is-enabled", "--quiet", u], check=False).returncode == 0
        if not enabled:
            systemctl("enable", u)
            changed = True
        if restart:
            systemctl("restart", u)
            changed = True
        elif not _active(u):
            systemctl("start", u)
            changed = True
    return changed


def finish(cfg: config.Config, st: dict) -> None:
    pw = st.pop("_password", None)
    services = {"nfs": cfg.nfs and cfg.is_gateway, "smb": cfg.smb and cfg.is_gateway,
                "iscsi": cfg.iscsi and cfg.is_gateway}
    if cfg.role == "managed":
        text = f"Cairn appliance {st['node']}: waiting for ansible/site.yml (role managed)\n"
        con = text
    else:
        if pw is None and services["smb"]:
            pw = _read_credentials().get("smb_password")
        text = render.connect_text(cfg.role, st["node"], st["addresses"], st.get("volume"),
                                   services, cfg.smb_user, None)
        con = render.connect_text(cfg.role, st["node"], st["addresses"], st.get("volume"),
                                  services, cfg.smb_user, pw)
    write(paths.MOTD, text)
    console("=" * 72 + "\n" + con + "=" * 72)
    for line in text.splitlines():
        log(line)


def fail(st: dict, problems: list[str]) -> int:
    st["ok"] = False
    st["errors"] = problems
    msg = ["Cairn first boot FAILED; the node is reachable over SSH but not configured:"]
    msg += [f"  - {p}" for p in problems]
    msg += ["Fix the user-data (cairn: section, docs/appliance.md) or the machine, then reboot",
            "or run: systemctl restart cairn-firstboot. Details: cairn-appliance status"]
    text = "\n".join(msg) + "\n"
    try:
        write(paths.MOTD, text)
    except OSError:
        pass
    console("!" * 72 + "\n" + text + "!" * 72)
    for line in msg:
        log(line)
    return 1


def save(st: dict) -> None:
    st.pop("_password", None)
    st["finished"] = int(time.time())
    write(paths.STATUS_FILE, json.dumps(st, indent=2) + "\n", 0o600)


def main(argv: Sequence[str] = ()) -> int:
    os.makedirs(paths.STATE_DIR, mode=0o700, exist_ok=True)
    if os.path.exists(paths.DONE_FILE) and "--force" not in argv:
        log(f"already configured ({paths.DONE_FILE}); --force to run again")
        return 0
    st: dict = {"started": int(time.time()), "ok": None, "errors": [], "steps": [],
                "node": socket.gethostname().split(".")[0], "addresses": []}
    try:
        try:
            cfg = config.load()
        except config.ConfigError as e:
            return fail(st, e.problems)
        st["role"] = cfg.role
        st["config"] = cfg.to_json()
        log(f"role {cfg.role} (from {cfg.source})")
        problems = facts.check_facts(cfg, facts.Probe())
        if problems:
            return fail(st, problems)
        try:
            setup(cfg, st)
        except (StepError, ensure.CairnError, OSError) as e:
            return fail(st, [str(e)])
        st["ok"] = True
        finish(cfg, st)
        with open(paths.DONE_FILE, "w", encoding="utf-8") as f:
            f.write(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
        return 0
    finally:
        save(st)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

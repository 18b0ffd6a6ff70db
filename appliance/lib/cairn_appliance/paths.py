"""Where the appliance keeps things. One place, so first boot, status, the units and the
Ansible roles agree (the roles use the same paths; see docs/appliance.md)."""

import os

ROOT = os.environ.get("CAIRN_APPLIANCE_ROOT", "")  # tests point this at a scratch tree

STATE_DIR = ROOT + "/var/lib/cairn-appliance"
STATUS_FILE = STATE_DIR + "/firstboot.json"  # role, steps, errors (root-only, no secrets)
DONE_FILE = STATE_DIR + "/firstboot.done"
CREDENTIALS = ROOT + "/root/cairn-credentials"  # generated SMB login (0600)
ETC = ROOT + "/etc/cairn"
APPLIANCE_ENV = ETC + "/appliance.env"  # CAIRN_ROLE, CAIRN_NODE, CAIRN_ADVERTISE, CAIRN_ETCD
ETCD_ENV = ETC + "/etcd.env"
TOKEN_FILE = ETC + "/join-token"
ETCD_CA_DIR = ETC + "/etcd-ca"  # the etcd CA (first node only; etcdtls.py)
ETCD_SERVER_DIR = ETC + "/etcd-server"  # an etcd member's certificate and key
ETCD_CLIENT_DIR = ETC + "/etcd-client"  # this node's etcd client certificate and key
ETCD_MEMBER_DIR = ETC + "/etcd-member"  # a joined node's etcd member certificate (enrollment)
ETCD_RECLOCK_DIR = ETC + "/etcd-reclock"  # a gateway's CTDB lock helper's (cairn-reclock)
GATEWAY_PEM = ETC + "/gateway.pem"  # the gateway daemons' own certificate (role gateway)
GATEWAY_ENV = ETC + "/gateway.env"  # CAIRN_CREDENTIALS for the gateway daemons' units
DISKS_DIR = ROOT + "/srv/cairn"  # data disks mounted at /srv/cairn/diskN; bricks below
MNT_DIR = ROOT + "/srv/cairn/mnt"  # cairn-mount@VOL mounts VOL at /srv/cairn/mnt/VOL
NFS_DIR = ROOT + "/var/lib/cairn/nfs"  # ganesha.conf and the NFSv4 recovery dir
NFS_CONF_DIR = ROOT + "/etc/ganesha/cairn"  # `cairn nfs` renders exports here
# A brick node's pNFS data server (docs/nfs.md "pNFS"): its ganesha.conf and bus config,
# the DS blocks `cairn nfs sync --ds` renders, and the env of its three units
NFS_DS_DIR = ROOT + "/var/lib/cairn/nfs-ds"
NFS_DS_CONF_DIR = ROOT + "/etc/ganesha/cairn-ds"
NFS_DS_ENV = ETC + "/nfs-ds.env"
NFS_DS_BUS = ROOT + "/run/cairn-nfs-ds/dbus.sock"  # its private DBus (cairn-nfs-ds-bus)
NODE_PEM = ROOT + "/var/lib/cairn/node/node.pem"  # cairnd's own certificate (role node)
SMB_CONF = ROOT + "/etc/samba/smb.conf"
SMB_CONF_DIR = ROOT + "/etc/samba/cairn"  # `cairn smb` renders shares.conf here
ISCSI_CONF_DIR = ROOT + "/etc/cairn/iscsi"  # exists on an iSCSI gateway
NFTABLES = ROOT + "/etc/nftables.conf"
NFS_CONF_D = ROOT + "/etc/nfs.conf.d/cairn.conf"
MOTD = ROOT + "/etc/motd"
CONSOLE = ROOT + "/dev/console"  # a plain file under a test root
# scripts/ helpers shipped by scripts/dist.sh (tests: the repository)
LIBEXEC = os.environ.get("CAIRN_APPLIANCE_LIBEXEC", "/usr/local/lib/cairn-appliance")

CAIRND_PORT = 7420
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
NFS_PORT = 2049
NFS_DS_PORT = 20490  # FSAL_CAIRN's default DS port (fsal/dservers.c), as make up's
NFS_MNT_PORT = 20048
NFS_NLM_PORT = 32803
STATD_PORT = 32765
STATD_OUT_PORT = 32766
SMB_PORT = 445
ISCSI_PORT = 3260

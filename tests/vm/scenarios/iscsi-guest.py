#!/usr/bin/env python3
"""Runs inside the guest: the iscsi scenario's own LIO objects, in one process.

usage: iscsi-guest.py CFGSTRING SIZE_BYTES IQN_FILEIO

Asks tcmu-runner over D-Bus to check the config string (targetcli's CheckConfig call:
handler_cairn's check_config) and checks that a bad string is refused; then creates the
kernel fileio LUN the user:cairn one is compared with: /backstores/fileio/flun0 in target
IQN_FILEIO on 0.0.0.0:3260, LUN 0, open to any initiator (rtslib directly: targetcli takes
~17 s per call under TCG). The user:cairn LUN and its target are `cairn iscsi sync`'s.
"""
import sys
import time

from gi.repository import Gio
from rtslib_fb import FabricModule, FileIOStorageObject, LUN, NetworkPortal, Target, TPG

cfg, size, iqn_fileio = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def handler_iface(subtype):
    bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
    last = "no such object"
    for _ in range(60):
        try:
            mgr = Gio.DBusProxy.new_sync(bus, Gio.DBusProxyFlags.NONE, None,
                                         "org.kernel.TCMUService1", "/org/kernel/TCMUService1",
                                         "org.freedesktop.DBus.ObjectManager", None)
            for path in mgr.GetManagedObjects():
                if path.rsplit("/", 1)[-1] == subtype:
                    return Gio.DBusProxy.new_sync(bus, Gio.DBusProxyFlags.NONE, None,
                                                  "org.kernel.TCMUService1", path,
                                                  "org.kernel.TCMUService1", None)
        except Exception as e:  # tcmu-runner not on the bus yet
            last = e
        time.sleep(1)
    sys.exit(f"tcmu-runner offers no handler '{subtype}' over D-Bus ({last})")


iface = handler_iface("cairn")
ok, msg = iface.CheckConfig("(s)", cfg)
if not ok:
    sys.exit(f"CheckConfig refused the good config '{cfg}': {msg}")
print(f"CheckConfig accepts {cfg}")
bad = cfg.replace("lunvol@", "nosuchvol@", 1)
ok, msg = iface.CheckConfig("(s)", bad)
if ok or "nosuchvol" not in msg:
    sys.exit(f"CheckConfig on a missing volume: ok={ok} msg={msg!r}")
print(f"CheckConfig refuses a missing volume: {msg}")

so_file = FileIOStorageObject("flun0", dev="/var/tmp/flun0.img", size=size, write_back=False)
so_file.set_attribute("emulate_tpu", "1")
so_file.set_attribute("emulate_tpws", "1")
tpg = TPG(Target(FabricModule("iscsi"), iqn_fileio), 1)
NetworkPortal(tpg, "0.0.0.0", 3260)
LUN(tpg, 0, so_file)
for k, v in (("authentication", "0"), ("demo_mode_write_protect", "0"),
             ("generate_node_acls", "1"), ("cache_dynamic_acls", "1")):
    tpg.set_attribute(k, v)
tpg.enable = True
print(f"target {iqn_fileio}: LUN 0 = fileio/flun0")

#!/usr/bin/env python3
"""Runs inside the guest: LIO configuration of the iscsi scenario in one process.

usage: iscsi-guest.py CFGSTRING SIZE_BYTES IQN_CAIRN IQN_FILEIO

Does what targetcli-fb would (targetcli takes ~17 s per call under TCG, so one rtslib
process instead): asks tcmu-runner over D-Bus to check the config string (targetcli's
CheckConfig call: handler_cairn's check_config), checks that a bad string is refused,
then creates /backstores/user:cairn/lun0 and /backstores/fileio/flun0 and two targets on
0.0.0.0:3260, one LUN 0 each, open to any initiator.
"""
import sys
import time

from gi.repository import Gio
from rtslib_fb import (FabricModule, FileIOStorageObject, LUN, NetworkPortal, Target, TPG,
                       UserBackedStorageObject)

cfg, size, iqn_cairn, iqn_fileio = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]


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
ok, msg = iface.CheckConfig("(s)", "cairn/" + cfg)
if not ok:
    sys.exit(f"CheckConfig refused the good config 'cairn/{cfg}': {msg}")
print(f"CheckConfig accepts cairn/{cfg}")
bad = cfg.replace("lunvol@", "nosuchvol@", 1)
ok, msg = iface.CheckConfig("(s)", "cairn/" + bad)
if ok or "nosuchvol" not in msg:
    sys.exit(f"CheckConfig on a missing volume: ok={ok} msg={msg!r}")
print(f"CheckConfig refuses a missing volume: {msg}")

so_cairn = UserBackedStorageObject("lun0", config="cairn/" + cfg, size=size)
so_file = FileIOStorageObject("flun0", dev="/var/tmp/flun0.img", size=size, write_back=False)
so_file.set_attribute("emulate_tpu", "1")
so_file.set_attribute("emulate_tpws", "1")
fabric = FabricModule("iscsi")
for iqn, so in ((iqn_cairn, so_cairn), (iqn_fileio, so_file)):
    tpg = TPG(Target(fabric, iqn), 1)
    NetworkPortal(tpg, "0.0.0.0", 3260)
    LUN(tpg, 0, so)
    for k, v in (("authentication", "0"), ("demo_mode_write_protect", "0"),
                 ("generate_node_acls", "1"), ("cache_dynamic_acls", "1")):
        tpg.set_attribute(k, v)
    tpg.enable = True
    print(f"target {iqn}: LUN 0 = {so.plugin}/{so.name}")

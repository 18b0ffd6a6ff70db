#!/usr/bin/env python3
"""Runs inside the guest: the iscsi-multipath scenario's second gateway, "gw2".

usage: iscsi-multipath-gw2.py IQN LUN_NAME PORTAL_IP

One guest has one LIO, so the two gateways of the scenario are two target portal groups of
one target, each with its own user:cairn storage object (its own tcmu-runner device, its
own libcairn client of the volume) and its own ALUA group. `cairn iscsi sync` made gw1's
(TPG 1 on the target's portal, storage object LUN_NAME, group gw1, tag 1); this makes
gw2's the way `cairn iscsi sync --alua-tag 2` makes them on a second gateway
(gateway/src/iscsi/plan.rs): the same config string, size and unit serial (wwn: the
initiator groups both paths into one multipath device by it), group gw2 tag 2, implicit,
active/optimized, TPG 2 on PORTAL_IP:3260, LUN 0, open to any initiator. rtslib directly:
targetcli takes ~17 s per call under TCG.
"""
import sys

from rtslib_fb import (ALUATargetPortGroup, FabricModule, LUN, NetworkPortal, RTSRoot,
                       Target, TPG, UserBackedStorageObject)

iqn, name, ip = sys.argv[1], sys.argv[2], sys.argv[3]
so1 = next((s for s in RTSRoot().storage_objects if s.plugin == "user" and s.name == name), None)
if so1 is None:
    sys.exit(f"no user:cairn storage object {name} (cairn iscsi sync made none)")
so2 = UserBackedStorageObject(f"{name}-gw2", config=so1.config, size=so1.size, wwn=so1.wwn)
gp = ALUATargetPortGroup(so2, "gw2", 2)
gp.alua_access_type = 1
gp.alua_access_state = 0
tpg = TPG(Target(FabricModule("iscsi"), iqn), 2)
NetworkPortal(tpg, ip, 3260)
lun = LUN(tpg, 0, so2)
lun.alua_tg_pt_gp_name = "gw2"
for k, v in (("authentication", "0"), ("demo_mode_write_protect", "0"),
             ("generate_node_acls", "1"), ("cache_dynamic_acls", "1")):
    tpg.set_attribute(k, v)
tpg.enable = True
print(f"gw2: {iqn} TPG 2 on {ip}:3260, LUN 0 = user:cairn/{so2.name} (wwn {so2.wwn}, config "
      f"{so2.config}), ALUA group gw2 tag 2")

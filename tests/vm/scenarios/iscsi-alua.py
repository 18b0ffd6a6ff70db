#!/usr/bin/env python3
"""ALUA as an initiator sees it, through libiscsi (the host's libiscsi7, via ctypes:
bookworm ships no sg_rtpg for userspace iSCSI and iscsi-inq prints binary designators as
empty strings).

usage: iscsi-alua.py HOST:PORT IQN LUN

Prints, one per line:
  tpgs N                 standard INQUIRY TPGS field (1 implicit, 2 explicit, 3 both)
  vpd83-tpg ID           target port group designator(s) of VPD page 0x83
  vpd83-rtp ID           relative target port designator(s) of VPD page 0x83
  rtpg ID STATE PREF     each group of REPORT TARGET PORT GROUPS (state 0 = active/optimized)
Exits 1 if a command fails.
"""
import ctypes
import sys

SCSI_CDB_MAX_SIZE = 16
SCSI_XFER_READ = 1
ISCSI_SESSION_NORMAL = 2


class ScsiData(ctypes.Structure):
    _fields_ = [("size", ctypes.c_int), ("data", ctypes.POINTER(ctypes.c_ubyte))]


class ScsiTask(ctypes.Structure):  # the head of libiscsi 1.19's struct scsi_task (x86_64)
    _fields_ = [("status", ctypes.c_int), ("cdb_size", ctypes.c_int), ("xfer_dir", ctypes.c_int),
                ("expxferlen", ctypes.c_int), ("cdb", ctypes.c_ubyte * SCSI_CDB_MAX_SIZE),
                ("residual_status", ctypes.c_int), ("residual", ctypes.c_size_t),
                ("sense", ctypes.c_ubyte * 16), ("datain", ScsiData)]
    # (struct scsi_sense is 16 bytes with gcc's bitfield packing; ctypes would make it 20)


lib = ctypes.CDLL("libiscsi.so.7")
lib.iscsi_create_context.restype = ctypes.c_void_p
lib.iscsi_create_context.argtypes = [ctypes.c_char_p]
lib.iscsi_get_error.restype = ctypes.c_char_p
lib.iscsi_get_error.argtypes = [ctypes.c_void_p]
for f in ("iscsi_set_targetname", "iscsi_full_connect_sync"):
    getattr(lib, f).argtypes = [ctypes.c_void_p, ctypes.c_char_p] + (
        [ctypes.c_int] if f == "iscsi_full_connect_sync" else [])
lib.iscsi_set_session_type.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.scsi_create_task.restype = ctypes.POINTER(ScsiTask)
lib.scsi_create_task.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
lib.iscsi_scsi_command_sync.restype = ctypes.POINTER(ScsiTask)
lib.iscsi_scsi_command_sync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ScsiTask),
                                        ctypes.c_void_p]
lib.scsi_free_scsi_task.argtypes = [ctypes.POINTER(ScsiTask)]

portal, iqn, lun = sys.argv[1], sys.argv[2], int(sys.argv[3])
ctx = lib.iscsi_create_context(b"iqn.2024-01.io.cairn.test:alua-probe")
lib.iscsi_set_targetname(ctx, iqn.encode())
lib.iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL)
if lib.iscsi_full_connect_sync(ctx, portal.encode(), lun) != 0:
    sys.exit(f"login to {iqn} at {portal}: {lib.iscsi_get_error(ctx).decode()}")


def command(cdb, alloc):
    t = lib.scsi_create_task(len(cdb), bytes(cdb), SCSI_XFER_READ, alloc)
    r = lib.iscsi_scsi_command_sync(ctx, lun, t, None)
    if not r or r.contents.status != 0:
        why = lib.iscsi_get_error(ctx).decode()
        sys.exit(f"CDB {bytes(cdb).hex()} failed: {why}")
    d = r.contents.datain
    data = bytes(d.data[:d.size]) if d.size > 0 else b""
    lib.scsi_free_scsi_task(r)
    return data


std = command([0x12, 0, 0, 0, 96, 0], 96)
print(f"tpgs {(std[5] >> 4) & 3}")

vpd = command([0x12, 1, 0x83, 0x02, 0x00, 0], 512)
end, i = 4 + int.from_bytes(vpd[2:4], "big"), 4
while i + 4 <= min(end, len(vpd)):
    kind, n = vpd[i + 1] & 0x0f, vpd[i + 3]
    body = vpd[i + 4:i + 4 + n]
    if kind == 5:
        print(f"vpd83-tpg {int.from_bytes(body[2:4], 'big')}")
    elif kind == 4:
        print(f"vpd83-rtp {int.from_bytes(body[2:4], 'big')}")
    i += 4 + n

rtpg = command([0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 0x04, 0, 0, 0], 1024)
end, i = 4 + int.from_bytes(rtpg[0:4], "big"), 4
while i + 8 <= min(end, len(rtpg)):
    state, pref = rtpg[i] & 0x0f, rtpg[i] >> 7
    gid, nports = int.from_bytes(rtpg[i + 2:i + 4], "big"), rtpg[i + 7]
    print(f"rtpg {gid} {state} {pref}")
    i += 8 + 4 * nports

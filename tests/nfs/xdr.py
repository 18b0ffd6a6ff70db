"""XDR and ONC RPC over TCP, by hand, for the raw NFSv4 test clients (nfsraw.py,
nfs4raw.py, nfs4deleg.py): what nfs-rs and libnfs do not expose.

Packer/Unpacker pack and read XDR (RFC 4506); `call_header` is an RPC CALL with AUTH_SYS
(RFC 5531); `send_record`/`recv_record` frame a message with TCP record marking. Stdlib
only; nothing here is specific to NFS or Cairn.
"""

import struct


class Packer:
    def __init__(self):
        self.b = bytearray()

    def u32(self, v):
        self.b += struct.pack(">I", v)
        return self

    def u64(self, v):
        self.b += struct.pack(">Q", v)
        return self

    def fixed(self, data):
        self.b += data + b"\0" * (-len(data) % 4)
        return self

    def opaque(self, data):
        if isinstance(data, str):
            data = data.encode()
        return self.u32(len(data)).fixed(data)


class Unpacker:
    def __init__(self, data):
        self.d, self.p = data, 0

    def u32(self):
        v, = struct.unpack_from(">I", self.d, self.p)
        self.p += 4
        return v

    def u64(self):
        v, = struct.unpack_from(">Q", self.d, self.p)
        self.p += 8
        return v

    def fixed(self, n):
        v = self.d[self.p:self.p + n]
        self.p += n + (-n % 4)
        return bytes(v)

    def opaque(self):
        return self.fixed(self.u32())

    def bitmap(self):
        return [self.u32() for _ in range(self.u32())]


def call_header(xid, prog, vers, proc, machine, uid=0, gid=0):
    """An RPC CALL header with AUTH_SYS (uid, gid, no groups) and a null verifier."""
    cred = Packer().u32(0).opaque(machine).u32(uid).u32(gid).u32(0)
    p = Packer().u32(xid).u32(0).u32(2).u32(prog).u32(vers).u32(proc)
    return p.u32(1).opaque(bytes(cred.b)).u32(0).u32(0)


def record(msg):
    """msg framed as one last fragment (TCP record marking)."""
    return struct.pack(">I", 0x80000000 | len(msg)) + msg


def recv_record(recv_exact):
    """One whole record, read with recv_exact(n) (which returns exactly n bytes)."""
    data = b""
    while True:
        mark, = struct.unpack(">I", recv_exact(4))
        data += recv_exact(mark & 0x7FFFFFFF)
        if mark & 0x80000000:
            return data


def accepted(u):
    """Skip an accepted reply's verifier; the accept_stat (0: SUCCESS)."""
    u.u32()
    u.opaque()
    return u.u32()

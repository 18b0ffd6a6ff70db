#!/usr/bin/env python3
"""A libcairn client that writes until told to stop (cert-rotation.sh), as a gateway does.

usage: libcairn_writer.py LIBCAIRN SERVERS VOLUME CREDENTIALS DIR ACKED STOP

Mounts VOLUME through libcairn with the credentials file CREDENTIALS (the
`cairn_options_t.credentials` option, as the FSAL, vfs_cairn and the iSCSI handler pass
theirs) and, until the file STOP exists, creates DIR/lI and writes it with
`cairn_write_sync` (durable on every live replica when it returns). A file is
acknowledged, as the line "lI SHA256" in ACKED, once both returned. The first error ends
the writer with status 1 and the error on stderr.
"""
import ctypes
import hashlib
import os
import sys


class Id(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint8 * 16)]


class Options(ctypes.Structure):
    # cairn_options_t, options version 2 (libcairn/include/cairn.h)
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("write_behind", ctypes.c_bool),
        ("write_behind_bytes", ctypes.c_size_t),
        ("cache_timeout_ms", ctypes.c_uint32),
        ("connect_timeout_ms", ctypes.c_uint32),
        ("runtime_threads", ctypes.c_uint32),
        ("client_name", ctypes.c_char_p),
        ("credentials", ctypes.c_char_p),
    ]


def main():
    lib_path, servers, volume, creds, d, acked, stop = sys.argv[1:8]
    L = ctypes.CDLL(lib_path)
    L.cairn_last_error_message.restype = ctypes.c_char_p
    L.cairn_id_root.restype = Id
    L.cairn_options_init.argtypes = [ctypes.POINTER(Options)]
    L.cairn_mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(Options), ctypes.POINTER(ctypes.c_void_p)]
    L.cairn_lookup_path.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    L.cairn_create.argtypes = [ctypes.c_void_p, ctypes.c_void_p, Id, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p]
    L.cairn_write_sync.restype = ctypes.c_ssize_t
    L.cairn_write_sync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, Id, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    L.cairn_unmount.argtypes = [ctypes.c_void_p]

    def check(r, what):
        if r < 0:
            m = L.cairn_last_error_message()
            sys.exit(f"libcairn writer: {what}: {os.strerror(-r)}: {(m or b'').decode(errors='replace')}")
        return r

    def id_of(attr):
        i = Id()
        ctypes.memmove(ctypes.byref(i), attr, 16)
        return i

    opts = Options()
    L.cairn_options_init(ctypes.byref(opts))
    opts.client_name = b"libcairn-writer"
    opts.credentials = creds.encode()
    fs = ctypes.c_void_p()
    check(L.cairn_mount(servers.encode(), volume.encode(), ctypes.byref(opts), ctypes.byref(fs)), f"mount {volume}")
    attr = ctypes.create_string_buffer(512)
    check(L.cairn_lookup_path(fs, None, d.encode(), attr), f"lookup {d}")
    dir_id = id_of(attr)
    i = 0
    with open(acked, "w") as log:
        while not os.path.exists(stop):
            i += 1
            name = f"l{i}"
            data = os.urandom(65536)
            check(L.cairn_create(fs, None, dir_id, name.encode(), 0o644, 0, attr), f"create {d}/{name}")
            f = id_of(attr)
            n = check(L.cairn_write_sync(fs, None, f, 0, data, len(data)), f"write_sync {d}/{name}")
            if n != len(data):
                sys.exit(f"libcairn writer: write_sync {d}/{name}: {n} of {len(data)} bytes")
            log.write(f"{name} {hashlib.sha256(data).hexdigest()}\n")
            log.flush()
    check(L.cairn_unmount(fs), "unmount")
    print(f"libcairn writer: {i} files", flush=True)


if __name__ == "__main__":
    main()

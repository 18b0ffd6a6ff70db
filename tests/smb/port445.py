#!/usr/bin/env python3
"""Run an SMB client that can only dial port 445 (smbcacls) against smbd on another port.

    port445.py outer SOCK PORT      host side: unix socket SOCK -> 127.0.0.1:PORT
    port445.py inner SOCK CMD...    inside `unshare -n`: 127.0.0.1:445 -> SOCK, run CMD

The inner side runs in a private network namespace, so its port 445 never clashes with
anything on the host. Exits with CMD's status (inner) or runs until killed (outer).
"""
import os
import socket
import subprocess
import sys
import threading


def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(listener, connect):
    while True:
        conn, _ = listener.accept()
        try:
            peer = connect()
        except OSError:
            conn.close()
            continue
        threading.Thread(target=pipe, args=(conn, peer), daemon=True).start()
        threading.Thread(target=pipe, args=(peer, conn), daemon=True).start()


def main():
    mode, sock_path = sys.argv[1], sys.argv[2]
    if mode == "outer":
        port = int(sys.argv[3])
        if os.path.exists(sock_path):
            os.unlink(sock_path)
        lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lst.bind(sock_path)
        lst.listen(16)
        serve(lst, lambda: socket.create_connection(("127.0.0.1", port)))
    else:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind(("127.0.0.1", 445))
        lst.listen(16)

        def unix():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sock_path)
            return s

        threading.Thread(target=serve, args=(lst, unix), daemon=True).start()
        sys.exit(subprocess.run(sys.argv[3:]).returncode)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Runs inside the guest: write 4 KiB blocks 0, 1, 2, ... to DEVICE with O_DIRECT|O_SYNC, one
at a time, until STOP_FILE exists; block i holds "blk %08d" padded with i's low byte. One line
per write on stdout: "ack I T" once the write returned, "err I T ERRNO" when it failed (the
block is retried). usage: iscsi-multipath-writer.py DEVICE STOP_FILE
"""
import mmap
import os
import sys
import time

dev, stop = sys.argv[1], sys.argv[2]
fd = os.open(dev, os.O_WRONLY | os.O_DIRECT | os.O_SYNC)
buf = mmap.mmap(-1, 4096)
i = 0
while not os.path.exists(stop):
    head = b"blk %08d\n" % i
    buf.seek(0)
    buf.write(head + bytes([i & 0xFF]) * (4096 - len(head)))
    try:
        os.pwrite(fd, buf, i * 4096)
        print(f"ack {i} {time.time():.3f}", flush=True)
        i += 1
    except OSError as e:
        print(f"err {i} {time.time():.3f} {e.errno}", flush=True)
        time.sleep(0.2)

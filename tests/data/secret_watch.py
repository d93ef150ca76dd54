"""
Watch folders with inotify and report every file that held a secret while
anyone but root could read it. Runs on a local-fleet host, as root.

    python3 secret_watch.py SECRET STOPFILE MAX_SECONDS DIR...

Every folder under each DIR is watched, those there at the start (but the
stacks', wheels' and models' trees, which hold only public files) and those
created during the run. Each file created in a watched folder is opened
at once and kept open, so its bytes can be read after it is closed, renamed or
removed; its owner and mode are read at every event. At the end, one JSON line
per offending file: path, owner uid, mode. Ends when STOPFILE exists or after
MAX_SECONDS, whichever comes first. Standard library only.
"""

import ctypes
import json
import os
import select
import stat
import struct
import sys
import time

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_TO, IN_CREATE, IN_ISDIR = 0x80, 0x100, 0x40000000
EVENT = struct.Struct("iIII")

secret, stop_file, max_seconds, *folders = sys.argv[1:]
needle = secret.encode()
libc = ctypes.CDLL(None, use_errno=True)
inotify = libc.inotify_init1(os.O_NONBLOCK)
watched: dict[int, str] = {}
opened: dict[str, int] = {}
exposed: dict[str, dict] = {}


def watch(folder):
    descriptor = libc.inotify_add_watch(inotify, folder.encode(),
                                        IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB)
    if descriptor >= 0:
        watched[descriptor] = folder


def check(path):
    if path not in opened:
        try:
            opened[path] = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return
    fd = opened[path]
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return
    readable_by_others = info.st_uid != 0 or info.st_mode & 0o077
    if readable_by_others and needle in os.pread(fd, 1 << 20, 0):
        exposed[path] = {"path": path, "uid": info.st_uid, "mode": oct(stat.S_IMODE(info.st_mode))}


PUBLIC = {"/opt/sglfleet/stacks", "/opt/sglfleet/wheelhouse", "/opt/sglfleet/models"}
for folder in folders:
    for root, subfolders, _ in os.walk(folder):
        subfolders[:] = [name for name in subfolders if os.path.join(root, name) not in PUBLIC]
        watch(root)
print("watching", flush=True)
deadline = time.monotonic() + float(max_seconds)
while time.monotonic() < deadline and not os.path.exists(stop_file):
    if not select.select([inotify], [], [], 0.2)[0]:
        continue
    buffer = os.read(inotify, 1 << 16)
    offset = 0
    while offset < len(buffer):
        descriptor, mask, _, length = EVENT.unpack_from(buffer, offset)
        name = buffer[offset + EVENT.size: offset + EVENT.size + length].rstrip(b"\0").decode()
        offset += EVENT.size + length
        path = os.path.join(watched.get(descriptor, "?"), name)
        if mask & IN_ISDIR:
            if mask & (IN_CREATE | IN_MOVED_TO):
                watch(path)
        elif name:
            check(path)
for path in list(opened):
    check(path)  # writes that raised no event we saw in time
for entry in exposed.values():
    print(json.dumps(entry))

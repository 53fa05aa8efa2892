"""Describe one node for the cluster check, as one JSON line on stdout.

Run by roles/cluster_check (ansible.builtin.script) with the node venv's interpreter, next to the deepspeed role's
probe.py (Python, torch and DeepSpeed versions, the pre-built ops), whose output preflight.py merges with this::

    <venv>/bin/python node_report.py '{"accelerator": "cpu", "paths": {"local_ssd_dir": "/opt/...", ...}}'

Output keys: ``python`` (sys.executable), ``venv`` (sys.prefix), ``nccl`` (``"2.21.5"`` or null), ``gpus``
(``[{"index": 0, "name": ..., "cc": "9.0"}]``, empty on CPU), ``pdsh`` (path or null) and ``paths``: for each named
path its nearest existing directory, file-system type (/proc/self/mountinfo), whether that type is a network file
system, free bytes, and whether a POSIX lock (fcntl.lockf) can be taken there (null when not tested). torch is
imported only on accelerator=cuda (GPUs, NCCL). With ``master_port``: ``master_port_in_use``. (The runs still
running on the node come from train/rank_status.py's finder, run as a script of its own: one finder of a run's
processes.)
"""

import fcntl
import json
import os
import shutil
import sys
import tempfile

# File-system types whose data lives on another machine (a dataset cache or build directory there is shared by
# every node and every rank). From util-linux's and the kernel's type names.
NETWORK_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "lustre", "gpfs", "beegfs", "ceph",
              "glusterfs", "fuse.glusterfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.cephfs",
              "fuse.juicefs", "pvfs2", "orangefs", "ocfs2", "gfs2"}


def mount_of(path, mountinfo="/proc/self/mountinfo"):
    """(mount point, fs type) of the mount holding ``path`` (longest mount-point prefix), or (None, None)."""
    best = (None, None)
    try:
        with open(mountinfo, encoding="utf-8") as handle:
            for line in handle:
                left, _, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                if len(fields) < 5 or not tail:
                    continue
                point = fields[4].replace("\\040", " ")
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and (best[0] is None or len(point) >= len(best[0])):
                    best = (point, tail[0])
    except OSError:
        pass
    return best


def lock_works(directory):
    """True when an exclusive POSIX lock can be taken on a new file in ``directory`` (HF datasets and filelock
    need it), False when the file system refuses (e.g. NFS without lockd: ENOLCK), None when not writable."""
    try:
        handle = tempfile.NamedTemporaryFile(dir=directory, prefix=".dsc-lock-test-")
    except OSError:
        return None
    with handle:
        try:
            fcntl.lockf(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(handle.fileno(), fcntl.LOCK_UN)
            return True
        except OSError:
            return False


def describe_path(path):
    existing = os.path.abspath(path)
    while not os.path.isdir(existing) and existing != "/":
        existing = os.path.dirname(existing)
    existing = os.path.realpath(existing)
    point, fstype = mount_of(existing)
    stat = os.statvfs(existing)
    return {"path": path, "exists": os.path.isdir(path), "checked": existing, "mount": point, "fs": fstype,
            "network": fstype in NETWORK_FS, "free_bytes": stat.f_bavail * stat.f_frsize,
            "locks": lock_works(existing)}


def gpus_and_nccl():
    try:
        import torch  # only on GPU nodes: importing torch takes seconds
    except ImportError:
        return [], None
    if not torch.cuda.is_available():
        return [], None
    gpus = []
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        gpus.append({"index": index, "name": torch.cuda.get_device_name(index), "cc": "%d.%d" % (major, minor)})
    nccl = torch.cuda.nccl.version()
    return gpus, ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else str(nccl)


def port_in_use(port):
    """True when a TCP listener holds ``port`` on this node (binding it fails with EADDRINUSE). SO_REUSEADDR as
    torch's TCPStore sets it: connections of an ended run in TIME_WAIT do not count, a listener does."""
    import errno
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", int(port)))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def main():
    request = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    report = {
        "python": sys.executable,
        "venv": sys.prefix,
        "nccl": None,
        "gpus": [],
        "pdsh": shutil.which("pdsh"),
        "paths": {name: describe_path(path) for name, path in sorted((request.get("paths") or {}).items())},
    }
    if request.get("accelerator") == "cuda":
        report["gpus"], report["nccl"] = gpus_and_nccl()
    if request.get("master_port"):
        report["master_port_in_use"] = port_in_use(request["master_port"])
    print(json.dumps(report))


if __name__ == "__main__":
    main()

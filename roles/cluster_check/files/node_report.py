"""Describe one node for the cluster check, as one JSON line on stdout.

Run by roles/cluster_check (ansible.builtin.script) with the node venv's interpreter::

    <venv>/bin/python node_report.py '{"accelerator": "cpu", "paths": {"local_ssd_dir": "/opt/...", ...}}'

Output keys: ``python`` (sys.executable), ``venv`` (sys.prefix), ``python_version``, ``torch``, ``torch_cuda``,
``nccl`` (``"2.21.5"`` or null), ``deepspeed``, ``accelerator_name`` and ``ops`` (what DeepSpeed's setup.py
pre-built, from ``git_version_info_installed.py``: the list ``ds_report`` prints as installed), ``gpus``
(``[{"index": 0, "name": ..., "cc": "9.0"}]``, empty on CPU), ``pdsh`` (path or null) and ``paths``: for each
named path its nearest existing directory, file-system type (/proc/self/mountinfo), whether that type is a network
file system, free bytes, and whether a POSIX lock (fcntl.lockf) can be taken there (null when not tested).
torch is imported only on accelerator=cuda (GPUs, NCCL); versions are read from package metadata otherwise.
"""

import fcntl
import importlib.metadata
import importlib.util
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


def dist_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def module_assignments(path):
    namespace = {}
    try:
        with open(path, encoding="utf-8") as handle:
            exec(compile(handle.read(), path, "exec"), namespace)  # noqa: S102 - files written by setup.py
    except OSError:
        return {}
    return {key: value for key, value in namespace.items() if not key.startswith("__")}


def package_dir(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


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
    import torch  # only on GPU nodes: importing torch takes seconds

    if not torch.cuda.is_available():
        return [], None
    gpus = []
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        gpus.append({"index": index, "name": torch.cuda.get_device_name(index), "cc": "%d.%d" % (major, minor)})
    nccl = torch.cuda.nccl.version()
    return gpus, ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else str(nccl)


def main():
    request = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    torch_dir = package_dir("torch")
    torch_meta = module_assignments(os.path.join(torch_dir, "version.py")) if torch_dir else {}
    ds_dir = package_dir("deepspeed")
    ds_meta = module_assignments(os.path.join(ds_dir, "git_version_info_installed.py")) if ds_dir else {}
    report = {
        "python": sys.executable,
        "venv": sys.prefix,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "torch": dist_version("torch"),
        "torch_cuda": torch_meta.get("cuda"),
        "nccl": None,
        "gpus": [],
        "deepspeed": dist_version("deepspeed"),
        "accelerator_name": ds_meta.get("accelerator_name"),
        "ops": sorted(name for name, built in (ds_meta.get("installed_ops") or {}).items() if built),
        "pdsh": shutil.which("pdsh"),
        "paths": {name: describe_path(path) for name, path in sorted((request.get("paths") or {}).items())},
    }
    if request.get("accelerator") == "cuda" and report["torch"]:
        report["gpus"], report["nccl"] = gpus_and_nccl()
    print(json.dumps(report))


if __name__ == "__main__":
    main()

#!/usr/bin/python
"""Describe one node for the cluster check: an Ansible module.

Run by roles/cluster_check's preflight with the node venv's interpreter (the task sets ``ansible_python_interpreter:
"{{ venv_dir }}/bin/python"``), next to the deepspeed role's deepspeed_probe (Python, torch and DeepSpeed versions,
the pre-built ops), whose result preflight.py merges with this one (the keys of RETURN below). On accelerator=cuda the
GPUs come from ``nvidia-smi`` and NCCL's version from ``ncclGetVersion`` of the NCCL wheel the venv's torch loads
(well under a second); torch itself (seconds: import and CUDA start) is asked only where that answer could differ from
what a rank sees (see ``fast_gpus_and_nccl``). (The runs still running on the node come from
train/node/rank_status.py's finder: one finder of a run's processes.) Only reads: ``changed`` is always false, and it
runs in check mode too. The functions import nothing outside the standard library at import (the role tests call them
with the node venv, which has no Ansible); ``main`` is the module.
"""

import fcntl
import os
import re
import shutil
import sys
import tempfile

DOCUMENTATION = r"""
---
module: node_report
short_description: Describe a node for the cluster check (venv, packages, NCCL, GPUs, pdsh, disks, file locks,
  master port)
description:
  - Describes the Python interpreter the module runs with; run it with the node venv's
    (C(ansible_python_interpreter={{ venv_dir }}/bin/python)).
  - Only reads (a lock test takes a lock on a temporary file and removes it); never reports a change; supports check
    mode.
options:
  venv:
    description: The node's C(venv_dir); fails when the interpreter is not C(<venv>/bin/python) (node_venv.py).
    type: path
  accelerator:
    description: C(cuda) reads the GPUs and NCCL's version; C(cpu) reports none.
    type: str
    choices: [cpu, cuda]
    default: cpu
  paths:
    description:
      - Named paths to describe, C({name: path}); a path is taken as given (C(~) is not expanded).
    type: dict
    default: {}
  master_port:
    description: A TCP port to test on this node (the launcher's master port on the head); 0 tests none.
    type: int
    default: 0
  lock:
    description:
      - The lock python_env recorded in the venv when site.yml installed it (C(<venv_dir>/dsc-lock.txt), one
        requirement a line); the venv's installed distributions are checked against it. C("") checks none.
    type: path
    default: ""
  health:
    description:
      - The node health readings (module_utils/node_health.py read_health), returned as C(health); {} reads none.
      - C(gpus) (bool) reads the GPUs through NVML and the kernel log's Xid errors; C(dcgm_level) (int, 0 = none) runs
        C(dcgmi diag -r N); C(env) ({name - value}) is the node environment's NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME,
        NCCL_IB_DISABLE and NCCL_IB_HCA (what the ranks will get), returned in the readings.
    type: dict
    default: {}
author: deepspeed-cluster
"""

EXAMPLES = r"""
- name: Describe this node
  node_report:
    venv: "{{ venv_dir }}"
    accelerator: cuda
    master_port: 29500
    paths:
      local_ssd_dir: "{{ local_ssd_dir }}"
  vars:
    ansible_python_interpreter: "{{ venv_dir }}/bin/python"
  register: report
"""

RETURN = r"""
python:
  description: The interpreter (sys.executable).
  returned: always
  type: str
venv:
  description: Its prefix (sys.prefix).
  returned: always
  type: str
nccl:
  description: The NCCL version torch loads, "major.minor.patch"; null on CPU or when none is found.
  returned: always
  type: str
  sample: "2.21.5"
gpus:
  description: The GPUs as torch sees them; empty on CPU.
  returned: always
  type: list
  elements: dict
  sample: [{"index": 0, "name": "NVIDIA H200", "cc": "9.0"}]
pdsh:
  description: The path of pdsh, or null.
  returned: always
  type: str
paths:
  description:
    - For each named path, C({path, exists, checked, mount, fs, network, free_bytes, locks}) -- its nearest existing
      directory (C(checked)), the mount and file-system type holding it (/proc/self/mountinfo), whether that type is a
      network file system, the free bytes there, and whether a POSIX lock (fcntl.lockf) can be taken there (null
      when it is not writable).
  returned: always
  type: dict
master_port_in_use:
  description: Whether a TCP listener holds C(master_port) on this node.
  returned: when master_port is not 0
  type: bool
packages:
  description: Every distribution installed in this Python's environment (importlib.metadata), C({name: version}),
    names normalised as PEP 503 does (lower case, runs of C(-_.) as one C(-)).
  returned: always
  type: dict
  sample: {"accelerate": "1.15.0", "torch": "2.13.0+cpu"}
lock:
  description:
    - The check against C(lock), C({file, found, pins, differs}) -- C(pins) C({name: specifier}) as the file gives
      them, C(differs) a list of C({name, expected, found}) (C(found) null for a package that is missing); C(found)
      false when the file is not there (a venv installed before site.yml recorded its lock), with no pins.
  returned: when lock is given
  type: dict
  sample: {"file": "/opt/venv/dsc-lock.txt", "found": true, "pins": {"accelerate": "==1.15.0"},
           "differs": [{"name": "accelerate", "expected": "==1.15.0", "found": null}]}
health:
  description: The node health readings (module_utils/node_health.py read_health), judged by files/health.py.
  returned: when health is not {}
  type: dict
"""

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


def nccl_version_string(code):
    """NCCL's version code (``ncclGetVersion``, the ``NCCL_VERSION_CODE`` of nccl.h) as "major.minor.patch".

    From 2.9 on the code is major*10000 + minor*100 + patch (22809 -> "2.28.9"); before, major*1000 + minor*100 +
    patch (2708 -> "2.7.8"): nccl.h's NCCL_VERSION macro.
    """
    code = int(code)
    if code >= 10000:
        return "%d.%d.%d" % (code // 10000, code % 10000 // 100, code % 100)
    return "%d.%d.%d" % (code // 1000, code % 1000 // 100, code % 100)


def library_nccl_version(path):
    """``ncclGetVersion`` of the shared library at ``path`` as "major.minor.patch"; None when it cannot be loaded,
    lacks the symbol or returns an error."""
    import ctypes

    code = ctypes.c_int()
    try:
        if ctypes.CDLL(path).ncclGetVersion(ctypes.byref(code)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return nccl_version_string(code.value)


def torch_site():
    """The directory that holds the venv's torch package (found without importing it), or None."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(os.path.abspath(list(spec.submodule_search_locations)[0]))


def fast_gpus_and_nccl():
    """The GPUs and NCCL version torch would report in this environment, without importing torch, or None when
    unsure.

    GPUs: ``nvidia-smi --query-gpu=index,name,compute_cap,mig.mode.current`` as ``[{"index": 0, "name": "NVIDIA
    H200", "cc": "9.0"}]``. NCCL: ``ncclGetVersion`` of ``nvidia/nccl/lib/libnccl.so.2`` next to torch (the
    nvidia-nccl-cu* wheel, which torch's CUDA wheels load through their RUNPATH). None (ask torch instead) when
    CUDA_VISIBLE_DEVICES is set or a GPU is in MIG mode (CUDA then shows other devices than nvidia-smi's list),
    when LD_PRELOAD or a libnccl.so* on LD_LIBRARY_PATH could load another NCCL than the wheel's, when torch ships
    its own libnccl (torch/lib), or when nvidia-smi, torch or the wheel is missing or fails. The environment is the
    one this module runs in (Ansible's), as it was for torch's answer.
    """
    import subprocess

    environ = os.environ
    if environ.get("CUDA_VISIBLE_DEVICES") is not None or environ.get("LD_PRELOAD"):
        return None
    try:
        for entry in environ.get("LD_LIBRARY_PATH", "").split(":"):
            if entry and os.path.isdir(entry) and any(name.startswith("libnccl.so") for name in os.listdir(entry)):
                return None
    except OSError:  # an entry this user cannot list
        return None
    site = torch_site()
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if site is None or smi is None or os.path.exists(os.path.join(site, "torch", "lib", "libnccl.so.2")):
        return None
    library = os.path.join(site, "nvidia", "nccl", "lib", "libnccl.so.2")
    nccl = library_nccl_version(library) if os.path.isfile(library) else None
    if nccl is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,compute_cap,mig.mode.current", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        gpus = []
        for line in out.splitlines():
            if line.strip():
                index, name, cc, mig = (field.strip() for field in line.split(","))  # a name with a comma: ValueError
                if mig == "Enabled":
                    return None
                gpus.append({"index": int(index), "name": name, "cc": cc})
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return gpus, nccl


def loaded_nccl_library(maps="/proc/self/maps"):
    """Path of the libnccl.so* this process has loaded (torch links its CUDA build against it), or None."""
    try:
        with open(maps, encoding="utf-8") as handle:
            for line in handle:  # address perms offset dev inode [path]
                fields = line.split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libnccl.so"):
                    return fields[5].strip()
    except OSError:
        pass
    return None


def gpus_and_nccl():
    """(GPUs, NCCL version) as torch sees them: ``fast_gpus_and_nccl`` where it is sure, else torch's answer. The
    NCCL version is the loaded library's (``ncclGetVersion``) on both paths; torch.cuda.nccl.version() (the headers
    torch was built with) only where NCCL is linked into torch statically."""
    fast = fast_gpus_and_nccl()
    if fast is not None:
        return fast
    try:
        import torch  # importing torch and starting CUDA take seconds
    except ImportError:
        return [], None
    if not torch.cuda.is_available():
        return [], None
    gpus = []
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        gpus.append({"index": index, "name": torch.cuda.get_device_name(index), "cc": "%d.%d" % (major, minor)})
    library = loaded_nccl_library()
    nccl = library_nccl_version(library) if library else None
    if nccl is None:
        built = torch.cuda.nccl.version()
        nccl = ".".join(str(part) for part in built) if isinstance(built, tuple) else str(built)
    return gpus, nccl


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


def canonical_name(name):
    """A distribution name as PEP 503 normalises it: lower case, each run of ``-``, ``_`` and ``.`` one ``-``
    (``huggingface_hub`` and ``Huggingface-Hub`` are both ``huggingface-hub``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions():
    """{canonical name: version} of every distribution this Python imports from (importlib.metadata over sys.path;
    where a name is installed twice, the one found first, which an import loads)."""
    import importlib.metadata

    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonical_name(name), dist.version)
    return found


# "name[extras] <specifier> ; marker" of a requirements line (PEP 508, without URLs)
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;#]*)")


def read_lock(path):
    """The pins of a requirements file, {canonical name: specifier ("==1.15.0", "" for any version)}, or None when
    the file is not there. Blank lines, comments and option lines (``--constraint ...``) are skipped."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return None
    pins = {}
    for line in lines:
        match = _REQUIREMENT.match(line)
        if match and not line.lstrip().startswith(("#", "-")):
            pins[canonical_name(match.group(1))] = match.group(2).replace(" ", "")
    return pins


def satisfies(version, specifier):
    """Whether ``version`` (a string) meets ``specifier`` ("==1.15.0", ">=0.2,<1", "" for any): PEP 440 through
    ``packaging`` (in every node venv: the lock pins it) where it imports, else an exact ``==`` string compare."""
    if not specifier:
        return True
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return specifier.startswith("==") and specifier[2:] == version
    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return specifier.startswith("==") and specifier[2:] == version


def check_lock(path, packages):
    """``packages`` ({canonical name: version}, installed_distributions()) against the lock at ``path``: the
    ``lock`` return key, {file, found, pins, differs}; ``differs`` lists {name, expected, found} in the file's
    order, ``found`` None for a package that is not installed."""
    pins = read_lock(path)
    if pins is None:
        return {"file": path, "found": False, "pins": {}, "differs": []}
    differs = [{"name": name, "expected": spec, "found": packages.get(name)}
               for name, spec in pins.items()
               if name not in packages or not satisfies(packages[name], spec)]
    return {"file": path, "found": True, "pins": pins, "differs": differs}


class PathError(Exception):
    """A named path cannot be described (a broken mount: ESTALE, EIO): the module's failure message."""


def node_report(accelerator="cpu", paths=None, master_port=0, lock=""):
    """This node's description: the keys of RETURN. ``paths``: {name: path}; ``master_port``: 0 for none;
    ``lock``: the venv's lock file ("" for none). Raises PathError (what, where, fix) when a path's file system
    cannot be read."""
    described = {}
    for name, path in sorted((paths or {}).items()):
        try:
            described[name] = describe_path(path)
        except OSError as exc:
            raise PathError("%s %s cannot be described on this node (%s: %s); repair that mount, or point the "
                            "inventory's local_ssd_dir (node_env's caches under it) at a node-local disk"
                            % (name, path, exc.filename, exc.strerror or exc)) from exc
    report = {
        "python": sys.executable,
        "venv": sys.prefix,
        "nccl": None,
        "gpus": [],
        "pdsh": shutil.which("pdsh"),
        "paths": described,
        "packages": installed_distributions(),
    }
    if lock:
        report["lock"] = check_lock(lock, report["packages"])
    if accelerator == "cuda":
        report["gpus"], report["nccl"] = gpus_and_nccl()
    if master_port:
        report["master_port_in_use"] = port_in_use(master_port)
    return report


def main():
    # imported here: the role tests import this file's functions with the node venv's Python, which has no Ansible
    from ansible.module_utils.basic import AnsibleModule
    from ansible.module_utils.node_venv import VENV_OPTION, refuse_other_python

    module = AnsibleModule(argument_spec={"venv": VENV_OPTION,
                                          "accelerator": {"type": "str", "choices": ["cpu", "cuda"], "default": "cpu"},
                                          "paths": {"type": "dict", "default": {}},
                                          "master_port": {"type": "int", "default": 0},
                                          "lock": {"type": "path", "default": ""},
                                          "health": {"type": "dict", "default": {}}},
                           supports_check_mode=True)
    refuse_other_python(module, "node_report")
    try:
        report = node_report(module.params["accelerator"], module.params["paths"], module.params["master_port"],
                             module.params["lock"])
    except PathError as exc:
        module.fail_json(msg=str(exc))
    health = module.params["health"]
    if health:
        from ansible.module_utils.node_health import read_health

        env = {name: str(value) for name, value in (health.get("env") or {}).items() if value not in (None, "")}
        report["health"] = read_health(gpus=bool(health.get("gpus")), dcgm_level=int(health.get("dcgm_level") or 0),
                                       environ=env)
    module.exit_json(changed=False, **report)


if __name__ == "__main__":
    main()

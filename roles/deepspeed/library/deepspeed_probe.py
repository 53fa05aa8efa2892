#!/usr/bin/python
"""Describe a node's venv for the deepspeed role (and cluster_check's preflight): an Ansible module.

Run with the venv's interpreter (the task sets ``ansible_python_interpreter: "{{ venv_dir }}/bin/python"``): it
describes the Python it runs in. Reads versions from files instead of importing torch or deepspeed, so it takes well
under a second. Only reads: ``changed`` is always false, and it runs in check mode too. The functions import nothing
outside the standard library (the role tests call them with the node venv, which has no Ansible); ``main`` is the
module.
"""

import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import sys

DOCUMENTATION = r"""
---
module: deepspeed_probe
short_description: Describe the node venv's Python, CPU, torch and installed DeepSpeed
description:
  - Describes the Python interpreter the module runs with; run it with the node venv's
    (C(ansible_python_interpreter={{ venv_dir }}/bin/python)).
  - Reads torch's and DeepSpeed's versions and DeepSpeed's pre-built ops from the files their setup wrote, without
    importing either (well under a second).
  - Only reads; never reports a change; supports check mode.
options:
  venv:
    description: The node's C(venv_dir); fails when the interpreter is not C(<venv>/bin/python) (node_venv.py).
    type: path
  marker:
    description:
      - The file in which the deepspeed role records the build key of the wheel it installed. Its content is returned
        as C(marker); null when the file is missing or unreadable, or when no marker is given.
    type: path
    required: false
author: deepspeed-cluster
"""

EXAMPLES = r"""
- name: Probe the venv
  deepspeed_probe:
    venv: "{{ venv_dir }}"
    marker: "{{ venv_dir }}/.dsc-deepspeed-build-key"
  vars:
    ansible_python_interpreter: "{{ venv_dir }}/bin/python"
  register: probe
"""

RETURN = r"""
python_version:
  description: The interpreter's version.
  returned: always
  type: str
  sample: "3.11.2"
python_tag:
  description: The wheel tag of the interpreter.
  returned: always
  type: str
  sample: cp311
machine:
  description: platform.machine().
  returned: always
  type: str
  sample: x86_64
cpu:
  description:
    - The CPU's model, its widest SIMD (avx512, avx2, scalar; sve, neon; native elsewhere) and a fingerprint of the
      machine, model and flags (DeepSpeed compiles its CPU ops with -march=native, so a wheel is tied to it).
  returned: always
  type: dict
  sample: {"model": "AMD EPYC 7B13", "simd": "avx2", "fingerprint": "1a2b3c4d"}
torch:
  description: torch's version and the CUDA version it was built with (null on a CPU build); null without torch.
  returned: always
  type: dict
  sample: {"version": "2.13.0+cpu", "cuda": null}
deepspeed:
  description:
    - The installed DeepSpeed's version, its pre-built ops (sorted), the accelerator and the torch it was built for;
      null without DeepSpeed.
  returned: always
  type: dict
  sample: {"version": "0.19.8", "installed_ops": ["cpu_adam"], "accelerator_name": "cpu", "torch_info": {}}
marker:
  description: The marker file's content, stripped; null when there is none.
  returned: always
  type: str
"""


class ProbeError(Exception):
    """A file the probe must read is broken: the module's failure message (what, where, how to fix)."""


def module_assignments(path):
    """Top-level assignments of a small generated module (torch/version.py, deepspeed's git_version_info);
    {} when the file is missing. Raises ProbeError when it exists but does not run."""
    namespace = {}
    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
    except OSError:
        return {}
    try:
        exec(compile(source, path, "exec"), namespace)  # noqa: S102 - files written by setup.py
    except Exception as exc:  # noqa: BLE001 - any error of a broken generated file
        raise ProbeError("%s does not run (%s: %s), in the venv of %s; reinstall its package there (site.yml: "
                         "python_env installs torch, the deepspeed role DeepSpeed)"
                         % (path, type(exc).__name__, exc, sys.executable)) from exc
    return {key: value for key, value in namespace.items() if not key.startswith("__")}


def package_dir(name):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def dist_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu():
    """CPU identity: DeepSpeed compiles its CPU ops with -march=native, so the binary is tied to it."""
    first = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    if first:
                        break
                    continue
                key, _, value = line.partition(":")
                first[key.strip().lower()] = value.strip()
    except OSError:
        pass
    flags = set((first.get("flags") or first.get("features") or "").split())
    model = first.get("model name") or first.get("cpu") or ""
    identity = "|".join([
        platform.machine(), model, first.get("cpu implementer", ""), first.get("cpu part", ""), " ".join(sorted(flags))
    ])
    machine = platform.machine()
    if machine == "x86_64":
        simd = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "scalar"
    elif machine == "aarch64":
        simd = "sve" if "sve" in flags else "neon"
    else:
        simd = "native"
    return {"model": model, "simd": simd, "fingerprint": hashlib.sha256(identity.encode()).hexdigest()[:8]}


def torch_info():
    root = package_dir("torch")
    if root is None:
        return None
    version = module_assignments(os.path.join(root, "version.py"))
    return {"version": dist_version("torch") or version.get("__version__"), "cuda": version.get("cuda")}


def deepspeed_info():
    root = package_dir("deepspeed")
    version = dist_version("deepspeed")
    if root is None or version is None:
        return None
    info = module_assignments(os.path.join(root, "git_version_info_installed.py"))
    ops = info.get("installed_ops") or {}
    return {
        "version": version,
        "installed_ops": sorted(name for name, built in ops.items() if built),
        "accelerator_name": info.get("accelerator_name"),
        "torch_info": info.get("torch_info"),
    }


def probe(marker=None):
    """This interpreter's description: the keys of RETURN. ``marker``: the build-key file's path, or None."""
    try:
        with open(marker or "", encoding="utf-8") as handle:
            marker_key = handle.read().strip()
    except OSError:
        marker_key = None
    return {
        "python_version": platform.python_version(),
        "python_tag": "cp%d%d" % sys.version_info[:2],
        "machine": platform.machine(),
        "cpu": cpu(),
        "torch": torch_info(),
        "deepspeed": deepspeed_info(),
        "marker": marker_key,
    }


def main():
    # imported here: the role tests import this file's functions with the node venv's Python, which has no Ansible
    from ansible.module_utils.basic import AnsibleModule
    from ansible.module_utils.node_venv import VENV_OPTION, refuse_other_python

    module = AnsibleModule(argument_spec={"venv": VENV_OPTION, "marker": {"type": "path", "required": False}},
                           supports_check_mode=True)
    refuse_other_python(module, "deepspeed_probe")
    try:
        result = probe(module.params["marker"])
    except ProbeError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

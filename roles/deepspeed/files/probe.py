"""Describe this node's venv for the deepspeed role, as one JSON line on stdout.

Run with the venv's interpreter: ``<venv>/bin/python probe.py <marker-file>``. Reads versions from files instead
of importing torch or deepspeed, so it takes well under a second and prints nothing else.
"""

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys


def module_assignments(path):
    """Top-level assignments of a small generated module (torch/version.py, deepspeed's git_version_info)."""
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


def main():
    marker = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        with open(marker, encoding="utf-8") as handle:
            marker_key = handle.read().strip()
    except OSError:
        marker_key = None
    print(json.dumps({
        "python_version": platform.python_version(),
        "python_tag": "cp%d%d" % sys.version_info[:2],
        "machine": platform.machine(),
        "cpu": cpu(),
        "torch": torch_info(),
        "deepspeed": deepspeed_info(),
        "marker": marker_key,
    }))


if __name__ == "__main__":
    main()

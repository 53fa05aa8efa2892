#!/usr/bin/python
"""Compile the bytecode of this interpreter's site-packages where it is missing or stale: an Ansible module.

Run by roles/python_env with the venv's interpreter (the task sets ``ansible_python_interpreter:
"{{ venv_dir }}/bin/python"``). Python reads a module's
``__pycache__/*.pyc`` when it is fresh and otherwise compiles the source on every import; a preinstalled
environment (a GPU image built with PYTHONDONTWRITEBYTECODE=1, as the H200 image is) may hold none for torch or
sympy, and each rank then spends seconds compiling them at every start (docs/benchmarks/gpu-2026-12-02c.md, its
notes). A module is stale when its .pyc is missing or its header
does not record the source's mtime and size (the check importlib makes on import); only those are compiled (with
``compileall.compile_file``, in parallel), so a second run compiles nothing and takes well under a second per
10,000 modules.

Return keys: RETURN below; ``changed`` when a module was compiled. A module that stays stale has a syntax the
interpreter refuses (e.g. Python 2 test data shipped in a wheel) or sits where this user cannot write. It writes, so
it does not run in check mode. The functions import nothing outside the standard library (the role tests import
them without Ansible); ``main`` is the module.
"""

import compileall
import concurrent.futures
import importlib.util
import multiprocessing
import os
import py_compile
import sysconfig
import time

DOCUMENTATION = r"""
---
module: venv_bytecode
short_description: Compile the missing or stale bytecode of the interpreter's site-packages
description:
  - Compiles the site-packages (purelib, platlib) of the Python interpreter the module runs with; run it with the node
    venv's (C(ansible_python_interpreter={{ venv_dir }}/bin/python)).
  - A module is stale when its .pyc is missing or does not match the source as importlib judges it; only those are
    compiled, in parallel, so a second run compiles nothing. Changed when a module was compiled.
  - Writes; does not run in check mode.
options:
  venv:
    description: The node's C(venv_dir); fails when the interpreter is not C(<venv>/bin/python) (node_venv.py).
    type: path
author: deepspeed-cluster
"""

EXAMPLES = r"""
- name: Compile the bytecode the venv lacks
  venv_bytecode:
    venv: "{{ venv_dir }}"
  vars:
    ansible_python_interpreter: "{{ venv_dir }}/bin/python"
  register: bytecode
"""

RETURN = r"""
modules:
  description: The .py files looked at.
  returned: success
  type: int
stale:
  description: Of them, those without fresh bytecode.
  returned: success
  type: int
compiled:
  description: Of those, the ones now fresh; the rest has a syntax this Python refuses or cannot be written.
  returned: success
  type: int
roots:
  description: The directories looked at.
  returned: success
  type: list
  elements: str
seconds:
  description: How long it took, to 0.1 s.
  returned: success
  type: float
"""


def sources(root):
    """Every ``.py`` file under ``root``, outside ``__pycache__``."""
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [name for name in subdirs if name != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(directory, name)


def fresh(source):
    """True when ``source`` has a .pyc that this interpreter uses as it is: the PEP 3147 path, then the PEP 552
    header judged as importlib's ``_classify_pyc`` / ``_validate_*_pyc`` do -- this Python's magic number, no flag
    bits but 0b11; a timestamp .pyc recording the source's mtime and size (both mod 2**32); a hash-based one with
    the source's hash (checked) or unchecked."""
    try:
        with open(importlib.util.cache_from_source(source), "rb") as handle:
            header = handle.read(16)
        stat = os.stat(source)
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(header[4:8], "little")
    if flags & ~0b11:
        return False
    if flags & 0b01:  # hash-based
        if not flags & 0b10:
            return True  # unchecked: importlib does not look at the source
        try:
            with open(source, "rb") as handle:
                return header[8:16] == importlib.util.source_hash(handle.read())
        except OSError:
            return False
    return (int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF)


def compile_one(source):
    """Write ``source``'s timestamp .pyc (forced: compileall's own staleness test skips the size) and return
    whether it is now fresh; False for a source this Python cannot compile or a directory it cannot write."""
    compileall.compile_file(source, quiet=2, force=True,
                            invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    return fresh(source)


def compile_stale():
    """Compile what is stale in this interpreter's site-packages; the keys of RETURN. The workers are forked, named
    so (Python 3.14 makes forkserver Linux's default): a forked worker has compile_one already, where a fresh one
    would have to import this module from Ansible's payload."""
    roots = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")} - {None})
    roots = [root for root in roots if os.path.isdir(root)]
    start = time.time()
    modules = [source for root in roots for source in sources(root)]
    stale = [source for source in modules if not fresh(source)]
    compiled = 0
    if stale:
        with concurrent.futures.ProcessPoolExecutor(max_workers=len(os.sched_getaffinity(0)),
                                                    mp_context=multiprocessing.get_context("fork")) as pool:
            compiled = sum(pool.map(compile_one, stale, chunksize=64))
    return {"modules": len(modules), "stale": len(stale), "compiled": compiled, "roots": roots,
            "seconds": round(time.time() - start, 1)}


def main():
    # imported here: the role tests import this file's functions without Ansible
    from ansible.module_utils.basic import AnsibleModule
    from ansible.module_utils.node_venv import VENV_OPTION, refuse_other_python

    module = AnsibleModule(argument_spec={"venv": VENV_OPTION}, supports_check_mode=False)
    refuse_other_python(module, "venv_bytecode")
    try:
        result = compile_stale()
    except (OSError, concurrent.futures.process.BrokenProcessPool) as exc:
        module.fail_json(msg="compiling the bytecode of %s failed (%s: %s): a compiling process could not start or "
                             "died (memory, the user's process limit); run site.yml again"
                             % (module.params["venv"] or "this Python", type(exc).__name__, exc))
    module.exit_json(changed=result["compiled"] > 0, **result)


if __name__ == "__main__":
    main()

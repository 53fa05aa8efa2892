"""Compile the bytecode of this interpreter's site-packages where it is missing or stale, as one JSON line.

Run by roles/python_env with the venv's interpreter: ``<venv>/bin/python bytecode.py``. Python reads a module's
``__pycache__/*.pyc`` when it is fresh and otherwise compiles the source on every import; a preinstalled
environment (a GPU image built with PYTHONDONTWRITEBYTECODE=1, as the H200 image is) may hold none for torch or
sympy, and each rank then spends seconds compiling them at every start (docs/benchmarks/gpu-2026-12-02c.md, its
notes). A module is stale when its .pyc is missing or its header
does not record the source's mtime and size (the check importlib makes on import); only those are compiled (with
``compileall.compile_file``, in parallel), so a second run compiles nothing and takes well under a second per
10,000 modules.

Output keys: ``modules`` (.py files looked at), ``stale`` (of them, without fresh bytecode), ``compiled`` (of those,
now fresh), ``roots`` (the directories looked at), ``seconds``. A module that stays stale has a syntax the
interpreter refuses (e.g. Python 2 test data shipped in a wheel) or sits where this user cannot write.
"""

import compileall
import concurrent.futures
import importlib.util
import json
import os
import py_compile
import sysconfig
import time


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


def main():
    roots = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")} - {None})
    roots = [root for root in roots if os.path.isdir(root)]
    start = time.time()
    modules = [source for root in roots for source in sources(root)]
    stale = [source for source in modules if not fresh(source)]
    compiled = 0
    if stale:
        with concurrent.futures.ProcessPoolExecutor(max_workers=len(os.sched_getaffinity(0))) as pool:
            compiled = sum(pool.map(compile_one, stale, chunksize=64))
    print(json.dumps({"modules": len(modules), "stale": len(stale), "compiled": compiled, "roots": roots,
                      "seconds": round(time.time() - start, 1)}))


if __name__ == "__main__":
    main()

"""roles/python_env/files/bytecode.py: run for real in a fresh venv whose site-packages has no bytecode, with
PYTHONDONTWRITEBYTECODE=1 as in the H200 image (so Python itself never writes any)."""

import json
import os
import subprocess
import sys
import venv

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "files", "bytecode.py")


@pytest.fixture
def env_without_bytecode(tmp_path):
    root = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(root)
    python = str(root / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    package = os.path.join(site, "imgpkg")
    os.makedirs(package)
    with open(os.path.join(package, "__init__.py"), "w", encoding="utf-8") as handle:
        handle.write("VALUE = 1\n")
    with open(os.path.join(package, "py2_fixture.py"), "w", encoding="utf-8") as handle:
        handle.write("print 'python 2'\n")  # wheels ship such test data: it cannot be compiled
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return python, package, env


def run(python, env):
    out = subprocess.run([python, SCRIPT], capture_output=True, text=True, env=env, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def loads_from_bytecode(python, package, env):
    """Whether `import imgpkg` reads imgpkg's .pyc (python -v says '<pyc> matches <source>')."""
    out = subprocess.run([python, "-v", "-c", "import imgpkg"], capture_output=True, text=True, env=env, check=True)
    return "matches %s" % os.path.join(package, "__init__.py") in out.stderr


def test_compiles_what_is_stale_once_and_python_then_reads_it(env_without_bytecode):
    python, package, env = env_without_bytecode
    assert not loads_from_bytecode(python, package, env)
    first = run(python, env)
    assert (first["stale"], first["compiled"]) == (2, 1) and first["modules"] >= 2
    assert loads_from_bytecode(python, package, env)
    second = run(python, env)
    assert (second["stale"], second["compiled"]) == (1, 0)  # only the file that cannot compile
    # a changed source is stale again, as importlib judges it: here only its size differs (same mtime, as when it is
    # rewritten within the second its .pyc was written)
    init = os.path.join(package, "__init__.py")
    before = os.stat(init)
    with open(init, "a", encoding="utf-8") as handle:
        handle.write("OTHER = 2\n")
    os.utime(init, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert not loads_from_bytecode(python, package, env)
    third = run(python, env)
    assert (third["stale"], third["compiled"]) == (2, 1)
    assert loads_from_bytecode(python, package, env)

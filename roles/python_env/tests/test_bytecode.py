"""roles/python_env/library/venv_bytecode.py run as the role runs it (through Ansible, with the venv's interpreter) in
a fresh venv whose site-packages has no bytecode, with PYTHONDONTWRITEBYTECODE=1 as in the H200 image (so Python
itself never writes any): changed only when it compiled something; not run in check mode."""

import os
import subprocess
import venv

import pytest

pytestmark = pytest.mark.slow  # a fresh virtual environment, ansible


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


@pytest.fixture
def run(run_module, env_without_bytecode):
    """run() -> the module's result in the fresh venv (asserted a success), changed only when it compiled."""
    python, _, env = env_without_bytecode

    def run_once():
        result = run_module("python_env", "venv_bytecode", {"venv": os.path.dirname(os.path.dirname(python))},
                            python=python, env=env)
        assert not result.get("failed") and result["changed"] == (result["compiled"] > 0), result
        return result

    return run_once


def loads_from_bytecode(python, package, env):
    """Whether `import imgpkg` reads imgpkg's .pyc (python -v says '<pyc> matches <source>')."""
    out = subprocess.run([python, "-v", "-c", "import imgpkg"], capture_output=True, text=True, env=env, check=True)
    return "matches %s" % os.path.join(package, "__init__.py") in out.stderr


def test_compiles_what_is_stale_once_and_python_then_reads_it(env_without_bytecode, run, run_module):
    python, package, env = env_without_bytecode
    assert not loads_from_bytecode(python, package, env)
    skipped = run_module("python_env", "venv_bytecode", python=python, env=env, check=True)
    assert skipped.get("skipped") is True and not loads_from_bytecode(python, package, env)  # it writes: no check mode
    first = run()
    assert (first["stale"], first["compiled"]) == (2, 1) and first["modules"] >= 2
    assert loads_from_bytecode(python, package, env)
    second = run()
    assert (second["stale"], second["compiled"]) == (1, 0)  # only the file that cannot compile
    # a changed source is stale again, as importlib judges it: here only its size differs (same mtime, as when it is
    # rewritten within the second its .pyc was written)
    init = os.path.join(package, "__init__.py")
    before = os.stat(init)
    with open(init, "a", encoding="utf-8") as handle:
        handle.write("OTHER = 2\n")
    os.utime(init, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert not loads_from_bytecode(python, package, env)
    third = run()
    assert (third["stale"], third["compiled"]) == (2, 1)
    assert loads_from_bytecode(python, package, env)

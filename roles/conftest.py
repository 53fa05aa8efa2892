"""Shared by the roles' tests (roles/*/tests): run ansible-playbook from the repository root with its roles, or one
module of a role's library/ through Ansible."""

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@pytest.fixture(scope="session")
def ansible_playbook():
    """The ansible-playbook to test with: $ANSIBLE_PLAYBOOK, the controller venv's (.venv, `make setup`), the one on
    PATH or the one next to this Python, in that order; the test is skipped when there is none."""
    found = [c for c in (os.environ.get("ANSIBLE_PLAYBOOK"), os.path.join(REPO, ".venv", "bin", "ansible-playbook"),
                         shutil.which("ansible-playbook"), os.path.join(os.path.dirname(sys.executable), "ansible-playbook"))
             if c and os.path.exists(c)]
    if not found:
        pytest.skip("ansible-playbook not found (make setup, or set ANSIBLE_PLAYBOOK)")
    return found[0]


@pytest.fixture(scope="session")
def run_playbook(ansible_playbook):
    """run_playbook(playbook, *args, env=None, timeout=300) -> subprocess.CompletedProcess (text stdout/stderr).

    ``playbook`` is relative to the repository root; ``args`` go before it (``-i``, ``-e``, ``-v``); ``env`` adds
    to the environment. ansible-playbook is the ``ansible_playbook`` fixture's."""

    def run(playbook, *args, env=None, timeout=300):
        return subprocess.run(
            [ansible_playbook, *args, os.path.join(REPO, playbook)], cwd=REPO, capture_output=True, text=True,
            timeout=timeout, env=dict(os.environ, ANSIBLE_ROLES_PATH=os.path.join(REPO, "roles"),
                                      ANSIBLE_STDOUT_CALLBACK="default", **(env or {})))

    return run


@pytest.fixture(scope="session")
def run_module(ansible_playbook):
    """run_module(role, name, args=None, python=sys.executable, check=False, env=None, timeout=300) -> dict.

    Runs the module ``name`` of ``role`` (its library/, with its module_utils/) on this machine as the role's task
    does, through Ansible (ad hoc ``ansible``, next to the ``ansible_playbook`` fixture's; local connection) with
    ``args`` (dict) and ``python`` as the interpreter (a task's ansible_python_interpreter), in check mode when
    ``check``. ``env``: the environment of ansible and so of the module (default: this process's).
    Returns the task's result as a task registers it (``changed``, ``failed``, ``msg``, the module's return keys);
    AssertionError with Ansible's output when it printed none."""
    ansible = os.path.join(os.path.dirname(ansible_playbook), "ansible")

    def run(role, name, args=None, python=sys.executable, check=False, env=None, timeout=300):
        role_dir = os.path.join(REPO, "roles", role)
        argv = [ansible, "localhost", "-i", "localhost,", "-c", "local", "-M", os.path.join(role_dir, "library"),
                "-m", name, "-e", "ansible_python_interpreter=%s" % python]
        argv += (["-a", json.dumps(args)] if args else []) + (["--check"] if check else [])  # "-a {}": raw params
        env = dict(os.environ if env is None else env, ANSIBLE_MODULE_UTILS=os.path.join(role_dir, "module_utils"),
                   ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
        try:
            return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
        except (ValueError, LookupError):
            raise AssertionError("ansible -m %s printed no result (exit code %d):\n%s\n%s"
                                 % (name, proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])) from None

    return run

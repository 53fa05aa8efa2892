"""Shared by the roles' tests (roles/*/tests): run ansible-playbook from the repository root with its roles."""

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

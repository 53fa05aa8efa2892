"""A toolkit the inventory names (cuda_preinstalled_home) is used or refused, never silently swapped for
another one that matches cuda_version. Stand-in toolkits are directories with a bin/nvcc script printing the release
line of `nvcc --version`; the other one is found on the login PATH (a ~/.bash_profile in a HOME of the test's)."""

import json
import os
import sys

import pytest

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)

NVCC = """#!/bin/sh
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release {0}, V{0}.99"
"""


def toolkit(root, release):
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(NVCC.format(release))
    nvcc.chmod(0o755)
    return str(root)


def search(run_playbook, tmp_path, **variables):
    """Run the role's search with a CUDA 13.0 stand-in on the login PATH; (proc, the toolkit it picked or None)."""
    home = tmp_path / "home"
    if not home.exists():
        home.mkdir()
        other = toolkit(tmp_path / "cuda-13.0", "13.0")
        (home / ".bash_profile").write_text('export PATH="%s/bin:$PATH"\n' % other)
    picked = tmp_path / "picked"
    if picked.exists():
        picked.unlink()
    variables = dict({"accelerator": "cuda", "cuda_source": "preinstalled", "picked_out": str(picked),
                      "ansible_connection": "local", "ansible_python_interpreter": sys.executable}, **variables)
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    proc = run_playbook("roles/cuda/tests/preinstalled.yml", "-i", "localhost,", "-e", "@%s" % (tmp_path / "vars.json"),
                        env={"HOME": str(home)})
    return proc, (picked.read_text().strip() if picked.exists() else None)


def errors(proc):
    """Each [ERROR] message, with the lines the output wraps it onto joined (up to the next blank line)."""
    found, current = [], None
    for line in proc.stdout.splitlines() + [""]:
        if line.startswith("[ERROR]"):
            current = [line]
            found.append(current)
        elif current is not None and line.strip():
            current.append(line)
        else:
            current = None
    return [" ".join(" ".join(lines).split()) for lines in found]


def test_without_a_named_home_the_search_finds_the_matching_toolkit(run_playbook, tmp_path):
    """The stand-in on the PATH is found at all (else the next test would prove nothing)."""
    proc, picked = search(run_playbook, tmp_path, cuda_version="13.0")
    assert proc.returncode == 0, proc.stdout[-3000:]
    # ours on the PATH, or a real /usr/local/cuda-13.0 where the machine has one (it is looked at first)
    assert picked in (str(tmp_path / "cuda-13.0"), "/usr/local/cuda-13.0")


def test_a_named_toolkit_of_another_version_is_refused_not_swapped(run_playbook, tmp_path):
    named = toolkit(tmp_path / "opt" / "cuda-12.4", "12.4")
    proc, picked = search(run_playbook, tmp_path, cuda_version="13.0", cuda_preinstalled_home=named)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert picked is None  # not /.../cuda-13.0 from the PATH
    (error,) = errors(proc)
    assert ("localhost: cuda_preinstalled_home=%s holds CUDA 12.4 (%s/bin/nvcc --version), but cuda_version is 13.0; "
            "the role uses the toolkit you named or none. Set cuda_version: \"12.4\"" % (named, named)) in error
    assert "or leave cuda_preinstalled_home empty" in error


def test_a_named_toolkit_of_the_right_version_is_used(run_playbook, tmp_path):
    named = toolkit(tmp_path / "opt" / "cuda-12.4", "12.4")
    proc, picked = search(run_playbook, tmp_path, cuda_version="12.4", cuda_preinstalled_home=named)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert picked == named
    # same major, another minor: only with cuda_allow_minor_mismatch
    proc, picked = search(run_playbook, tmp_path, cuda_version="12.6", cuda_preinstalled_home=named,
                          cuda_allow_minor_mismatch=True)
    assert proc.returncode == 0 and picked == named, proc.stdout[-3000:]


def test_a_named_home_without_nvcc_is_refused(run_playbook, tmp_path):
    empty = tmp_path / "opt" / "nothing"
    empty.mkdir(parents=True)
    proc, picked = search(run_playbook, tmp_path, cuda_version="13.0", cuda_preinstalled_home=str(empty))
    assert proc.returncode != 0 and picked is None
    (error,) = errors(proc)
    assert "cuda_preinstalled_home=%s has no nvcc that reports a CUDA release" % empty in error
    assert os.path.join(str(empty), "bin", "nvcc") in error

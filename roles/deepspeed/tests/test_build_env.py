"""The deepspeed role's op build environment (vars/main.yml _deepspeed_build_env), rendered by Ansible for given
facts: what `DS_BUILD_OPS=1 pip wheel` runs with, and what the build key hashes."""

import json
import sys

import pytest

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)


def build_env(run_playbook, tmp_path, **facts):
    out = tmp_path / "env.json"
    variables = {"ansible_python_interpreter": sys.executable, "ansible_connection": "local", "env_out": str(out),
                 **facts}
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    proc = run_playbook("roles/deepspeed/tests/build_env.yml", "-i", "localhost,", "-e", "@%s" % (tmp_path / "vars.json"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.fixture
def cuda_facts():
    return {"accelerator": "cuda", "cuda_version": "11.8", "cuda_home": "/usr", "deepspeed_torch_cuda_arch_list": "8.0;9.0"}


def test_cuda_build_uses_the_host_compiler_the_cuda_role_checked(run_playbook, tmp_path, cuda_facts):
    """torch's extension build hands $CC to nvcc as -ccbin: Debian 12's CUDA 11.8 needs cuda-gcc (gcc 11)."""
    env = build_env(run_playbook, tmp_path, **cuda_facts,
                    cuda_compiler_env={"CC": "/usr/bin/cuda-gcc", "CXX": "/usr/bin/cuda-g++"})
    assert env["CC"] == "/usr/bin/cuda-gcc" and env["CXX"] == "/usr/bin/cuda-g++"
    assert env["CUDA_HOME"] == "/usr" and env["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0" and env["DS_BUILD_OPS"] == "1"
    assert env["DS_BUILD_GDS"] == "0"  # the role's CUDA switches still apply


def test_system_compiler_and_cpu_builds_set_no_compiler(run_playbook, tmp_path, cuda_facts):
    env = build_env(run_playbook, tmp_path, **cuda_facts, cuda_compiler_env={})
    assert "CC" not in env and "CXX" not in env
    env = build_env(run_playbook, tmp_path, accelerator="cpu",
                    cuda_compiler_env={"CC": "/usr/bin/cuda-gcc", "CXX": "/usr/bin/cuda-g++"})
    assert "CC" not in env and "CXX" not in env and env["DS_BUILD_CCL_COMM"] == "0"


def test_build_env_extra_wins(run_playbook, tmp_path, cuda_facts):
    env = build_env(run_playbook, tmp_path, **cuda_facts, cuda_compiler_env={"CC": "/usr/bin/cuda-gcc"},
                    deepspeed_build_env_extra={"CC": "/opt/gcc-11/bin/gcc"})
    assert env["CC"] == "/opt/gcc-11/bin/gcc"

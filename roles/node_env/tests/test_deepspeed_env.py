"""What goes into .deepspeed_env (values as given, or refused by name; never the admin's shell variables),
checked the way the DeepSpeed launcher reads it (deepspeed/launcher/runner.py splits each line on the first
'=', multinode_runner.add_export quotes the value, the pdsh runner sends `export KEY=VALUE; ...` to the remote shell)
and the way a rank then sees it (sh -c)."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SECRET = "wandb-3f9c1e77d2-not-for-logs"


def render(run_playbook, tmp_path, extra, env=None, verbosity=("-v",), **facts):
    out = tmp_path / ".deepspeed_env"
    variables = {"venv_dir": "/opt/dsc/venv", "local_ssd_dir": str(tmp_path / "ssd"), "accelerator": "cpu",
                 "node_env_deepspeed_env_path": str(out), "node_env_extra": extra,
                 "ansible_python_interpreter": sys.executable, "ansible_connection": "local", **facts}
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    proc = run_playbook("roles/node_env/tests/deepspeed_env.yml", *verbosity, "-i", "localhost,",
                        "-e", "@%s" % (tmp_path / "vars.json"), env=env)
    return proc, out


def as_ranks_see_it(path):
    """{name: value} a rank started by the pdsh runner gets from this file."""
    from deepspeed.launcher.multinode_runner import PDSHRunner

    runner = PDSHRunner.__new__(PDSHRunner)  # only the export bookkeeping, as runner.py uses it
    runner.exports = {}
    lines = path.read_text().split("\n")
    assert lines[-1] == "" and all(lines[:-1]), "a blank line or a missing final newline: %r" % lines
    for line in path.read_text().splitlines(keepends=True):
        key, val = line.split("=", maxsplit=1)  # exactly what deepspeed/launcher/runner.py does
        runner.add_export(key, val)
    exports = "".join("export {}={}; ".format(key, val) for key, val in runner.exports.items())  # PDSHRunner.get_cmd
    script = exports + "".join('printf "%%s\\0" "${%s}"; ' % key for key in runner.exports)
    values = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True,
                            env={"PATH": "/usr/bin:/bin"}).stdout.split("\0")[:-1]
    return dict(zip(runner.exports, values))


def test_case6_values_with_spaces_equals_and_parentheses_reach_the_ranks_unchanged(run_playbook, tmp_path):
    extra = {"RUN_LABEL": "bert mlm run", "EXTRA_ARGS": "a=b (c)", "NCCL_IB_DISABLE": "1", "GLOO_SOCKET_IFNAME": "eth0"}
    proc, out = render(run_playbook, tmp_path, extra)
    assert proc.returncode == 0, proc.stdout[-3000:]
    seen = as_ranks_see_it(out)
    for key, value in extra.items():
        assert seen[key] == value
    assert seen["HF_HOME"] == str(tmp_path / "ssd" / "hf")
    assert seen["PATH"].startswith("/opt/dsc/venv/bin:")


@pytest.mark.parametrize("value,why", [
    ("$HOME/x", "the value contains a double quote, backquote, backslash or $"),
    ("line one\nline two", "the value contains a newline"),
    ("windows\r", "the value contains a newline"),
    ("trailing blank line\n", "the value contains a newline"),
    ('say "hi"', "the value contains a double quote, backquote, backslash or $"),
])
def test_case6_values_the_launcher_cannot_carry_are_refused_by_name(run_playbook, tmp_path, value, why):
    proc, out = render(run_playbook, tmp_path, {"GOOD": "ok", "BAD_VALUE": value})
    assert proc.returncode != 0
    errors = [line for line in proc.stdout.splitlines() if line.startswith("[ERROR]")]
    assert len(errors) == 1 and 'Environment variable "BAD_VALUE"' in errors[0] and why in errors[0], errors
    assert not out.exists()  # nothing half-written


def test_case7_admin_shell_variables_stay_out_of_the_file_and_the_caches_stay_node_local(run_playbook, tmp_path):
    """The admin's tokens never go into .deepspeed_env: DeepSpeed's pdsh runner puts every line on the pdsh command
    line and logs it in train.log (roles/train_launch/tests/test_passthrough.py: how they reach the ranks)."""
    env = {"WANDB_API_KEY": SECRET, "WANDB_PROJECT": "bert mlm", "HF_HOME": "/shared/home/admin/hf",
           "HF_DATASETS_CACHE": "/shared/home/admin/hf/datasets", "TORCH_EXTENSIONS_DIR": "/shared/home/admin/ext",
           "TORCHINDUCTOR_CACHE_DIR": "/shared/home/admin/inductor"}
    proc, out = render(run_playbook, tmp_path, {}, env=env, verbosity=("-vvv", "--diff"))  # --diff: the file's text would show
    assert proc.returncode == 0, proc.stdout[-3000:]
    seen = as_ranks_see_it(out)
    assert "WANDB_API_KEY" not in seen and "WANDB_PROJECT" not in seen and SECRET not in out.read_text()
    # the caches stay node-local (docs/developers/architecture.md), whatever the admin's shell says
    assert seen["HF_HOME"] == str(tmp_path / "ssd" / "hf")
    assert seen["HF_DATASETS_CACHE"] == str(tmp_path / "ssd" / "hf" / "datasets")
    assert seen["TORCH_EXTENSIONS_DIR"] == str(tmp_path / "ssd" / "torch_extensions")
    # torch.compile's caches too: a later run's first step loads the kernels an earlier one compiled
    assert seen["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "ssd" / "torch_compile" / "inductor")
    assert seen["TRITON_CACHE_DIR"] == str(tmp_path / "ssd" / "torch_compile" / "triton")
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_cuda_node_ranks_get_cuda_home_and_the_host_compiler_nvcc_accepts(run_playbook, tmp_path):
    """The cuda role's facts (distro CUDA 11.8 on Debian 12): JIT op builds in a job use nvcc -ccbin $CC too."""
    compilers = {"CC": "/usr/bin/cuda-gcc", "CXX": "/usr/bin/cuda-g++"}
    proc, out = render(run_playbook, tmp_path, {}, accelerator="cuda", cuda_home="/usr/local/cuda-11.8",
                       cuda_compiler_env=compilers)
    assert proc.returncode == 0, proc.stdout[-3000:]
    seen = as_ranks_see_it(out)
    assert seen["CC"] == "/usr/bin/cuda-gcc" and seen["CXX"] == "/usr/bin/cuda-g++"
    assert seen["CUDA_HOME"] == "/usr/local/cuda-11.8"
    assert seen["PATH"].startswith("/opt/dsc/venv/bin:/usr/local/cuda-11.8/bin:")
    # a CPU node ignores the fact
    proc, out = render(run_playbook, tmp_path, {}, cuda_compiler_env=compilers)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "CC" not in as_ranks_see_it(out)


def test_train_yml_gets_the_cuda_facts_site_yml_recorded(run_playbook, tmp_path):
    """train.yml runs neither the cuda nor the deepspeed role: node_env's main entry point (site.yml) records their
    facts in <venv_dir>/dsc-cuda-facts.json and the .deepspeed_env rendering reads them back from there."""
    venv = tmp_path / "venv"
    venv.mkdir()
    facts = {"venv_dir": str(venv), "local_ssd_dir": str(tmp_path / "ssd"), "accelerator": "cuda",
             "cuda_home": "/usr", "cuda_compiler_env": {"CC": "/usr/bin/cuda-gcc", "CXX": "/usr/bin/cuda-g++"},
             "deepspeed_torch_cuda_arch_list": "8.0;9.0", "node_env_profile_path": str(tmp_path / "profile"),
             "ansible_python_interpreter": sys.executable, "ansible_connection": "local"}
    (tmp_path / "site.json").write_text(json.dumps(facts))
    proc = run_playbook("roles/node_env/tests/main.yml", "-i", "localhost,", "-e", "@%s" % (tmp_path / "site.json"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert json.loads((venv / "dsc-cuda-facts.json").read_text()) == {
        "cuda_home": "/usr", "cuda_compiler_env": {"CC": "/usr/bin/cuda-gcc", "CXX": "/usr/bin/cuda-g++"},
        "deepspeed_torch_cuda_arch_list": "8.0;9.0"}
    # as in train.yml: no cuda/deepspeed facts in memory
    proc, out = render(run_playbook, tmp_path, {}, accelerator="cuda", venv_dir=str(venv))
    assert proc.returncode == 0, proc.stdout[-3000:]
    seen = as_ranks_see_it(out)
    assert seen["CC"] == "/usr/bin/cuda-gcc" and seen["CXX"] == "/usr/bin/cuda-g++"
    assert seen["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0" and seen["CUDA_HOME"] == "/usr"
    # without the record: rendered without them, and the run says so
    (venv / "dsc-cuda-facts.json").unlink()
    proc, out = render(run_playbook, tmp_path, {}, accelerator="cuda", venv_dir=str(venv))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "CUDA_HOME" not in as_ranks_see_it(out)
    assert "dsc-cuda-facts.json is missing" in " ".join(proc.stdout.split())  # the output wraps long lines

"""The CUDA x torch matrix as provisioning uses it: every cuda_version the cuda role can install maps to a torch
build that exists or is refused before anything is installed, and a node's driver and GPUs are checked against the
chosen build.

Runs the torch_matrix role (the first step of playbooks/provision.yml) and what python_env and deepspeed derive from
its choice (tests/plan.yml), once, with ansible-playbook, for fake hosts: each carries an OS's facts and its own
``nvidia-smi`` (a script printing what the real one prints for ``--query-gpu=index,name,compute_cap,driver_version
--format=csv,noheader``) first on PATH. Nothing is installed or contacted.
"""

import json
import os
import stat
import sys

import pytest
import yaml

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

DEBIAN12 = {"distribution": "Debian", "distribution_version": "12.11", "distribution_major_version": "12",
            "os_family": "Debian", "architecture": "x86_64", "user_id": "root"}
UBUNTU2204 = dict(DEBIAN12, distribution="Ubuntu", distribution_version="22.04", distribution_major_version="22")
# nvidia-smi --query-gpu=index,name,driver_version,compute_cap --format=csv,noheader
H100 = ["0, NVIDIA H100 80GB HBM3, 580.95.05, 9.0", "1, NVIDIA H100 80GB HBM3, 580.95.05, 9.0"]
V100 = ["0, Tesla V100-SXM2-32GB, 580.95.05, 7.0"]
# a driver before R510: the compute_cap field does not exist (what nvidia-smi 470 prints, exit 2)
R470 = {"old_driver": ["0, Tesla K80, 470.256.02", "1, Tesla K80, 470.256.02"]}


def cuda_role_versions():
    """Every concrete cuda_version of the cuda role's support table (roles/cuda/vars/main.yml)."""
    with open(os.path.join(REPO, "roles", "cuda", "vars", "main.yml")) as f:
        table = yaml.safe_load(f)["_cuda_support"]
    return sorted({v for oses in table.values() for versions in oses.values() for v in versions if v != "*"},
                  key=lambda v: tuple(int(p) for p in v.split(".")))


def case(facts=DEBIAN12, gpus=H100, **hostvars):
    return dict(dict(fake_facts=facts, gpus=gpus, accelerator="cuda"), **hostvars)


CASES = {"v%s" % v.replace(".", ""): case(cuda_version=v) for v in cuda_role_versions()}
CASES.update({
    "cpu": case(gpus=None, accelerator="cpu"),
    "v100_130": case(gpus=V100, cuda_version="13.0"),
    "v100_126": case(gpus=V100, cuda_version="12.6"),
    "driver470_126": case(gpus=R470, cuda_version="12.6"),
    "driver470_118": case(gpus=R470, cuda_version="11.8"),
    "driver520_126_installs_one": case(gpus=["0, NVIDIA A100-SXM4-80GB, 520.61.05, 8.0"], cuda_version="12.6",
                                       cuda_install_driver=True),
    "driver520_126_after_install": case(gpus=["0, NVIDIA A100-SXM4-80GB, 520.61.05, 8.0"], cuda_version="12.6",
                                        cuda_install_driver=True, before_install=False),
    "driver570_130": case(gpus=["0, NVIDIA H200, 570.172.08, 9.0"], cuda_version="13.0"),
    "b200_126": case(gpus=["0, NVIDIA B200, 580.95.05, 10.0"], cuda_version="12.6"),
    "l40s_126": case(gpus=["0, NVIDIA L40S, 580.95.05, 8.9"], cuda_version="12.6"),
    "spark_130": case(gpus=["0, NVIDIA GB10, 580.95.05, 12.1"], cuda_version="13.0"),
    "mixed_130": case(gpus=H100[:1] + ["1, Tesla V100-PCIE-16GB, 580.95.05, 7.0"], cuda_version="13.0"),
    "na_fields": case(gpus=["0, NVIDIA H100 80GB HBM3, [N/A], [N/A]"], cuda_version="12.6"),
    "no_driver": case(gpus=None, cuda_version="12.6"),
    "no_driver_installs_one": case(gpus=None, cuda_version="12.6", cuda_install_driver=True),
    "no_driver_after_install": case(gpus=None, cuda_version="12.6", cuda_install_driver=True, before_install=False),
    "arm_118": case(facts=dict(DEBIAN12, architecture="aarch64"), gpus=["0, NVIDIA GH200 480GB, 580.95.05, 9.0"],
                    cuda_version="11.8"),
    "arm_126": case(facts=dict(DEBIAN12, architecture="aarch64"), gpus=["0, NVIDIA GH200 480GB, 580.95.05, 9.0"],
                    cuda_version="12.6"),
    "v132": case(cuda_version="13.2"),
    "pin_132": case(cuda_version="13.2", python_env_torch_version="2.13.0"),
    "pin_short": case(gpus=None, accelerator="cpu", python_env_torch_version="2.13"),
    "pin_label_mismatch": case(cuda_version="12.6", python_env_torch_version="2.13.0+cu130"),
    "pin_outside": case(cuda_version="12.8", python_env_torch_version="2.11.0"),
    "pin_line_other_variant": case(cuda_version="12.6", python_env_torch_version="2.7.1"),
    "pin_cuda11_line": case(cuda_version="11.8", python_env_torch_version="2.7.1"),
    "ubuntu2204": case(facts=UBUNTU2204, cuda_version="12.6"),
    "unquoted": case(cuda_version=12.6),
    "no_cuda_version": case(),
})


@pytest.fixture(scope="module")
def matrix():
    with open(os.path.join(REPO, "roles", "torch_matrix", "defaults", "main.yml")) as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def plans(tmp_path_factory, run_playbook):
    tmp = tmp_path_factory.mktemp("torch_matrix")
    hosts = {}
    for name, hostvars in CASES.items():
        hostvars = dict(hostvars)
        gpus = hostvars.pop("gpus")
        fake_bin = tmp / name
        fake_bin.mkdir()
        if gpus is not None:
            smi = fake_bin / "nvidia-smi"
            if isinstance(gpus, dict):  # an old driver: no compute_cap field
                smi.write_text("#!/bin/sh\ncase \"$*\" in *compute_cap*) echo 'Field \"compute_cap\" is not a "
                               "valid field to query.'; exit 2;; esac\ncat <<'EOF'\n%s\nEOF\n"
                               % "\n".join(gpus["old_driver"]))
            else:
                smi.write_text("#!/bin/sh\ncat <<'EOF'\n%s\nEOF\n" % "\n".join(gpus))
            smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
        hosts[name] = dict(hostvars, fake_bin=str(fake_bin), ansible_connection="local", venv_dir="/opt/test-venv")
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    out = tmp / "plans.json"
    proc = run_playbook("roles/torch_matrix/tests/plan.yml", "-i", str(tmp / "hosts.yml"), "-e", "plan_out=%s" % out,
                        "-e", "ansible_python_interpreter=%s" % sys.executable, env={"ANSIBLE_FORKS": "50"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def plan(plans, name):
    got = plans[name]
    assert "torch_matrix_plan_error" not in got, got
    return got["torch_matrix_plan"]


def error(plans, name):
    got = plans[name]
    assert "torch_matrix_plan" not in got, got
    return got["torch_matrix_plan_error"]


def test_every_cuda_version_of_the_cuda_role_installs_a_real_build_or_is_refused(plans, matrix):
    """11.8 -> the CUDA 11 line, 12.6 and 13.0 -> the current line; every other version is refused at the matrix
    step, naming what exists (the cuda role, later in the play, never installs a toolkit no torch can use)."""
    lines = matrix["torch_matrix_lines"]
    current = max(lines.values(), key=lambda l: tuple(int(p) for p in l["torch"].split(".")))
    cuda11 = next(l for l in lines.values() if "cu118" in l["variants"])
    expected = {"11.8": (cuda11, "cu118"), "12.6": (current, "cu126"), "13.0": (current, "cu130")}
    for version in cuda_role_versions():
        name = "v%s" % version.replace(".", "")
        if version in expected:
            line, variant = expected[version]
            got = plan(plans, name)
            assert got["torch_requirement"] == "torch==%s+%s" % (line["torch"], variant), got
            assert got["index_url"] == "https://download.pytorch.org/whl/%s" % variant
            assert got["packages"] == line["packages"] and got["deepspeed"] == line["deepspeed"]
            assert got["min_python"] == line["python"]
        else:
            msg = error(plans, name)
            assert ("%s: cuda_version %s has no torch build in the project's matrix" % (name, version)) in msg, msg
            assert "torch %s is built for cpu, cu126 and cu130" % current["torch"] in msg, msg
            assert "torch %s for cu118" % cuda11["torch"] in msg, msg
            assert 'Use cuda_version "12.6", "13.0" or "11.8"' in msg, msg
    assert cuda11["torch"] == "2.7.1"  # the last torch with a cu118 build (pytorch/pytorch#147383)


def test_a_refused_version_names_the_last_release_built_for_it(plans):
    msg = error(plans, "v128")
    assert "or python_env_torch_version 2.11.0 for cu128 (the newest torch release built for it" in msg, msg
    assert "python_env_torch_version 2.6.0 for cu124" in error(plans, "v124")


def test_cpu_nodes_get_the_current_line_without_a_gpu_check(plans, matrix):
    got = plan(plans, "cpu")
    assert got["torch_requirement"] == "torch==%s+cpu" % matrix["torch_matrix_lines"]["2.13"]["torch"]
    assert got["index_url"] == "https://download.pytorch.org/whl/cpu"


def test_v100_with_cu130_is_refused_suggesting_cu126(plans):
    msg = error(plans, "v100_130")
    assert "v100_130: GPU 0 Tesla V100-SXM2-32GB (compute capability 7.0) cannot run torch 2.13.0+cu130" in msg
    assert "sm_75, sm_80, sm_86, sm_90, sm_100, sm_120 + PTX 12.0" in msg
    assert 'Set cuda_version "12.6" (torch 2.13.0+cu126) or cuda_version "11.8" (torch 2.7.1+cu118) in the ' \
           'inventory for v100_130' in msg, msg
    assert plan(plans, "v100_126")["torch_requirement"] == "torch==2.13.0+cu126"


def test_only_the_gpu_that_cannot_run_it_is_named(plans):
    msg = error(plans, "mixed_130")
    assert "GPU 1 Tesla V100-PCIE-16GB" in msg and "GPU 0" not in msg


def test_binary_and_ptx_compatibility(plans):
    """sm_86 cubins run on an L40S (8.9); a GB10 (12.1) runs cu130's sm_120; a B200 (10.0) has no cu126 code."""
    plan(plans, "l40s_126")
    plan(plans, "spark_130")
    msg = error(plans, "b200_126")
    assert "GPU 0 NVIDIA B200 (compute capability 10.0) cannot run torch 2.13.0+cu126" in msg
    assert 'Set cuda_version "13.0" (torch 2.13.0+cu130) in the inventory' in msg, msg


def test_an_old_driver_is_refused_against_the_cuda_family_minimum(plans):
    """Also for a driver before R510, whose nvidia-smi cannot report compute_cap (the architecture goes unchecked)."""
    msg = error(plans, "driver470_126")
    assert "driver470_126: NVIDIA driver 470.256.02 is older than 525.60.13, the minimum for CUDA 12.x" in msg, msg
    assert "cuda_install_driver: true" in msg and 'or set cuda_version "11.8", which this driver runs' in msg, msg
    plan(plans, "driver470_118")  # 470 >= 450.80.02: CUDA 11.x runs (a K80 on an R470 driver)
    assert "570.172.08 is older than 580.65.06, the minimum for CUDA 13.x" in error(plans, "driver570_130")
    assert 'or set cuda_version "12.6" or "11.8", which this driver runs' in error(plans, "driver570_130")


def test_an_old_driver_the_cuda_role_replaces_is_judged_after_the_install(plans):
    plan(plans, "driver520_126_installs_one")
    msg = error(plans, "driver520_126_after_install")
    assert "NVIDIA driver 520.61.05 is older than 525.60.13" in msg, msg


def test_a_node_without_a_driver(plans):
    msg = error(plans, "no_driver")
    assert "no_driver: nvidia-smi listed no GPU" in msg and "accelerator: cpu" in msg, msg
    plan(plans, "no_driver_installs_one")  # the cuda role installs the driver: judged when the matrix runs again
    assert "no_driver_after_install: nvidia-smi listed no GPU" in error(plans, "no_driver_after_install")


def test_na_fields_are_not_judged(plans):
    plan(plans, "na_fields")


def test_a_build_pytorch_does_not_publish_for_the_machine_is_refused(plans):
    msg = error(plans, "arm_118")
    assert "torch 2.7.1+cu118 is not built for aarch64 (PyTorch publishes it for x86_64 only)" in msg, msg
    assert 'Use cuda_version "12.6" (torch 2.13.0+cu126) or "13.0" (torch 2.13.0+cu130)' in msg, msg
    assert plan(plans, "arm_126")["torch_requirement"] == "torch==2.13.0+cu126"


def test_cuda_132_names_the_experimental_build(plans):
    assert "or python_env_torch_version 2.13.0 for cu132" in error(plans, "v132")
    got = plan(plans, "pin_132")
    assert got["torch_requirement"] == "torch==2.13.0+cu132"
    assert any("with cu132 is a build the project does not test" in w for w in got["choice"]["warnings"])


def test_pins(plans):
    got = plan(plans, "pin_outside")
    assert got["torch_requirement"] == "torch==2.11.0+cu128"
    assert got["index_url"] == "https://download.pytorch.org/whl/cu128"
    assert any("python_env_torch_version 2.11.0 is outside the project's tested lines" in w
               for w in got["choice"]["warnings"]), got["choice"]
    msg = error(plans, "pin_line_other_variant")
    assert "python_env_torch_version 2.7.1 has no cu126 build in the project's matrix" in msg, msg
    assert 'Set cuda_version to one of "11.8"' in msg
    assert plan(plans, "pin_cuda11_line")["torch_requirement"] == "torch==2.7.1+cu118"
    assert plan(plans, "pin_short")["torch_requirement"] == "torch==2.13.0+cpu"  # "2.13" is the 2.13.0 line
    assert "names the cu130 build, but cuda_version 12.6 means cu126" in error(plans, "pin_label_mismatch")
    assert not any("2.13.0+cu128" in w for w in got["choice"]["warnings"]), got["choice"]["warnings"]


def test_ubuntu_2204_builds_the_venv_from_python_311(plans):
    """Its python3 is 3.10; the pins need 3.11 (base installs python3.11 there)."""
    assert plan(plans, "ubuntu2204")["python"] == "/usr/bin/python3.11"
    assert plan(plans, "v126")["python"] == "/usr/bin/python3"


def test_a_cuda_version_that_is_not_a_quoted_major_minor_is_refused_first(plans):
    assert 'accelerator=cuda needs cuda_version as a quoted "major.minor" string' in error(plans, "unquoted")
    assert "got 12.6" in error(plans, "unquoted")
    assert "it is not set" in error(plans, "no_cuda_version")

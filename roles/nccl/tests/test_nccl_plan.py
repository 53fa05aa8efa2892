"""The nccl role's package specs (NVIDIA's libnccl2 X-1+cudaY.Z naming, the nvidia-nccl-cuXX wheels) and refusals,
computed by the role's own preflight (tests/plan.yml) for fake hosts. Nothing is installed."""

import json
import os
import sys

import pytest
import yaml

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DEB = {"os_family": "Debian", "user_id": "root"}
RPM = {"os_family": "RedHat", "user_id": "root"}

CASES = {
    "wheel_cu12": dict(fake_facts=DEB, cuda_version="12.6", nccl_source="wheel"),
    "wheel_cu13_pinned": dict(fake_facts=DEB, cuda_version="13.0", nccl_source="wheel", nccl_version="2.28.9"),
    "wheel_cu118": dict(fake_facts=RPM, cuda_version="11.8", nccl_source="wheel"),
    "apt_pinned": dict(fake_facts=DEB, cuda_version="12.6", cuda_source="nvidia", nccl_source="nvidia",
                       nccl_version="2.21.5", nccl_cuda_build="12.4"),
    "dnf_pinned": dict(fake_facts=RPM, cuda_version="11.8", cuda_source="nvidia", nccl_source="nvidia",
                       nccl_version="2.16.5"),
    "apt_newest": dict(fake_facts=DEB, cuda_version="12.8", cuda_source="nvidia", nccl_source="nvidia"),
    "nvidia_without_repo": dict(fake_facts=DEB, cuda_version="12.6", cuda_source="preinstalled", nccl_source="nvidia"),
    "build_of_other_major": dict(fake_facts=DEB, cuda_version="12.6", cuda_source="nvidia", nccl_source="nvidia",
                                 nccl_cuda_build="11.8"),
    "bad_version": dict(fake_facts=DEB, cuda_version="12.6", nccl_source="wheel", nccl_version="2.21"),
}


@pytest.fixture(scope="module")
def plans(tmp_path_factory, run_playbook):
    tmp = tmp_path_factory.mktemp("nccl_plan")
    hosts = {name: dict(v, accelerator="cuda", venv_dir="/opt/venv", ansible_connection="local")
             for name, v in CASES.items()}
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    out = tmp / "plans.json"
    proc = run_playbook("roles/nccl/tests/plan.yml", "-i", str(tmp / "hosts.yml"), "-e", "plan_out=%s" % out,
                        "-e", "ansible_python_interpreter=%s" % sys.executable)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_wheels(plans):
    assert plans["wheel_cu12"]["nccl_plan"]["packages"] == ["nvidia-nccl-cu12"]
    assert plans["wheel_cu13_pinned"]["nccl_plan"]["packages"] == ["nvidia-nccl-cu13==2.28.9"]
    assert plans["wheel_cu118"]["nccl_plan"]["packages"] == ["nvidia-nccl-cu11"]


def test_nvidia_packages_follow_nvidia_naming(plans):
    assert plans["apt_pinned"]["nccl_plan"]["packages"] == ["libnccl2=2.21.5-1+cuda12.4", "libnccl-dev=2.21.5-1+cuda12.4"]
    assert plans["dnf_pinned"]["nccl_plan"]["packages"] == ["libnccl-2.16.5-1+cuda11.8", "libnccl-devel-2.16.5-1+cuda11.8"]
    assert plans["apt_newest"]["nccl_plan"]["packages"] == ["libnccl2 / libnccl (newest +cuda12.8)"]


def test_refusals(plans):
    assert "needs NVIDIA's repository (cuda_source=nvidia)" in plans["nvidia_without_repo"]["nccl_plan_error"]
    assert "nccl_cuda_build=11.8" in plans["build_of_other_major"]["nccl_plan_error"]
    assert "X.Y.Z" in plans["bad_version"]["nccl_plan_error"]

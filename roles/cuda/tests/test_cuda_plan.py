"""The cuda role's computed repositories, package names and support decisions, for every supported OS.

Runs the role's real preflight (tests/plan.yml) once, with ansible-playbook, for fake hosts that carry the facts
of each OS, and compares what it computed with NVIDIA's documented naming
(https://docs.nvidia.com/cuda/cuda-installation-guide-linux/: network repository
https://developer.download.nvidia.com/compute/cuda/repos/<distro>/<arch>/, the cuda-keyring_1.1-1_all.deb package on
apt systems, D42D0685.pub on dnf systems, packages cuda-toolkit-X-Y, installed to /usr/local/cuda-X.Y).
Nothing is installed or contacted.
"""

import json
import os
import sys

import pytest
import yaml

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos"

FACTS = {
    "ubuntu2204": {"distribution": "Ubuntu", "distribution_version": "22.04", "distribution_major_version": "22",
                   "distribution_release": "jammy", "os_family": "Debian"},
    "ubuntu2404": {"distribution": "Ubuntu", "distribution_version": "24.04", "distribution_major_version": "24",
                   "distribution_release": "noble", "os_family": "Debian"},
    "debian12": {"distribution": "Debian", "distribution_version": "12.11", "distribution_major_version": "12",
                 "distribution_release": "bookworm", "os_family": "Debian"},
    "rocky9": {"distribution": "Rocky", "distribution_version": "9.5", "distribution_major_version": "9",
               "distribution_release": "Blue Onyx", "os_family": "RedHat"},
    "rhel9": {"distribution": "RedHat", "distribution_version": "9.4", "distribution_major_version": "9",
              "distribution_release": "Plow", "os_family": "RedHat"},
    "alma9": {"distribution": "AlmaLinux", "distribution_version": "9.4", "distribution_major_version": "9",
              "distribution_release": "Seafoam Ocelot", "os_family": "RedHat"},
    "debian11": {"distribution": "Debian", "distribution_version": "11.9", "distribution_major_version": "11",
                 "distribution_release": "bullseye", "os_family": "Debian"},
}
# NVIDIA's repository directory per OS (Rocky and AlmaLinux 9 use the rhel9 repository).
REPO_DIR = {"ubuntu2204": "ubuntu2204", "ubuntu2404": "ubuntu2404", "debian12": "debian12",
            "rocky9": "rhel9", "rhel9": "rhel9", "alma9": "rhel9"}

# cuda-toolkit-X-Y in NVIDIA's network repositories (as published; there is no 12.7).
NVIDIA_RELEASES = {
    "ubuntu2204": ["11.8", "12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9", "13.0"],
    "ubuntu2404": ["12.5", "12.6", "12.8", "12.9", "13.0"],
    "debian12": ["12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9", "13.0"],
    "rhel9": ["11.8", "12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9", "13.0"],
}


def case(name, os_name, version, source="nvidia", arch="x86_64", **extra):
    facts = dict(FACTS[os_name], architecture=arch, user_id="root")
    return name, dict(fake_facts=facts, cuda_version=version, cuda_source=source, accelerator="cuda", **extra)


def all_cases():
    cases = []
    for os_name, repo_dir in REPO_DIR.items():
        for version in NVIDIA_RELEASES[repo_dir]:
            cases.append(case("nv_%s_%s" % (os_name, version.replace(".", "")), os_name, version))
    cases += [
        case("nv_ubuntu2404_118", "ubuntu2404", "11.8"),
        case("nv_debian12_118", "debian12", "11.8"),
        case("nv_ubuntu2204_127", "ubuntu2204", "12.7"),
        case("nv_debian11_126", "debian11", "12.6"),
        case("nv_arm_ubuntu2204_126", "ubuntu2204", "12.6", arch="aarch64"),
        case("nv_mirror", "ubuntu2404", "12.8", cuda_nvidia_repo_base_url="http://mirror.local/cuda/repos/"),
        case("nv_driver", "debian12", "12.6", cuda_install_driver=True),
        case("distro_debian12_118", "debian12", "11.8", source="distro"),
        case("distro_debian12_126", "debian12", "12.6", source="distro"),
        case("pre_ubuntu2404_130", "ubuntu2404", "13.0", source="preinstalled"),
        case("pre_rocky9_118", "rocky9", "11.8", source="preinstalled"),
        case("bad_unquoted", "ubuntu2204", 12.1),
        case("nv_with_preinstalled_home", "ubuntu2404", "13.0", cuda_preinstalled_home="/opt/cuda-12.4"),
        case("cc_override", "ubuntu2404", "12.8", source="preinstalled",
             cuda_host_compiler={"CC": "/usr/bin/gcc-13", "CXX": "/usr/bin/g++-13"}),
        case("cc_relative", "ubuntu2404", "12.8", source="preinstalled", cuda_host_compiler={"CC": "gcc-13"}),
        case("cc_other_key", "ubuntu2404", "12.8", source="preinstalled", cuda_host_compiler={"NVCC_CCBIN": "/usr/bin/gcc"}),
    ]
    return dict(cases)


@pytest.fixture(scope="module")
def plans(tmp_path_factory, run_playbook):
    tmp = tmp_path_factory.mktemp("cuda_plan")
    hosts = {name: dict(hostvars, ansible_connection="local") for name, hostvars in all_cases().items()}
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    out = tmp / "plans.json"
    proc = run_playbook("roles/cuda/tests/plan.yml", "-i", str(tmp / "hosts.yml"), "-e", "plan_out=%s" % out,
                        "-e", "ansible_python_interpreter=%s" % sys.executable, env={"ANSIBLE_FORKS": "50"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("os_name", sorted(REPO_DIR))
def test_nvidia_repo_and_packages_follow_nvidia_naming(plans, os_name):
    repo_dir = REPO_DIR[os_name]
    for version in NVIDIA_RELEASES[repo_dir]:
        got = plans["nv_%s_%s" % (os_name, version.replace(".", ""))]
        assert "cuda_plan_error" not in got, got
        plan = got["cuda_plan"]
        url = "%s/%s/x86_64" % (NVIDIA, repo_dir)
        assert plan["os_key"] == repo_dir
        assert plan["repo_url"] == url
        assert plan["packages"] == ["cuda-toolkit-%s" % version.replace(".", "-")]
        assert plan["cuda_home"] == "/usr/local/cuda-%s" % version
        if FACTS[os_name]["os_family"] == "Debian":
            assert plan["keyring_url"] == url + "/cuda-keyring_1.1-1_all.deb" and plan["gpgkey_url"] == ""
        else:
            assert plan["gpgkey_url"] == url + "/D42D0685.pub" and plan["keyring_url"] == ""


def test_cuda_118_from_nvidia_on_ubuntu2404_names_the_alternatives(plans):
    msg = plans["nv_ubuntu2404_118"]["cuda_plan_error"]
    assert "CUDA 11.8 from cuda_source=nvidia on ubuntu2404" in msg
    assert "cuda_source=nvidia (12.5, 12.6, 12.8, 12.9, 13.0)" in msg  # what ubuntu2404 offers instead
    assert "cuda_source=distro (12.0)" in msg and "cuda_source=preinstalled (any version)" in msg
    assert "ubuntu2204 with cuda_source=nvidia" in msg and "rhel9 with cuda_source=nvidia" in msg
    assert "debian12 with cuda_source=distro" in msg  # where 11.8 does exist


def test_cuda_118_on_debian12_points_to_the_distro_package(plans):
    msg = plans["nv_debian12_118"]["cuda_plan_error"]
    assert "cuda_source=distro (11.8)" in msg


def test_unknown_release_and_unsupported_os_are_refused(plans):
    assert "nowhere (not a known CUDA release)" in plans["nv_ubuntu2204_127"]["cuda_plan_error"]
    msg = plans["nv_debian11_126"]["cuda_plan_error"]
    assert "on debian11" in msg and "On debian11: cuda_source=preinstalled (any version)." in msg


def test_arm_servers_use_the_sbsa_repository(plans):
    assert plans["nv_arm_ubuntu2204_126"]["cuda_plan"]["repo_url"] == NVIDIA + "/ubuntu2204/sbsa"


def test_mirror_and_driver_options(plans):
    plan = plans["nv_mirror"]["cuda_plan"]
    assert plan["repo_url"] == "http://mirror.local/cuda/repos/ubuntu2404/x86_64"
    assert plan["keyring_url"] == "http://mirror.local/cuda/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb"
    assert plans["nv_driver"]["cuda_plan"]["packages"] == ["cuda-toolkit-12-6", "cuda-drivers"]


def test_distro_source(plans):
    plan = plans["distro_debian12_118"]["cuda_plan"]
    assert plan["packages"] == ["nvidia-cuda-toolkit", "nvidia-cuda-toolkit-gcc"] and plan["cuda_home"] == "/usr" and plan["repo_url"] == ""
    msg = plans["distro_debian12_126"]["cuda_plan_error"]
    assert "cuda_source=distro (11.8)" in msg and "cuda_source=nvidia (12.2" in msg


def test_preinstalled_accepts_any_version(plans):
    assert plans["pre_ubuntu2404_130"]["cuda_plan"]["packages"] == []
    assert plans["pre_rocky9_118"]["cuda_plan"]["os_key"] == "rhel9"


def test_unquoted_version_is_refused(plans):
    assert "quoted" in plans["bad_unquoted"]["cuda_plan_error"]


def test_host_compiler_per_source(plans):
    """distro toolkits compile with the nvidia-cuda-toolkit-gcc links (Debian 12's gcc 12 is too new for nvcc 11.8);
    NVIDIA's repositories and preinstalled toolkits with the system compiler unless the inventory says otherwise."""
    assert plans["distro_debian12_118"]["cuda_plan"]["host_compiler"] == {"CC": "/usr/bin/cuda-gcc",
                                                                          "CXX": "/usr/bin/cuda-g++"}
    for name in ("nv_debian12_126", "nv_ubuntu2204_118", "nv_rocky9_118", "pre_ubuntu2404_130"):
        assert plans[name]["cuda_plan"]["host_compiler"] == {}, name
    assert plans["cc_override"]["cuda_plan"]["host_compiler"] == {"CC": "/usr/bin/gcc-13", "CXX": "/usr/bin/g++-13"}


def test_bad_host_compiler_is_refused(plans):
    for name in ("cc_relative", "cc_other_key"):
        msg = plans[name]["cuda_plan_error"]
        assert "cuda_host_compiler must be {} or a mapping of CC and/or CXX to absolute paths" in msg, name


def test_a_named_toolkit_with_another_source_is_refused(plans):
    """cuda_preinstalled_home with cuda_source=nvidia would install and use /usr/local/cuda-13.0 instead: refused."""
    msg = plans["nv_with_preinstalled_home"]["cuda_plan_error"]
    assert ("cuda_preinstalled_home is /opt/cuda-12.4, but cuda_source=nvidia installs CUDA 13.0 into "
            "/usr/local/cuda-13.0 and uses that one, not the toolkit you named") in msg
    assert "Set cuda_source=preinstalled to use /opt/cuda-12.4" in msg

"""roles/cuda/filter_plugins/cuda_support.py: the refusal hints over the support matrix, called directly on the
role's own matrix (roles/cuda/vars/main.yml) and on small hand-made ones."""

import importlib.util
from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("cuda_support_filter", ROLE / "filter_plugins" / "cuda_support.py")
cuda = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cuda)

SUPPORT = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_cuda_support"]
SMALL = {"nvidia": {"debian12": ["12.2", "12.6"], "rhel9": ["11.8", "12.6"]},
         "distro": {"debian12": ["11.8"]},
         "preinstalled": {"*": ["*"]}}


def test_alternatives_on_the_roles_matrix():
    assert cuda.cuda_alternatives(SUPPORT, "ubuntu2404") == (
        "cuda_source=nvidia (12.5, 12.6, 12.8, 12.9, 13.0); cuda_source=distro (12.0); "
        "cuda_source=preinstalled (any version)")
    # an OS without packages still has preinstalled
    assert cuda.cuda_alternatives(SUPPORT, "debian11") == "cuda_source=preinstalled (any version)"


def test_alternatives_keep_the_matrix_order_and_an_os_entry_before_the_wildcard():
    support = {"distro": {"debian12": ["11.8"]}, "nvidia": {"*": ["12.6"], "debian12": ["12.2", "*"]}}
    assert cuda.cuda_alternatives(support, "debian12") == \
        "cuda_source=distro (11.8); cuda_source=nvidia (12.2, any version)"
    assert cuda.cuda_alternatives(support, "rhel9") == "cuda_source=nvidia (12.6)"


def test_alternatives_are_none_when_no_source_fits():
    assert cuda.cuda_alternatives({"nvidia": {"debian12": ["12.2"]}}, "sles15") == "none"
    assert cuda.cuda_alternatives({}, "debian12") == "none"
    assert cuda.cuda_alternatives({"nvidia": {"debian12": []}}, "debian12") == "cuda_source=nvidia ()"


def test_where_version_on_the_roles_matrix():
    assert cuda.cuda_where_version(SUPPORT, "11.8") == (
        "ubuntu2204 with cuda_source=nvidia, rhel9 with cuda_source=nvidia, debian12 with cuda_source=distro")
    assert cuda.cuda_where_version(SUPPORT, "12.0") == (
        "ubuntu2204 with cuda_source=nvidia, rhel9 with cuda_source=nvidia, ubuntu2404 with cuda_source=distro")


def test_where_version_leaves_preinstalled_out():
    assert cuda.cuda_where_version(SMALL, "12.6") == "debian12 with cuda_source=nvidia, rhel9 with cuda_source=nvidia"
    # "*" is preinstalled's, which packages nothing
    assert cuda.cuda_where_version(SMALL, "*") == "nowhere (not a known CUDA release)"


def test_where_version_of_an_unknown_release():
    assert cuda.cuda_where_version(SUPPORT, "12.7") == "nowhere (not a known CUDA release)"
    assert cuda.cuda_where_version({}, "12.6") == "nowhere (not a known CUDA release)"


def test_where_version_compares_the_version_as_text():
    # an unquoted 12.6 in the inventory is a float; 12.10 unquoted is 12.1
    assert cuda.cuda_where_version(SMALL, 12.6) == cuda.cuda_where_version(SMALL, "12.6")
    assert cuda.cuda_where_version({"nvidia": {"rhel9": ["12.1"]}}, 12.10) == "rhel9 with cuda_source=nvidia"


def test_the_filters_are_registered_under_their_names():
    assert cuda.FilterModule().filters() == {"cuda_alternatives": cuda.cuda_alternatives,
                                             "cuda_where_version": cuda.cuda_where_version}

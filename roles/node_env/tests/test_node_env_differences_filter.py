"""node_env's node_env_differences filter (the preflight's check that every node has the head's NCCL_*/GLOO_*
settings), called directly: pure Python, fast tier. Through Ansible: test_nccl_settings.py."""

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parents[1] / "filter_plugins" / "node_env_names.py"
_spec = importlib.util.spec_from_file_location("node_env_names", _path)
names = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(names)

COLLECTIVE = r"^\s*(NCCL|GLOO)_"


def test_each_differing_collective_setting_is_named_sorted_with_both_values():
    mine = {"NCCL_SOCKET_IFNAME": "eno1", "RUN_LABEL": "b", "nccl_debug": "INFO", "NCCL_IB_DISABLE": 1}
    head = {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "RUN_LABEL": "a", "NCCL_IB_DISABLE": "1"}
    assert names.node_env_differences(mine, head, COLLECTIVE, "head-1") == (
        "GLOO_SOCKET_IFNAME is (unset) here and eth0 on head-1, nccl_debug is INFO here and (unset) on head-1, "
        "NCCL_SOCKET_IFNAME is eno1 here and eth0 on head-1")
    # sorted without regard to case (as Jinja's sort was); RUN_LABEL is not a collective's; 1 and "1" are one value


def test_the_same_settings_give_nothing():
    same = {"NCCL_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": 4}
    assert names.node_env_differences(same, dict(same), COLLECTIVE, "head-1") == ""
    assert names.node_env_differences({}, {"HF_HOME": "/x"}, COLLECTIVE, "head-1") == ""

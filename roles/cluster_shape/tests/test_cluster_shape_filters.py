"""roles/cluster_shape/filter_plugins/cluster_shape.py: the per-node values of the cluster shape, called directly on
plain dicts shaped like hostvars (a node's variables; a variable it does not set is absent)."""

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "cluster_shape_filters", Path(__file__).resolve().parents[1] / "filter_plugins" / "cluster_shape.py")
shape = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(shape)

NODES = ["head-1", "worker-1", "worker-2"]


def test_the_address_is_cluster_address_else_ansible_host_else_the_name():
    node_vars = {"head-1": {"cluster_address": " 10.0.0.1 ", "ansible_host": "mgmt-1"},
                 "worker-1": {"ansible_host": "192.168.1.2\n"},
                 "worker-2": {}}
    assert shape.cluster_addresses(NODES, node_vars) == {"head-1": "10.0.0.1", "worker-1": "192.168.1.2",
                                                         "worker-2": "worker-2"}


@pytest.mark.parametrize("unset", [None, "", False, 0])
def test_an_empty_cluster_address_counts_as_unset(unset):
    node_vars = {"head-1": {"cluster_address": unset, "ansible_host": "10.1.0.1"},
                 "worker-1": {"cluster_address": unset}}
    assert shape.cluster_addresses(["head-1", "worker-1"], node_vars) == {"head-1": "10.1.0.1", "worker-1": "worker-1"}


def test_a_set_ansible_host_is_taken_as_it_is_and_values_become_text():
    # an ansible_host that is set, even empty or null, is not replaced by the name (cluster_check refuses it)
    node_vars = {"a": {"ansible_host": ""}, "b": {"ansible_host": None}, "c": {"cluster_address": 17}}
    assert shape.cluster_addresses(["a", "b", "c"], node_vars) == {"a": "", "b": "None", "c": "17"}


def test_addresses_keep_the_node_order_and_only_read_the_listed_nodes():
    node_vars = {"worker-2": {"cluster_address": "10.0.0.3"}, "head-1": {"cluster_address": "10.0.0.1"},
                 "other": {"cluster_address": "10.9.9.9"}}
    out = shape.cluster_addresses(["worker-2", "head-1"], node_vars)
    assert list(out.items()) == [("worker-2", "10.0.0.3"), ("head-1", "10.0.0.1")]
    assert shape.cluster_addresses([], node_vars) == {}


def test_a_node_missing_from_node_vars_is_an_error():
    with pytest.raises(KeyError):
        shape.cluster_addresses(["head-1", "ghost"], {"head-1": {}})


@pytest.mark.parametrize("raw, expected", [
    ("2, 3", ["2", "3"]),
    ([2, 3], ["2", "3"]),
    ([" 1 ", 2], ["1", "2"]),
    ("0", ["0"]),
    (3, ["3"]),
    ("1,,2", ["1", "", "2"]),
    ("a,b", ["a", "b"]),
    ("", [""]),
    ([], []),
])
def test_gpu_indices_become_a_list_of_stripped_strings(raw, expected):
    assert shape.cluster_gpu_indices(["head-1"], {"head-1": {"gpu_indices": raw}}) == {"head-1": expected}


def test_a_node_without_gpu_indices_is_left_out():
    node_vars = {"head-1": {"gpu_indices": "2, 3"}, "worker-1": {}, "worker-2": {"gpu_indices": None}}
    assert shape.cluster_gpu_indices(NODES, node_vars) == {"head-1": ["2", "3"]}
    assert shape.cluster_gpu_indices(NODES, {n: {} for n in NODES}) == {}


def test_ranks_are_the_gpu_indices_count_else_the_slots():
    node_vars = {"head-1": {"slots": 8, "gpu_indices": "2, 3"}, "worker-1": {"slots": "4 "}, "worker-2": {"slots": 1}}
    gpus = shape.cluster_gpu_indices(NODES, node_vars)
    assert shape.cluster_ranks(NODES, gpus, node_vars) == {"head-1": 2, "worker-1": 4, "worker-2": 1}


@pytest.mark.parametrize("slots, ranks", [(None, 0), ("eight", 0), ("2.5", 2), (" 16\n", 16), (-2, -2), (True, 0)])
def test_slots_are_read_as_jinjas_int_filter_reads_them(slots, ranks):
    # cluster_check refuses what is not a positive integer; the shape itself never raises on it
    assert shape.cluster_ranks(["head-1"], {}, {"head-1": {"slots": slots}}) == {"head-1": ranks}


def test_a_node_without_slots_has_no_ranks():
    assert shape.cluster_ranks(["head-1", "worker-1"], {}, {"head-1": {}, "worker-1": {"slots": 2}}) == \
        {"head-1": 0, "worker-1": 2}
    assert shape.cluster_ranks([], {}, {}) == {}


def test_include_names_every_node_and_the_indices_where_set():
    assert shape.deepspeed_include(["head-1", "worker-1"], {"head-1": ["2", "3"]}) == "head-1:2,3@worker-1"
    assert shape.deepspeed_include(NODES, {"worker-1": ["0", "1"], "worker-2": ["7"]}) == \
        "head-1@worker-1:0,1@worker-2:7"
    assert shape.deepspeed_include(["head-1"], {"head-1": [" 03 "]}) == "head-1:3"


def test_include_is_empty_without_gpu_indices():
    assert shape.deepspeed_include(NODES, {}) == ""
    assert shape.deepspeed_include([], {}) == ""


def test_include_reads_a_bad_index_as_zero_and_keeps_an_empty_list():
    # what cluster_check then refuses (gpu_indices "a,b" or []), rendered as the template did
    assert shape.deepspeed_include(["head-1", "worker-1"], {"head-1": ["a", "b"], "worker-1": []}) == \
        "head-1:0,0@worker-1:"


def test_an_unreachable_address_names_where_it_came_from_and_the_fix_that_fits():
    node_vars = {"head-1": {"ansible_host": "10.89.78.10"}, "worker-1": {"cluster_address": "10.89.77.11"},
                 "worker-2": {}}
    assert shape.address_source("head-1", node_vars) == "head-1's ansible_host (cluster_address is not set for it)"
    assert shape.address_source("worker-1", node_vars) == "worker-1's cluster_address"
    assert shape.address_source("worker-2", node_vars) == \
        "worker-2's inventory name (neither cluster_address nor ansible_host is set for it)"
    said = "Timeout when waiting for 10.89.78.10:29500"
    assert shape.reach_problem("head-1", node_vars, 29500, said, "worker-1", "the master port") == (
        "worker-1 cannot open a TCP connection to head-1 at 10.89.78.10 port 29500 (the master port; Timeout when "
        "waiting for 10.89.78.10:29500). 10.89.78.10 is head-1's ansible_host (cluster_address is not set for it). "
        "That address is how Ansible reaches head-1, which may be a management network the other nodes cannot "
        "reach: set cluster_address: <head-1's address on the network the nodes share> for head-1 in the inventory "
        "(docs/multi-node.md).")
    assert shape.reach_problem("worker-1", node_vars, "22", "x", "head-1").endswith(
        "(its sshd; x). 10.89.77.11 is worker-1's cluster_address. Check that 10.89.77.11 is worker-1's address on "
        "the network the nodes share, and that no firewall drops TCP port 22 between the nodes.")


def test_every_failed_wait_for_item_gives_its_sentence():
    node_vars = {"head-1": {"ansible_host": "10.89.78.10"}, "worker-1": {"cluster_address": "10.89.77.11"}}
    results = [  # a wait_for loop over ssh_mesh's peers, as registered: the head failed, worker-1 answered
        {"item": {"name": "head-1", "address": "10.89.78.10", "port": 22}, "failed": True,
         "msg": "Timeout when waiting for 10.89.78.10:22"},
        {"item": {"name": "worker-1", "address": "10.89.77.11", "port": 22}, "failed": False, "elapsed": 0}]
    assert shape.reach_problems(results, node_vars, "worker-1") == [
        shape.reach_problem("head-1", node_vars, 22, "Timeout when waiting for 10.89.78.10:22", "worker-1")]
    named = [{"item": {"name": "head-1", "port": 29500}, "failed": True, "msg": "m"}]
    assert shape.reach_problems(named, node_vars, "worker-1", "the master port")[0].startswith(
        "worker-1 cannot open a TCP connection to head-1 at 10.89.78.10 port 29500 (the master port; m).")
    assert shape.reach_problems(results[1:], node_vars, "worker-1") == []
    # as registered under failed_when: false (a real wait_for loop's results: the timeout keeps its msg, a success
    # has its state)
    quiet = [{"elapsed": 2, "failed": False, "failed_when_result": False, "item": results[0]["item"],
              "msg": "Timeout when waiting for 10.89.78.10:22"},
             {"elapsed": 0, "failed": False, "failed_when_result": False, "item": results[1]["item"], "port": 22,
              "state": "started"}]
    assert shape.reach_problems(quiet, node_vars, "worker-1") == shape.reach_problems(results, node_vars, "worker-1")


def test_the_filters_are_registered_under_their_names():
    assert shape.FilterModule().filters() == {"cluster_addresses": shape.cluster_addresses,
                                              "cluster_gpu_indices": shape.cluster_gpu_indices,
                                              "cluster_ranks": shape.cluster_ranks,
                                              "deepspeed_include": shape.deepspeed_include,
                                              "address_source": shape.address_source,
                                              "reach_problem": shape.reach_problem,
                                              "reach_problems": shape.reach_problems}

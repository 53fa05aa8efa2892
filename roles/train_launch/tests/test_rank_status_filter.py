"""roles/train_launch/filter_plugins/rank_status.py's stopped_nodes, called with what stop.yml registers (one loop
result per node of the read of every rank's status, then of the stop)."""

import importlib.util
import json
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "rank_status_filter", Path(__file__).resolve().parents[1] / "filter_plugins" / "rank_status.py")
filters = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(filters)

HOSTS = ["head-1", "worker-1", "worker-2"]


def read(node, *alive):
    return {"item": node, "rc": 0, "stdout": json.dumps([{"rank": i, "alive": a} for i, a in enumerate(alive)])}


def test_the_nodes_a_stop_names_do_not_depend_on_which_nodes_stop_ended_the_others_ranks():
    """pdsh: the head's stop ends pdsh, and the workers' ranks end with it before their own stop looks (changed
    false there); the nodes whose ranks were alive when every node was read still count, in host order."""
    reads = [read("head-1", True, True), read("worker-2", True), read("worker-1", True)]
    head_first = [{"item": "head-1", "changed": True}, {"item": "worker-1", "changed": False},
                  {"item": "worker-2", "changed": False}]
    all_three = [dict(r, changed=True) for r in head_first]
    assert filters.stopped_nodes(HOSTS, reads, head_first) == HOSTS
    assert filters.stopped_nodes(HOSTS, reads, all_three) == HOSTS


def test_a_node_counts_when_its_stop_ended_something_and_not_when_nothing_of_the_run_was_there():
    """A claim-only run (no rank yet: its holder ended on the head), and a node that did not answer (no stdout)."""
    reads = [read("head-1", False), {"item": "worker-1", "unreachable": True}, read("worker-2", False)]
    stops = [{"item": "head-1", "changed": True}, {"item": "worker-2", "changed": False}]
    assert filters.stopped_nodes(HOSTS, reads, stops) == ["head-1"]
    assert filters.stopped_nodes(HOSTS, reads, []) == []

"""Jinja filters over train/node/rank_status.py for the playbook (roles/train_launch follow.yml, stop.yml).

    "{{ records | dead_ranks }}"   records: what `python -m train.node.rank_status read` printed on each node, "node" added
    "{{ train_plan.hosts | node_ranks(train_plan.ranks) }}"   {host: [its global ranks]}
    "{{ train_plan | liveness_nodes(venv_dirs) }}"   the nodes argument of the follower's liveness check
    "{{ train_plan.hosts | stopped_nodes(read_results, stop_results) }}"   the nodes a stop found the run on
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[3])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from train.node.rank_status import dead_ranks as _dead_ranks  # noqa: E402
from train.node.rank_status import node_ranks as _node_ranks  # noqa: E402


def dead_ranks(records):
    """The dead ranks among ``records`` (list of dict), most likely cause first: see train.node.rank_status.dead_ranks.

    Returns a list of {node, rank, what}: ``what`` is "killed: no exit recorded, pid N" or the recorded end.
    """
    out = []
    for s in _dead_ranks([dict(r) for r in records]):
        what = (f"killed: no exit recorded, pid {s.get('pid')}" if s.get("end") is None
                else str(s["end"])[:200])
        out.append({"node": s.get("node", ""), "rank": int(s.get("rank", 0)), "what": what})
    return out


def node_ranks(hosts, ranks):
    """{host: [global rank, ...]} for the plan's ``hosts`` (host order) and ``ranks`` ({host: count}): see
    train.node.rank_status.node_ranks."""
    return _node_ranks(list(hosts), dict(ranks))


def liveness_nodes(plan, venv_dirs):
    """The ``nodes`` of train.node.rank_status.check_nodes for a plan (dict with hosts, ranks, head, paths.code_dir):
    ``[{"host", "first", "count", "python", "code_dir", "local"}]``, head first. ``venv_dirs``: {host: venv_dir}.
    Raises KeyError when a host of the plan has no venv_dir."""
    held = _node_ranks(list(plan["hosts"]), dict(plan["ranks"]))
    return [{"host": h, "first": held[h][0] if held[h] else 0, "count": len(held[h]),
             "python": f"{str(venv_dirs[h]).rstrip('/')}/bin/python", "code_dir": plan["paths"]["code_dir"],
             "local": h == plan["head"]} for h in plan["hosts"]]


def stopped_nodes(hosts, read, stop):
    """The nodes, in ``hosts`` order, where a stop (roles/train_launch stop.yml) found the run: a rank of it alive
    when every node's rank status was read, before anything was stopped, or a process of it (or its claim) that the
    node's own stop ended. Read first, so that the list does not depend on which node's stop came first (the head's
    ends pdsh, whose end ends the workers' ranks before their own stop looks).

    Args:
      hosts: the run's nodes; read, stop: the loop results (``results`` of the registered tasks, one per node:
        ``item`` the node, ``stdout`` read_node's records / stop_run's result).
    """
    found = set()
    for r in read or []:
        try:
            records = json.loads((r.get("stdout") or "").strip().splitlines()[-1])
        except (IndexError, ValueError, AttributeError):
            continue
        if any(isinstance(x, dict) and x.get("alive") for x in records):
            found.add(r.get("item"))
    for r in stop or []:
        if r.get("changed"):
            found.add(r.get("item"))
    return [h for h in hosts if h in found]


class FilterModule:
    """dead_ranks, node_ranks, liveness_nodes, stopped_nodes."""

    def filters(self):
        return {"dead_ranks": dead_ranks, "node_ranks": node_ranks, "liveness_nodes": liveness_nodes,
                "stopped_nodes": stopped_nodes}

"""Jinja filter ``dead_ranks``: train/rank_status.py's dead_ranks for the playbook (roles/train_launch stop.yml).

    "{{ records | dead_ranks }}"   records: what `python -m train.rank_status` printed on each node, with "node" added
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[3])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from train.rank_status import dead_ranks as _dead_ranks  # noqa: E402


def dead_ranks(records):
    """The dead ranks among ``records`` (list of dict), most likely cause first: see train.rank_status.dead_ranks.

    Returns a list of {node, rank, what}: ``what`` is "killed: no exit recorded, pid N" or the recorded end.
    """
    out = []
    for s in _dead_ranks([dict(r) for r in records]):
        what = (f"killed: no exit recorded, pid {s.get('pid')}" if s.get("end") is None
                else str(s["end"])[:200])
        out.append({"node": s.get("node", ""), "rank": int(s.get("rank", 0)), "what": what})
    return out


class FilterModule:
    """dead_ranks."""

    def filters(self):
        return {"dead_ranks": dead_ranks}

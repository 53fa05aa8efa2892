"""Jinja filter ``restart_decision``: train/controller/restart.py's decide for the playbook (roles/train_launch
follow.yml, "Decide whether the run starts again").

    "{{ train_plan | restart_decision(gone, dead, last_step, error, state, max_restarts, min_nodes, spares,
                                      hung=..., slurm=...) }}"
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[3])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from train.controller.restart import decide  # noqa: E402


def restart_decision(plan, gone, dead, last_step, error, state, max_restarts, min_nodes, spares, now=None, hung=None,
                     slurm=None):
    """See train.controller.restart.decide (the arguments in its order; ``state`` None or "" for the first attempt,
    ``last_step`` None or "" when no step was logged; ``now`` the controller's clock by default; ``hung`` the hang
    watchdog's stuck ranks, ``slurm`` Slurm's record of the ended job, None or empty for none)."""
    return decide(plan=dict(plan), gone=list(gone or []), dead=[dict(d) for d in dead or []],
                  last_step=int(last_step) if last_step not in (None, "") else None, error=str(error or ""),
                  state=dict(state) if state else None, max_restarts=int(max_restarts), min_nodes=int(min_nodes),
                  spares=list(spares or []), now=time.time() if now is None else float(now),
                  hung=[dict(h) for h in hung or []], slurm=dict(slurm) if slurm else None)


class FilterModule:
    """restart_decision."""

    def filters(self):
        return {"restart_decision": restart_decision}

"""Jinja filter ``run_summary``: train/controller/progress.py's summary_lines for the playbook (roles/train_launch collect.yml).

    "{{ train_plan.paths.out_dir | run_summary(train_plan.run_name, failed, end, stopped) }}"   the run's results on the controller
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[3])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from train.controller.progress import summary_lines  # noqa: E402


def run_summary(out_dir, run_name="", failed=False, end=None, straggler=None, stopped=""):
    """The end-of-run table of ``out_dir`` (a directory on the controller) as a list of aligned lines: see
    train.controller.progress.summary_lines (steps, loss first -> last, samples/s, the end of the run, checkpoints
    kept, where everything is). ``end``: {ranks_s, results_s} (seconds; None or "" when unknown); ``straggler``:
    {ratio, intervals} (train_straggler_ratio, train_straggler_intervals) for the "step time" row; ``stopped``: what
    stopped the run on request ("" for nothing)."""
    return summary_lines(str(out_dir), str(run_name or ""), bool(failed), end or {}, straggler or {},
                         str(stopped or ""))


class FilterModule:
    """run_summary."""

    def filters(self):
        return {"run_summary": run_summary}

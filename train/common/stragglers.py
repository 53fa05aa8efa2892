"""Stragglers: the nodes whose ranks are slower than the others, from the step times the ranks report.

Every logged step of a run with more than one rank carries, in rank 0's progress.jsonl, each rank's own step time
over the logging interval (train/rank/callbacks.py's StepTimer: its compute, not the synchronised wall time every
rank shares) as ``"step_s": {host: [seconds of each of its ranks]}``. The follower (roles/train_launch's
deepspeed_watch) names a straggler while the run goes on (:func:`stragglers`, :func:`straggler_line`); metrics.json
carries each node's median step time (:func:`node_medians`, train/rank/metrics.py) and the end-of-run summary the
nodes named at any point (:func:`run_stragglers`, train/controller/progress.py). Standard library only: it runs on
the controller and in the ranks.
"""

from __future__ import annotations


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def node_step_times(record: dict) -> tuple[dict[str, float], float] | None:
    """One logged interval's step times per node: ({node: the median of its ranks' seconds}, the median of every
    rank's), from a progress record's ``step_s`` ({node: [seconds of each of its ranks]}: each rank's own compute
    per optimizer step, its forward passes timed on the rank, train/rank/callbacks.py); None when the record has none
    (one rank, an older version) or a value is not a positive number."""
    forward = record.get("step_s")
    if not isinstance(forward, dict) or not forward:
        return None
    every = [v for values in forward.values() for v in (values if isinstance(values, list) else [])]
    if not every or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in every):
        return None
    nodes = {str(node): _median(values) for node, values in forward.items() if values}
    return nodes, _median(every)


def stragglers(intervals: list[tuple[dict[str, float], float]], ratio: float = 1.2,
               last: int = 3) -> list[tuple[str, float]]:
    """The nodes whose ranks are slower than the median rank by more than ``ratio`` in each of the ``last`` intervals.

    Args:
        intervals: the run's logged intervals in order, each :func:`node_step_times`' ({node: seconds}, median).
        ratio: a node is slow in an interval when its ranks' median step time exceeds ``ratio`` x the median of
            every rank's (the median, not the mean: one slow node of several does not move it); 0 or less: none.
        last: how many of the newest intervals in a row it must be slow in (fewer intervals so far: none).

    Returns:
        [(node, its mean ratio to the median over those intervals)], slowest first.
    """
    if ratio <= 0 or last < 1 or len(intervals) < last:
        return []
    window = intervals[-last:]
    found = []
    for node in window[-1][0]:
        ratios = [times[node] / median for times, median in window if node in times and median > 0]
        if len(ratios) == last and min(ratios) > ratio:
            found.append((node, sum(ratios) / len(ratios)))
    return sorted(found, key=lambda item: -item[1])


def straggler_line(node: str, times: float, last: int) -> str:
    """The follower's line for a straggler: ``"straggler: worker-2's ranks take 1.8x the median step time (last 3
    intervals; the other ranks wait for them at every step)"``."""
    return (f"straggler: {node}'s ranks take {times:.1f}x the median step time (last {last} intervals; the other "
            f"ranks wait for them at every step)")


def node_medians(records: list[dict]) -> dict[str, float]:
    """Each node's median step time over a run's records ({node: seconds}; {} when they have none): the median,
    over the intervals, of the median of its ranks' (:func:`node_step_times`). metrics.json's ``node_step_s``."""
    per_node: dict[str, list[float]] = {}
    for record in records:
        times = node_step_times(record)
        for node, seconds in (times[0] if times else {}).items():
            per_node.setdefault(node, []).append(seconds)
    return {node: round(_median(values), 6) for node, values in per_node.items()}


def run_stragglers(records: list[dict], ratio: float = 1.2, last: int = 3) -> dict[str, float]:
    """The nodes :func:`stragglers` named at any point of a run ({node: the highest ratio it was named with}), its
    records taken one interval after another as the follower took them."""
    intervals = [t for t in (node_step_times(r) for r in records if "event" not in r) if t is not None]
    named: dict[str, float] = {}
    for end in range(last, len(intervals) + 1):
        for node, times in stragglers(intervals[:end], ratio, last):
            named[node] = max(times, named.get(node, 0.0))
    return named

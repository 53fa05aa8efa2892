"""Stragglers: train/common/stragglers.py's detection on progress records shaped as rank 0 writes them, the
end-of-run summary's "step time" row, and the rank's own step time (train/rank/callbacks.py's StepTimer) on a real
torch model."""

import json
import sys
import time

import pytest

from train.common.stragglers import node_medians, node_step_times, run_stragglers, straggler_line, stragglers
from train.controller.progress import summary_lines


def record(step, **nodes):
    """A progress record of ``step`` with each node's ranks' step times (seconds), as ProgressCallback writes it."""
    return {"step": step, "max_steps": 100, "loss": 5.0, "step_s": {k.replace("_", "-"): v for k, v in nodes.items()}}


def fast(step, worker2=(0.10, 0.11)):
    return record(step, head_1=[0.10, 0.10], worker_1=[0.11, 0.10], worker_2=list(worker2))


def test_each_interval_gives_every_nodes_median_and_the_median_rank():
    nodes, median = node_step_times(record(10, head_1=[0.1, 0.3], worker_1=[0.2], worker_2=[0.4, 0.5, 0.9]))
    assert nodes == {"head-1": pytest.approx(0.2), "worker-1": 0.2, "worker-2": 0.5}
    assert median == pytest.approx(0.35)  # of 0.1 0.2 0.3 0.4 0.5 0.9
    assert node_step_times({"step": 3, "loss": 1.0}) is None  # one rank, or an older version's record
    assert node_step_times(record(3, head_1=[0.1], worker_1=[None])) is None
    assert node_step_times({"event": "save", "step": 10}) is None


def test_a_node_slower_than_the_threshold_in_each_of_the_last_intervals_is_named():
    intervals = [node_step_times(fast(s, worker2=(0.19, 0.18))) for s in (10, 20, 30)]
    named = stragglers(intervals, ratio=1.2, last=3)
    assert [node for node, _ in named] == ["worker-2"]
    # the median rank is 0.105 (of 0.10 0.10 0.10 0.11 0.18 0.19); worker-2's median 0.185
    assert named[0][1] == pytest.approx(0.185 / 0.105)
    assert straggler_line("worker-2", named[0][1], 3) == (
        "straggler: worker-2's ranks take 1.8x the median step time (last 3 intervals; the other ranks wait for them "
        "at every step)")


def test_one_slow_interval_in_three_or_too_few_intervals_name_nobody():
    slow, ok = fast(10, worker2=(0.3, 0.3)), fast(20)
    intervals = [node_step_times(r) for r in (slow, slow, ok)]
    assert stragglers(intervals, 1.2, 3) == []
    assert stragglers(intervals[:2], 1.2, 3) == []  # two intervals: not yet "consistently"
    assert stragglers(intervals[:2], 1.2, 2) == [("worker-2", pytest.approx(0.3 / 0.105))]
    # 1.15x the median is within a 1.2 threshold; 0 names none
    near = [node_step_times(fast(s, worker2=(0.121, 0.121))) for s in (10, 20, 30)]
    assert stragglers(near, 1.2, 3) == [] and stragglers(near, 1.1, 3) != []
    assert stragglers([node_step_times(fast(s, worker2=(1, 1))) for s in (10, 20, 30)], 0, 3) == []


def test_the_run_names_a_node_that_was_a_straggler_at_any_time_and_gives_each_nodes_median():
    records = [fast(10), {"event": "save", "step": 10}] + [fast(s, worker2=(0.2, 0.22)) for s in (20, 30, 40)] + \
        [fast(50)]
    assert run_stragglers(records, 1.2, 3) == {"worker-2": pytest.approx(0.21 / 0.105)}
    assert run_stragglers(records, 1.2, 4) == {}
    medians = node_medians(records)
    assert medians == {"head-1": 0.1, "worker-1": 0.105, "worker-2": 0.21}


def test_the_summary_gives_each_nodes_step_time_and_names_the_straggler(tmp_path):
    records = [fast(s, worker2=(0.2, 0.22)) for s in (10, 20, 30)]
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "metrics.json").write_text(json.dumps({"steps": 30, "max_steps": 100, "node_step_s": node_medians(
        records)}))
    rows = [line for line in summary_lines(tmp_path, "r") if line.startswith("step time")]
    assert rows == ["step time    head-1 0.1 s, worker-1 0.105 s, worker-2 0.21 s (each node's median of its ranks' "
                    "own compute per step); straggler: worker-2 (2.0x the median)"]
    assert not any("straggler" in line for line in summary_lines(tmp_path, "r", straggler={"ratio": 2.5,
                                                                                           "intervals": 3}))
    (tmp_path / "progress.jsonl").write_text('{"step": 10, "max_steps": 100, "loss": 5.0}\n')
    (tmp_path / "metrics.json").write_text(json.dumps({"steps": 10, "node_step_s": None}))
    assert not any(line.startswith("step time") for line in summary_lines(tmp_path, "r"))


@pytest.mark.torch
def test_a_ranks_step_time_is_its_forward_passes_inside_training_steps():
    """StepTimer on a real torch module: a forward made slower by 50 ms counts 50 ms more per step; forward passes
    outside a step (evaluation) and time outside the forward (the collectives of backward and the optimizer step)
    do not count; micro-batches of one step add up."""
    torch = pytest.importorskip("torch")
    from train.rank.callbacks import StepTimer

    class Slow(torch.nn.Module):
        def __init__(self, delay):
            super().__init__()
            self.linear, self.delay = torch.nn.Linear(8, 8), delay

        def forward(self, x):
            time.sleep(self.delay)
            return self.linear(x)

    def timed(delay, micro=1):
        model, timer = Slow(delay), StepTimer()
        timer.attach(model, cuda=False)
        model(torch.ones(2, 8))  # not inside a step
        for _ in range(2):
            timer.step_begin()
            for _ in range(micro):
                model(torch.ones(2, 8)).sum().backward()
            time.sleep(0.05)  # waiting in a collective, outside the forward
            timer.step_end()
        return timer.take()

    quick, slow, two = timed(0.0), timed(0.05), timed(0.05, micro=2)
    assert quick < 0.02 and 0.05 <= slow < 0.07 and 0.1 <= two < 0.14, (quick, slow, two)
    timer = StepTimer()
    assert timer.take() is None  # no step timed


def test_the_follower_names_a_straggler_once_and_again_only_after_it_kept_up():
    """roles/train_launch's deepspeed_watch part, fed the records one poll after another as the follower reads them."""
    import importlib.util
    from pathlib import Path

    pytest.importorskip("ansible")
    path = Path(__file__).resolve().parents[2] / "roles" / "train_launch" / "action_plugins" / "deepspeed_watch.py"
    spec = importlib.util.spec_from_file_location("dsc_deepspeed_watch", path)
    watch = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = watch  # its dataclasses look their module up
    spec.loader.exec_module(watch)
    part = watch.Stragglers({"ratio": 1.2, "intervals": 3})
    slow = lambda step: fast(step, worker2=(0.2, 0.2))  # noqa: E731
    line = straggler_line("worker-2", 0.2 / 0.105, 3)
    assert part.note([slow(10), {"event": "save", "step": 10}, slow(20)]) == []
    assert part.note([slow(30)]) == [line]
    assert part.note([slow(40)]) == []  # said once
    assert part.note([fast(50)]) == []
    assert part.note([slow(60), slow(70), slow(80)]) == [line]  # a straggler again
    assert watch.Stragglers({"ratio": 0, "intervals": 3}).note([slow(s) for s in (10, 20, 30)]) == []

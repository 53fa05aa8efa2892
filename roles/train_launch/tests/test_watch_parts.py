"""The follower's parts (roles/train_launch/action_plugins/deepspeed_watch.py) one by one, without Ansible: the
progress part reading real files in pieces as a run writes them, the grace after a node's ranks failed and the bound
on a run's end. (The whole follower, through a real ansible-playbook: test_liveness.py.)"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("ansible")  # the plugin imports Ansible's display (the controller's .venv has it)

PLUGIN = Path(__file__).resolve().parents[1] / "action_plugins" / "deepspeed_watch.py"
_spec = importlib.util.spec_from_file_location("deepspeed_watch", PLUGIN)
watch = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = watch  # its dataclasses look their module up there
_spec.loader.exec_module(watch)


def read_from(path, offset):
    """What AsyncFollowAction._read_from gives: the file's text from byte ``offset`` on ('' when it is missing)."""
    try:
        return Path(path).read_bytes()[offset:].decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def step(n, most=3):
    return json.dumps({"step": n, "max_steps": most, "loss": 2.0 - n / 10, "samples_per_s": 10.0}) + "\n"


def test_progress_takes_complete_lines_only_notes_the_failed_node_and_the_last_step(tmp_path):
    progress, log = tmp_path / "progress.jsonl", tmp_path / "train.log"
    part = watch.Progress(read_from, str(progress), str(log), echo_log=False, grace_s=15)
    run = watch.Run(started=0.0, checkpoint=None)
    assert part.read(run) == [] and run.recent == []  # nothing written yet

    first = step(1) + json.dumps({"event": "save", "step": 1, "checkpoint": "checkpoint-1"}) + "\n"
    progress.write_text(first + step(2)[:10])  # a line still being written
    log.write_text("[rank 0/4 host=head-1] started\npdsh@head-1: worker-1: ssh exited with exit code 137\nhalf a li")
    records = part.read(run)
    assert [r.get("step") for r in records] == [1, 1] and part.progress_offset == len(first.encode())
    assert run.dead == ("worker-1", 137) and run.dead_line.startswith("pdsh@head-1: worker-1:")
    assert run.recent == ["[rank 0/4 host=head-1] started", "pdsh@head-1: worker-1: ssh exited with exit code 137"]
    part.show(run, records)
    assert run.seen == 1 and run.checkpoint == 1 and run.last_step_at is None

    progress.write_text(first + step(2) + step(3))
    with log.open("a") as f:
        f.write("ne\n")
    records = part.read(run)
    assert [r["step"] for r in records] == [2, 3] and run.recent[-1] == "half a line"
    part.show(run, records)
    assert run.seen == 3 and run.last["step"] == 3 and run.last_step_at is not None  # step 3 of max_steps 3


def test_the_grace_after_a_failed_node_ends_with_a_failure_naming_it(tmp_path):
    run = watch.Run(started=100.0, checkpoint=None, recent=["worker-1: Traceback", "worker-1: RuntimeError: boom",
                                                            "head-1: still training"])
    run.dead, run.dead_line, run.dead_at = ("worker-1", 1), "pdsh@head-1: worker-1: ssh exited with exit code 1", 200.0
    assert watch.grace_failure(run, 214.0, 15.0, None) is None
    failure = watch.grace_failure(run, 215.0, 15.0, None)
    assert failure.dead_host == "worker-1" and failure.dead_line == run.dead_line
    assert failure.dead_lines == ["worker-1: Traceback", "worker-1: RuntimeError: boom"]
    assert failure.msg.startswith("ranks on worker-1 ended with exit code 1 (")
    assert "within 15 s" in failure.msg and failure.silent_nodes == []


def test_the_end_bound_counts_from_the_last_steps_record():
    run = watch.Run(started=0.0, checkpoint=2, last={"step": 3, "max_steps": 3}, recent=["Writing model shards"])
    assert watch.end_bound_failure(run, 1000.0, 60.0, None) is None  # the last step has not come
    run.last_step_at = 500.0
    assert watch.end_bound_failure(run, 559.0, 60.0, None) is None
    assert watch.end_bound_failure(run, 10_000.0, 0.0, None) is None  # 0: no bound
    failure = watch.end_bound_failure(run, 560.0, 60.0, None)
    assert "did not end within 1m00s of the run's last step" in failure.msg and "(3 of 3;" in failure.msg
    assert "checkpoints up to step 2 are complete" in failure.msg and "Writing model shards" in failure.msg

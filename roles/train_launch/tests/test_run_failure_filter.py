"""roles/train_launch/filter_plugins/run_failure.py: the "Failed node: ..." sentence of a failed run's error, called
directly with what follow.yml passes (the unreachable nodes, each node's ranks, the dead ranks, the watch result, the
dead host)."""

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "run_failure_filter", Path(__file__).resolve().parents[1] / "filter_plugins" / "run_failure.py")
failure = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(failure)
run_failure = failure.run_failure

HELD = {"head-1": [0, 1], "worker-1": [2], "worker-2": [3, 4, 5]}
KILLED = {"node": "worker-1", "rank": 2, "what": "killed: no exit recorded, pid 4242"}
ERROR = {"node": "head-1", "rank": 0, "what": "error: RuntimeError: Connection closed by peer"}
ERROR_W2 = {"node": "worker-2", "rank": 4, "what": "exit 1"}


def test_nothing_to_blame_gives_nothing():
    assert run_failure([], HELD, [], {}, "") == ""
    assert run_failure([], HELD, [], {"dead_lines": ["Traceback"], "dead_host": ""}, None) == ""


def test_one_unreachable_node_with_one_rank():
    assert run_failure(["worker-1"], HELD, [], {}, "worker-1") == \
        "Failed node: worker-1 (unreachable: it held rank 2). "


def test_several_unreachable_nodes_each_with_their_ranks():
    assert run_failure(["worker-2", "worker-1"], HELD, [], {}, "") == (
        "Failed node: worker-2 (unreachable: it held ranks 3, 4, 5), worker-1 (unreachable: it held rank 2). ")


def test_an_unreachable_node_comes_first_then_the_ranks_that_died_on_the_others():
    # the dead rank on the unreachable node is left out, and so are its last lines
    text = run_failure(["worker-2"], HELD, [ERROR_W2, KILLED, ERROR],
                       {"dead_lines": ["Traceback", "RuntimeError"], "dead_host": ""}, "head-1")
    assert text == ("Failed node: worker-2 (unreachable: it held ranks 3, 4, 5); then: rank 2 on worker-1 "
                    "(killed: no exit recorded, pid 4242), rank 0 on head-1 (error: RuntimeError: Connection closed "
                    "by peer). ")


def test_an_unreachable_node_missing_from_held_holds_no_rank():
    assert run_failure(["worker-9"], HELD, [], {}, "") == "Failed node: worker-9 (unreachable: it held rank ). "


def test_the_first_dead_rank_names_the_node_then_the_others():
    assert run_failure([], HELD, [KILLED, ERROR], {}, "") == (
        "Failed node: worker-1, rank 2 (killed: no exit recorded, pid 4242); then: rank 0 on head-1 "
        "(error: RuntimeError: Connection closed by peer). ")
    assert run_failure([], HELD, [KILLED, ERROR, ERROR_W2], {}, "") == (
        "Failed node: worker-1, rank 2 (killed: no exit recorded, pid 4242); then: rank 0 on head-1 "
        "(error: RuntimeError: Connection closed by peer), rank 4 on worker-2 (exit 1). ")


def test_one_dead_rank_and_its_nodes_last_lines():
    watch = {"msg": "rank 2 died", "dead_lines": ["Traceback (most recent call last):", "MemoryError"],
             "dead_host": "worker-1"}
    assert run_failure([], HELD, [KILLED], watch, "worker-1") == (
        "Failed node: worker-1, rank 2 (killed: no exit recorded, pid 4242); its last lines: "
        "Traceback (most recent call last): | MemoryError. ")


@pytest.mark.parametrize("dead_host", ["", None])
def test_last_lines_without_a_dead_host_are_the_heads_launchers(dead_host):
    watch = {"dead_lines": ["OSError: boom"], "dead_host": dead_host}
    assert run_failure([], HELD, [], watch, "head-1") == "Failed node: head-1; its last lines: OSError: boom. "


def test_last_lines_of_another_node_are_left_out():
    watch = {"dead_lines": ["worker-2: OSError"], "dead_host": "worker-2"}
    assert run_failure([], HELD, [KILLED], watch, "worker-2") == \
        "Failed node: worker-1, rank 2 (killed: no exit recorded, pid 4242). "


def test_the_dead_host_alone_when_no_rank_is_known():
    assert run_failure([], HELD, [], {}, "worker-2") == "Failed node: worker-2. "
    assert run_failure([], HELD, [], {"dead_lines": []}, "worker-2") == "Failed node: worker-2. "


def test_the_filter_is_registered_under_its_name():
    assert failure.FilterModule().filters() == {"run_failure": run_failure, "run_kept": failure.run_kept}


def test_what_a_failed_run_kept_names_its_complete_checkpoints_in_step_order_and_the_resume_command():
    """The end of every message that ends a run badly (follow.yml's error, stopped.yml): the checkpoints that came
    back, in step order (not the file system's), and `-e resume=<run>`; none: it can only start again."""
    kept = failure.run_kept(["/o/r/checkpoint-380", "/o/r/checkpoint-40", "/o/r/checkpoint-360/",
                             "/o/r/checkpoint-x"], "r")
    assert kept == (", with its complete checkpoints (checkpoint-40, checkpoint-360, checkpoint-380); to go on from "
                    "the newest: ansible-playbook train.yml -e resume=r")
    assert failure.run_kept([], "r") == "; it had saved no complete checkpoint, so it can only start again"
    assert failure.run_kept(None, "r") == failure.run_kept([], "r")

"""roles/train_launch/filter_plugins/ungathered.py: the error of a run whose checkpoints the head could not gather,
called with what ungathered.yml passes (the final gather's ``incomplete``, the plan, each node's ranks)."""

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "ungathered_filter", Path(__file__).resolve().parents[1] / "filter_plugins" / "ungathered.py")
_mod = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_mod)
ungathered = _mod.ungathered

PLAN = {"run_name": "r1", "head": "head-1", "hosts": ["head-1", "worker-1", "worker-2"],
        "paths": {"output": "/opt/dsc/runs/r1/output", "out_dir": "/home/me/outputs/r1"}}
HELD = {"head-1": [0], "worker-1": [1, 2], "worker-2": []}
HOSTKEY = "worker-1: worker-1's ssh host key is not the one the head trusts (Host key verification failed.)"


def test_nothing_incomplete_says_nothing():
    assert ungathered({}, PLAN, HELD) == ""


def test_one_checkpoint_names_what_is_missing_where_it_is_and_how_to_fetch_it():
    said = ungathered({"checkpoint-20": ["no optimizer shard of ranks 1, 2 in global_step20/", HOSTKEY]}, PLAN, HELD)
    assert said.startswith("run r1 trained to its end, but the head head-1 could not gather every node's part of "
                           "checkpoint-20, so it did not come back to /home/me/outputs/r1 (its model, metrics and "
                           "logs did): checkpoint-20: no optimizer shard of ranks 1, 2 in global_step20/; " + HOSTKEY)
    # where: the path on every node and the ranks each holds (a node without ranks is not named)
    assert "each node still holds its part in /opt/dsc/runs/r1/output/checkpoint-20/ (head-1 (rank 0), " \
           "worker-1 (ranks 1, 2))." in said
    assert "worker-2" not in said.split("holds its part")[1]
    assert said.endswith("then ansible-playbook train.yml -e attach=r1 gathers it on the head and brings it back.")


def test_several_checkpoints_in_step_order():
    said = ungathered({"checkpoint-100": ["x"], "checkpoint-20": ["y"]}, PLAN, HELD)
    assert "part of checkpoint-20, checkpoint-100, so they did not come back" in said
    assert said.index("checkpoint-20: y") < said.index("checkpoint-100: x")
    assert "in /opt/dsc/runs/r1/output/checkpoint-*/" in said
    assert "gathers them on the head and brings them back" in said

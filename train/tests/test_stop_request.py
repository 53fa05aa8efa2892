"""train/rank/callbacks.py StopRequestCallback: the save-and-stop before a Slurm job's time limit. Two real gloo
ranks, each with its own node's stop file (only rank 1's exists): both save and stop at the same step."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch
pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]

RANK = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import torch.distributed as dist
from types import SimpleNamespace
from transformers import TrainerControl, TrainerState
from train.rank.callbacks import ProgressCallback, StopRequestCallback

rank, tmp = int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=2)
progress = ProgressCallback(f"{tmp}/out{rank}", 8)
args = SimpleNamespace(device="cpu", logging_strategy="steps", output_dir=f"{tmp}/out{rank}")
state = TrainerState(max_steps=100, is_world_process_zero=rank == 0)
progress.on_train_begin(args, state, TrainerControl())
stop = StopRequestCallback(f"{tmp}/node{rank}/stop-requested", progress, every=5)
seen = []
for step in range(1, 31):
    if step == 12 and rank == 1:
        open(f"{tmp}/node1/stop-requested", "w").write("1796420000\n")
    state.global_step = step
    control = TrainerControl()
    stop.on_step_end(args, state, control)
    if control.should_training_stop:
        seen.append({"step": step, "save": control.should_save})
        break
progress.on_train_end(args, state, TrainerControl())
# both ranks past their last collective, then the group torn down before exit: a gloo group left to the interpreter's
# exit can abort it ("terminate called without an active exception", seen once in CI)
dist.barrier()
dist.destroy_process_group()
print(json.dumps(seen), flush=True)
"""


def test_every_rank_saves_and_stops_at_the_same_step_when_one_node_asks(tmp_path):
    for r in (0, 1):
        (tmp_path / f"node{r}").mkdir()
    env = dict(os.environ, DSC_RUN_NAME="r9")
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(REPO), str(r), str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    seen = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    # rank 1's file appears at step 12; the next check (step 15) stops both, rank 0 though its own node has none
    assert seen == [[{"step": 15, "save": True}], [{"step": 15, "save": True}]], seen
    events = [json.loads(line) for line in (tmp_path / "out0" / "progress.jsonl").read_text().splitlines()]
    assert events == [{"event": "stop_request", "step": 15, "max_steps": 100, "run": "r9", "requested_at": None}]
    assert not (tmp_path / "node0" / "stop-requested").exists()

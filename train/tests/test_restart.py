"""train/controller/restart.py: which failed runs start again by themselves, from which checkpoint, on which nodes,
with which progress line, and what the next attempt is given (-e resume=, -e train_restart=)."""

import json
import zipfile
from pathlib import Path

import pytest

from train.controller import restart
from train.node import checkpoints


def plan(tmp_path, hosts=("head-1", "worker-1", "worker-2"), slots=1, launcher="pdsh"):
    hosts = list(hosts)
    return {"run_name": "r1", "hosts": hosts, "head": hosts[0], "ranks": {h: slots for h in hosts},
            "world_size": slots * len(hosts), "launcher": launcher, "paths": {"out_dir": str(tmp_path / "r1")}}


def complete_checkpoint(out_dir: Path, step: int, world_size: int) -> Path:
    """A checkpoint as train.yml brings it back (every rank's files, marked complete); its torch files are zip
    archives, as torch.save writes them."""
    d = out_dir / f"checkpoint-{step}"
    tag = d / f"global_step{step}"
    tag.mkdir(parents=True)
    (d / "latest").write_text(tag.name)
    (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))

    def pt(path):
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", b"x" * 64)

    pt(tag / "mp_rank_00_model_states.pt")
    for r in range(world_size):
        pt(tag / f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
        pt(d / f"rng_state_{r}.pth")
    assert checkpoints.mark(d, world_size, 2) == []
    return d


LOST = "worker-2 did not answer (Connection timed out), 3 checks in a row over 16s (42s after the launch)"


def test_a_lost_worker_restarts_the_run_on_the_others_from_its_newest_checkpoint(tmp_path):
    p = plan(tmp_path)
    complete_checkpoint(Path(p["paths"]["out_dir"]), 20, 3)
    complete_checkpoint(Path(p["paths"]["out_dir"]), 40, 3)
    d = restart.decide(plan=p, gone=["worker-2"], last_step=47, error=LOST, now=1000.0, max_restarts=3)
    assert d["retry"] is True
    assert d["line"] == ("fault: worker-2 did not answer (3 checks in 16 s) — restart 1 of 3 from checkpoint-40 on "
                         "head-1, worker-1 (world size 3 -> 2); worker-2 left out")
    state = d["extra_vars"]["train_restart"]
    assert d["extra_vars"]["resume"] == "r1"
    assert state["restarts"] == 1 and state["nodes"] == ["head-1", "worker-1"] and state["exclude"] == ["worker-2"]
    rec = state["faults"][0]
    assert rec["fault"]["kind"] == "node_lost" and rec["fault"]["node"] == "worker-2" and rec["fault"]["step"] == 47
    assert (rec["attempt"], rec["checkpoint_step"], rec["steps_lost"], rec["detect_s"]) == (1, 40, 7, 16.0)
    assert (rec["world_size"], rec["next_world_size"], rec["noticed_at"]) == (3, 2, 1000.0)
    # the next attempt fails too (a rank killed on worker-1): restart 2 of 3, worker-2 still left out
    p2 = dict(plan(tmp_path, hosts=state["nodes"]))
    d2 = restart.decide(plan=p2, dead=[{"node": "worker-1", "rank": 1, "what": "killed: no exit recorded, pid 9"}],
                        last_step=52, state=state, now=2000.0, max_restarts=3)
    assert d2["retry"] and "restart 2 of 3 from checkpoint-40 on head-1, worker-1 (world size 2 -> 2)" in d2["line"]
    assert d2["extra_vars"]["train_restart"]["exclude"] == ["worker-2"]
    assert [r["attempt"] for r in d2["extra_vars"]["train_restart"]["faults"]] == [1, 2]


def test_a_spare_takes_the_lost_nodes_place(tmp_path):
    p = plan(tmp_path, hosts=("head-1", "worker-1"), slots=2)
    complete_checkpoint(Path(p["paths"]["out_dir"]), 10, 4)
    d = restart.decide(plan=p, gone=["worker-1"], last_step=12, error=LOST.replace("worker-2", "worker-1"),
                       spares=["worker-2"], max_restarts=3)
    assert d["retry"] and d["extra_vars"]["train_restart"]["nodes"] == ["head-1", "worker-2"]
    assert "(world size 4 -> 4); worker-1 left out; spare worker-2 in place of worker-1" in d["line"]


@pytest.mark.parametrize("kw, says", [
    ({"max_restarts": 0}, "restarts are off (max_restarts=0)"),
    ({"min_nodes": 3}, "2 nodes would be left (head-1, worker-1), fewer than min_nodes=3: bring worker-2 back"),
    ({"gone": ["head-1"], "error": LOST.replace("worker-2", "head-1")}, "head-1 is the run's head"),
    ({"state": {"restarts": 3, "exclude": [], "faults": []}}, "the run has used its 3 restarts (max_restarts=3)"),
])
def test_what_is_not_restarted_says_why(tmp_path, kw, says):
    p = plan(tmp_path)
    complete_checkpoint(Path(p["paths"]["out_dir"]), 40, 3)
    args = {"gone": ["worker-2"], "last_step": 47, "error": LOST, "max_restarts": 3, **kw}
    d = restart.decide(plan=p, **args)
    assert d["retry"] is False and d["extra_vars"] == {} and d["line"] == ""
    assert d["reason"].startswith("not retried: ") and says in d["reason"], d["reason"]


def test_no_checkpoint_yet_is_not_restarted(tmp_path):
    d = restart.decide(plan=plan(tmp_path), gone=["worker-2"], last_step=3, error=LOST, max_restarts=3)
    assert not d["retry"] and "has no complete checkpoint yet" in d["reason"]


def test_a_slurm_job_whose_node_slurm_set_down_restarts_without_that_node(tmp_path):
    """Slurm ended the job NODE_FAIL (it is submitted with --no-requeue) with worker-2 down while worker-2 still
    answers ssh: the restart leaves worker-2 out (the follower's FailedNode)."""
    p = plan(tmp_path, launcher="slurm")
    complete_checkpoint(Path(p["paths"]["out_dir"]), 40, 3)
    d = restart.decide(plan=p, last_step=47, max_restarts=3,
                       slurm={"JobState": "NODE_FAIL", "Reason": "NodeDown", "FailedNode": "worker-2",
                              "FailedNodeReason": "test"})
    assert d["retry"] and d["extra_vars"]["train_restart"]["nodes"] == ["head-1", "worker-1"], d
    assert d["line"] == ("fault: Slurm took worker-2 for dead (Slurm: NODE_FAIL, reason NodeDown; worker-2 down: "
                         "test) — restart 1 of 3 from checkpoint-40 on head-1, worker-1 (world size 3 -> 2); "
                         "worker-2 left out"), d["line"]


def test_a_hang_restarts_without_the_stuck_ranks_node(tmp_path):
    p = plan(tmp_path)
    complete_checkpoint(Path(p["paths"]["out_dir"]), 40, 3)
    d = restart.decide(plan=p, last_step=47, max_restarts=3, error="no new logged step for 31s ...",
                       hung=[{"rank": 2, "host": "worker-2", "why": "wrote no stack: its process is stopped (state T)"}])
    assert d["retry"] and d["extra_vars"]["train_restart"]["exclude"] == ["worker-2"]
    assert d["line"].startswith("fault: rank 2 on worker-2 hung (wrote no stack: its process is stopped (state T)) — "
                                "restart 1 of 3 from checkpoint-40 on head-1, worker-1 (world size 3 -> 2)"), d["line"]


def test_a_liveness_bound_over_a_minute_is_read_whole(tmp_path):
    p = plan(tmp_path)
    complete_checkpoint(Path(p["paths"]["out_dir"]), 40, 3)
    d = restart.decide(plan=p, gone=["worker-2"], last_step=47, error=LOST.replace("16s", "1m02s"), max_restarts=3)
    assert "worker-2 did not answer (3 checks in 62 s)" in d["line"]
    assert d["record"]["detect_s"] == 62.0


def test_the_same_exception_at_the_same_step_twice_is_not_restarted_a_third_time(tmp_path):
    p = plan(tmp_path)
    complete_checkpoint(Path(p["paths"]["out_dir"]), 40, 3)
    boom = [{"node": "worker-1", "rank": 1, "what": "error: ValueError: bad batch at 0x7f00"}]
    first = restart.decide(plan=p, dead=boom, last_step=45, max_restarts=3)
    assert first["retry"] and first["extra_vars"]["train_restart"]["exclude"] == []  # an exception: no node to blame
    again = restart.decide(plan=p, dead=[{**boom[0], "what": "error: ValueError: bad batch at 0x7f99"}],
                           last_step=45, state=first["extra_vars"]["train_restart"], max_restarts=3)
    assert not again["retry"] and "the same error at step 45 as in attempt 1" in again["reason"]


def test_a_restarts_state_becomes_the_plans_attempts_and_the_summary_names_each_fault(tmp_path):
    """The next attempt's plan carries the faults so far (attempts.json, staged into the run directory); the summary
    and the follower's event lines say them in numbers."""
    from train.controller import progress
    from train.tests.test_plan import build

    p = plan(tmp_path)
    complete_checkpoint(Path(p["paths"]["out_dir"]), 40, 3)
    state = restart.decide(plan=p, gone=["worker-2"], last_step=47, error=LOST, now=1000.0, max_restarts=3)["extra_vars"][
        "train_restart"]
    nxt = build(tmp_path / "next", restart_state=state)
    assert nxt["attempts"] == state["faults"] and build(tmp_path / "first")["attempts"] == []
    record = {**state["faults"][0], "recover_s": 95.4}
    line = progress.fault_text(record)
    assert line == ("node_lost of worker-2 at step 47; noticed in 16 s, training again 95 s later; from checkpoint-40 "
                    "(7 steps lost) on head-1, worker-1 (world size 3 -> 2)")
    assert progress.format_event({"event": "restart", **state["faults"][0]}).startswith(
        "attempt 2 after a fault: node_lost of worker-2 at step 47; noticed in 16 s; from checkpoint-40")
    assert progress.format_event({"event": "recovered", "attempt": 2, "step": 45, "recover_s": 95.4}) == \
        "training again 95.4 s after the fault was noticed (step 45, attempt 2)"
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"steps": 80, "max_steps": 80, "attempts": [record]}))
    rows = progress.summary_lines(out, "r1")
    assert any(r.startswith("fault 1") and r.endswith(line) for r in rows), rows

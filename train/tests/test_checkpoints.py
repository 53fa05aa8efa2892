"""train/node/checkpoints.py: completeness of real torch/safetensors checkpoint files, marking, and the head's gather of
the other nodes' rank files with real rsync (over a stand-in for ssh that maps each node to its own directory)."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

# the torch tier (pytest.ini): the node venv's torch stack; skipped where it is not installed (make unit-fast)
pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
from safetensors.torch import save_file

from train.node import checkpoints

REPO = Path(__file__).resolve().parents[2]


def write_checkpoint(root: Path, step: int, ranks, world_size: int, rank0: bool = True, zero: bool = True):
    """The files DeepSpeed + the HF Trainer write for ``ranks`` of a ZeRO-2 run into ``root/checkpoint-<step>``."""
    d = root / f"checkpoint-{step}"
    tag = d / f"global_step{step}"
    tag.mkdir(parents=True, exist_ok=True)
    if rank0:
        torch.save({"module": {"w": torch.ones(4)}}, tag / "mp_rank_00_model_states.pt")
        (d / "latest").write_text(f"global_step{step}")
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        save_file({"w": torch.ones(8, 8)}, str(d / "model.safetensors"))
    for r in ranks:
        if zero:
            torch.save({"state": torch.full((16,), float(r))}, tag / f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
        torch.save({"rng": r}, d / f"rng_state_{r}.pth")
    return d


def test_a_whole_checkpoint_is_complete_and_marked(tmp_path):
    d = write_checkpoint(tmp_path, 10, [0, 1], 2)
    assert checkpoints.problems(d, 2, 2) == []
    assert checkpoints.mark(d, 2, 2) == []
    rec = checkpoints.marker(d)
    assert rec["step"] == 10 and rec["world_size"] == 2
    assert rec["files"]["global_step10/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"] > 0
    assert checkpoints.verify(d) == []
    assert checkpoints.latest_complete(tmp_path) == d


def test_missing_ranks_and_cut_off_files_are_named(tmp_path):
    d = write_checkpoint(tmp_path, 5, [0, 1], 3)
    found = checkpoints.problems(d, 3, 2)
    assert "no optimizer shard of rank 2 in global_step5/" in found
    assert "no RNG state of rank 2" in found
    assert checkpoints.mark(d, 3, 2) == found and checkpoints.marker(d) is None
    shard = d / "global_step5" / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # a save cut off half-way
    (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:-10])
    found = checkpoints.problems(d, 2, 2)
    assert any(p.startswith("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt is cut off") for p in found), found
    assert any(p.startswith("model.safetensors is cut off") for p in found), found


def test_a_marked_checkpoint_that_changed_no_longer_verifies(tmp_path):
    old = write_checkpoint(tmp_path, 5, [0, 1], 2)
    assert checkpoints.mark(old, 2) == []
    new = write_checkpoint(tmp_path, 10, [0, 1], 2)
    assert checkpoints.mark(new, 2) == []
    (new / "rng_state_1.pth").unlink()
    assert checkpoints.verify(new) == ["no RNG state of rank 1", "rng_state_1.pth is missing"]
    assert checkpoints.latest_complete(tmp_path) == old  # the newest that verifies
    (new / "trainer_state.json").write_text("{")  # cut off
    assert "no readable trainer_state.json (rank 0 had not finished saving)" in checkpoints.problems(new, 2)


FAKE_SSH = """#!/bin/sh
# ssh stand-in: drop the options, map the node's paths ($ROOT/head -> $ROOT/<node>), run the rest locally
while [ "$1" = "-o" ]; do shift 2; done
host=$1; shift
exec sh -c "$(echo "$*" | sed "s#$ROOT/head#$ROOT/$host#g")"
"""


def test_gather_pulls_each_nodes_rank_files_and_marks_the_checkpoint(tmp_path, monkeypatch):
    """Head: rank 0 and rank 1; worker-1: ranks 2, 3 (with its own copy of rank 0's files, as save_on_each_node
    writes them); worker-2 is unreachable. The gather leaves step 20 (rank 3 still saving) unmarked."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text(FAKE_SSH)
    (bindir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("ROOT", str(tmp_path))
    head, worker = tmp_path / "head" / "output", tmp_path / "worker-1" / "output"
    write_checkpoint(head, 10, [0, 1], 4)
    write_checkpoint(worker, 10, [2, 3], 4)
    (worker / "checkpoint-10" / "trainer_state.json").write_text('{"global_step": 10, "from": "worker"}')
    write_checkpoint(head, 20, [0, 1], 4)
    write_checkpoint(worker, 20, [2], 4, rank0=False)
    report = checkpoints.gather(head, ["worker-1"], 4, 2)
    assert report == {"complete": ["checkpoint-10"], "incomplete": {}, "errors": []}
    c10 = head / "checkpoint-10"
    assert (c10 / "global_step10" / "bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt").is_file()
    assert json.loads((c10 / "trainer_state.json").read_text()) == {"global_step": 10}  # rank files only
    assert checkpoints.marker(head / "checkpoint-20") is None
    final = checkpoints.gather(head, ["worker-1", "worker-2"], 4, 2, final=True)
    assert final["complete"] == [] and list(final["incomplete"]) == ["checkpoint-20"]
    assert "no optimizer shard of rank 3 in global_step20/" in final["incomplete"]["checkpoint-20"]
    assert any(e.startswith("worker-2: worker-2 has no such checkpoint directory (") for e in final["errors"]), final
    out = subprocess.run([sys.executable, "-m", "train.node.checkpoints", "latest", str(head)], cwd=REPO,
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"path": str(c10), "step": 10, "world_size": 4}


SLOW_SSH = """#!/bin/sh
# ssh stand-in that takes a second per node, recording when each node's copy began and ended (Unix time)
while [ "$1" = "-o" ]; do shift 2; done
host=$1; shift
echo "$host start $(date +%s.%N)" >> "$ROOT/calls"
sleep 1
sh -c "$(echo "$*" | sed "s#$ROOT/head#$ROOT/$host#g")"
rc=$?
echo "$host end $(date +%s.%N)" >> "$ROOT/calls"
exit $rc
"""


def slow_ssh(tmp_path, monkeypatch):
    """SLOW_SSH as ``ssh`` on PATH, the nodes' directories under ``tmp_path``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ssh").write_text(SLOW_SSH)
    (bindir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("ROOT", str(tmp_path))


def copy_spans(tmp_path):
    """{host: {"start": t, "end": t}} of each copy SLOW_SSH recorded (Unix time)."""
    spans = {}
    for line in (tmp_path / "calls").read_text().split("\n"):
        if line:
            host, what, at = line.split()
            spans.setdefault(host, {})[what] = float(at)
    return spans


def test_gather_pulls_from_every_node_at_once(tmp_path, monkeypatch):
    """Eight workers, one rank each: the head pulls their rank files in overlapping copies, not one node after
    another (the copies' start and end times), and the checkpoint is complete with every rank's files."""
    slow_ssh(tmp_path, monkeypatch)
    workers = [f"worker-{i}" for i in range(1, 9)]
    head = tmp_path / "head" / "output"
    write_checkpoint(head, 10, [0], 9)
    for i, w in enumerate(workers, start=1):
        write_checkpoint(tmp_path / w / "output", 10, [i], 9, rank0=False)
    report = checkpoints.gather(head, workers, 9, 2)
    assert report == {"complete": ["checkpoint-10"], "incomplete": {}, "errors": []}, report
    spans = copy_spans(tmp_path)
    assert sorted(spans) == sorted(workers)
    first_end = min(s["end"] for s in spans.values())
    started_before = [h for h, s in spans.items() if s["start"] < first_end]
    assert len(started_before) == len(workers), spans  # every copy began before the first one ended


def test_a_failed_copy_says_why_in_words_from_rsyncs_and_ssh_own_lines(tmp_path):
    """rsync's last line ("rsync error: unexplained error (code 255)") names no cause: the line before it does. A real
    rsync over a real ssh to a port nothing listens on, then the lines ssh prints for a changed host key."""
    res = subprocess.run(["rsync", "-a", "--timeout=10", "-e", "ssh -p 1 -o BatchMode=yes -o ConnectTimeout=5",
                          "127.0.0.1:/nonexistent/", str(tmp_path / "dst")], capture_output=True, text=True)
    # rsync ends with 255 (ssh's status) or 12 ("error in rsync protocol data stream") as its read of the closed
    # connection and ssh's exit race: either way its own last line names no cause
    last = res.stderr.splitlines()[-1]
    assert res.returncode in (12, 255) and last.startswith("rsync error: ") and "refused" not in last, res.stderr
    said = checkpoints.copy_failure("worker-1", res.returncode, res.stderr)
    assert said.startswith("worker-1: worker-1 refuses ssh (is sshd running there?) (ssh: connect to host "
                           "127.0.0.1 port 1: Connection refused)"), said
    changed = ("@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
               "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
               "Host key for worker-1 has changed and you have requested strict checking.\n"
               "Host key verification failed.\n"
               "rsync: connection unexpectedly closed (0 bytes received so far) [Receiver]\n"
               "rsync error: unexplained error (code 255) at io.c(232) [Receiver=3.2.7]\n")
    assert checkpoints.copy_failure("worker-1", 255, changed) == (
        "worker-1: worker-1's ssh host key is not the one the head trusts (a reinstalled node, or another machine at "
        "its address; ansible-playbook playbooks/ssh_mesh.yml says which key and how to accept it) (Host key "
        "verification failed.)")
    assert checkpoints.copy_failure("w", 23, "rsync: some other trouble\n") == "w: rsync: some other trouble"
    assert checkpoints.copy_failure("w", 12, "") == "w: rc 12"


def test_pull_logs_brings_every_nodes_rank_logs_to_the_head_at_once(tmp_path, monkeypatch):
    """The end of a run on 1 + 6 nodes: the head pulls the other nodes' per-rank logs (only those: a node's other
    files stay) from all of them at once with real rsync over the ssh stand-in, and names a node whose logs it
    could not get; the CLI prints the same as JSON."""
    slow_ssh(tmp_path, monkeypatch)
    workers = [f"worker-{i}" for i in range(1, 7)]
    head = tmp_path / "head" / "logs"  # not there yet: pull_logs makes it
    for i, w in enumerate(workers, start=1):
        logs = tmp_path / w / "logs"
        logs.mkdir(parents=True)
        for r in (2 * i, 2 * i + 1):
            (logs / f"{w}.rank{r}.log").write_text(f"rank {r} on {w}\n")
        (logs / "other.txt").write_text("not a rank log")
    assert checkpoints.pull_logs(head, workers) == []
    got = sorted(p.name for p in head.iterdir())
    assert got == sorted(f"{w}.rank{r}.log" for i, w in enumerate(workers, start=1) for r in (2 * i, 2 * i + 1))
    assert (head / "worker-3.rank7.log").read_text() == "rank 7 on worker-3\n"
    spans = copy_spans(tmp_path)
    first_end = min(s["end"] for s in spans.values())
    assert sum(s["start"] < first_end for s in spans.values()) >= 4, spans  # overlapping, not node after node
    (tmp_path / "calls").unlink()
    out = subprocess.run([sys.executable, "-m", "train.node.checkpoints", "pull-logs", "--dir", str(head), "--hosts",
                          "worker-1,worker-9"], cwd=REPO, capture_output=True, text=True, check=True)
    failed = json.loads(out.stdout)["failed"]
    assert len(failed) == 1 and failed[0].startswith("worker-9: "), failed


def test_a_universal_conversion_that_fails_leaves_nothing_half_written_and_says_why(tmp_path):
    """The converter run with an interpreter that has no DeepSpeed: a RuntimeError naming the converter, its exit
    status and its own last line; no temporary folder, no latest_universal; an incomplete checkpoint is refused."""
    d = write_checkpoint(tmp_path, 10, [0, 1], 2)
    with pytest.raises(RuntimeError, match=r"checkpoint-10 is not a complete checkpoint: .*never found complete"):
        checkpoints.universal(d)
    assert checkpoints.mark(d, 2, 2) == []
    no_deepspeed = tmp_path / "venv-without-deepspeed"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(no_deepspeed)], check=True)
    with pytest.raises(RuntimeError, match=r"ds_to_universal failed on .*global_step10 \(rc 1\): .*No module named"):
        checkpoints.universal(d, python=str(no_deepspeed / "bin" / "python"))
    assert sorted(p.name for p in d.iterdir() if "universal" in p.name) == []
    assert checkpoints.universal_tag(d) is None and checkpoints.verify(d) == []

"""train/rank_status.py with real processes: each way a rank ends leaves the record the playbook reads."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys, time
sys.path.insert(0, %r)
from train import rank_status
rank_status.record_start(rank=3, world_size=4, local_rank=1, host="node-x", job_file=sys.argv[1])
print("ready", flush=True)
how = sys.argv[2]
if how == "error":
    raise RuntimeError("a file it needs is missing")
if how == "wait":
    time.sleep(60)
"""


def run_child(tmp_path, how):
    job = tmp_path / "job.json"
    job.write_text("{}")
    proc = subprocess.Popen([sys.executable, "-c", CHILD % str(REPO), str(job), how], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc, tmp_path / "ranks" / "rank-3.json"


def status(path):
    return json.loads(path.read_text())


@pytest.mark.parametrize("how, end", [("finish", "finished"), ("error", "error: RuntimeError: a file it needs is missing")])
def test_a_rank_that_ends_by_itself_says_how(tmp_path, how, end):
    proc, path = run_child(tmp_path, how)
    proc.wait(timeout=30)
    got = status(path)
    assert got["end"] == end
    assert (got["rank"], got["world_size"], got["local_rank"], got["host"], got["pid"]) == (3, 4, 1, "node-x", proc.pid)


def test_sigterm_is_recorded_and_sigkill_leaves_no_end(tmp_path):
    proc, path = run_child(tmp_path, "wait")
    assert status(path)["end"] is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert status(path)["end"] == "terminated"

    other = tmp_path / "killed"
    other.mkdir()
    proc, path = run_child(other, "wait")
    proc.kill()
    proc.wait(timeout=30)
    assert status(path)["end"] is None


def test_dead_ranks_order_killed_then_own_errors_then_missing_then_peer_errors():
    from train.rank_status import dead_ranks

    records = [{"rank": 1, "end": "terminated"}, {"rank": 5, "end": None, "alive": False},
               {"rank": 2, "end": "error: RuntimeError: Connection closed by peer [10.0.0.2]:4000"},
               {"rank": 3, "end": "finished"}, {"rank": 4, "end": None, "alive": True},
               {"rank": 6, "end": "never started"}, {"rank": 0, "end": "error: FileNotFoundError: /data/x"}]
    assert [r["rank"] for r in dead_ranks(records)] == [5, 0, 6, 2]


def test_read_node_sees_live_dead_and_missing_ranks(tmp_path):
    from train.rank_status import read_node

    proc, path = run_child(tmp_path, "wait")
    try:
        (tmp_path / "ranks" / "rank-4.json").write_text(json.dumps({"rank": 4, "pid": 2 ** 22 + 7, "end": None}))
        got = {r["rank"]: r for r in read_node(tmp_path / "ranks", 3, 3)}
        assert got[3]["alive"] is True and got[3]["end"] is None
        assert got[4]["alive"] is False
        assert got[5] == {"rank": 5, "end": "never started", "alive": False}
    finally:
        proc.kill()
        proc.wait()


def test_without_a_run_directory_nothing_is_written(tmp_path, monkeypatch):
    from train import rank_status

    monkeypatch.delenv("DSC_JOB_FILE", raising=False)
    assert rank_status.record_start(0, 1, 0, "h") is None


def test_the_command_line_reads_a_nodes_ranks_without_naming_the_run_directory(tmp_path):
    """stop.yml runs it while it stops every process whose command line holds <runs>/<run>/: it must not be one."""
    (tmp_path / "r1" / "ranks").mkdir(parents=True)
    (tmp_path / "r1" / "ranks" / "rank-2.json").write_text(json.dumps({"rank": 2, "pid": 2 ** 22 + 9, "end": None}))
    out = subprocess.run([sys.executable, "-m", "train.rank_status", str(tmp_path), "r1", "2", "2"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    assert [r["rank"] for r in got] == [2, 3] and got[0]["alive"] is False and got[1]["end"] == "never started"
    assert f"{tmp_path}/r1/" not in " ".join([str(tmp_path), "r1", "2", "2"])

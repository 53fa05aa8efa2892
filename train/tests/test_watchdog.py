"""train/node/watchdog.py: the hang watchdog's bound, and every rank's stack captured from real processes (one of
them stopped with SIGSTOP, one elsewhere than the others) with the odd ranks named."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train.node.watchdog import dump_node, hang_bound, main_thread, odd_ranks, parse_dump, where

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("intervals, floor, factor, first, seen, bound", [
    ([], 600, 5, 1800, 0, 1800),  # before the first step: the allowance
    ([], 600, 5, 0, 0, None),  # no allowance: unbounded before the first step
    ([], 600, 5, 1800, 1, 600),  # one step, no interval measured yet: the floor
    ([2.0, 3.5, 2.5], 600, 5, 1800, 4, 600),  # fast steps: the floor
    ([20.0, 150.0, 30.0], 600, 5, 1800, 4, 750),  # an interval with a save in it: 5 x 150 s
    ([20.0, 150.0], 30, 4, 60, 3, 600),
    ([1.0], 0, 5, 1800, 3, None),  # floor 0: the watchdog is off
    ([1.0, None, -1], 10, 5, 60, 3, 10),  # a missing or negative interval is not taken in
])
def test_the_bound_comes_from_the_runs_own_slowest_logging_interval(intervals, floor, factor, first, seen, bound):
    assert hang_bound(intervals, floor, factor, first, seen) == bound


CHILD = """
import os, sys, time
sys.path.insert(0, {repo!r})
from train.node import rank_status, watchdog
run_dir, rank, host, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
log = os.open(os.path.join(run_dir, "logs", f"{{host}}.rank{{rank}}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
os.dup2(log, 2)  # the rank's stderr is its log (bootstrap's tee in a real run)
rank_status.record_start(rank, 3, rank, host, job_file=os.path.join(run_dir, "job.json"))
assert watchdog.register_stack_dump()

def all_reduce_wait():
    while True:
        time.sleep(0.05)

def elsewhere_in_forward():
    while True:
        time.sleep(0.05)

print("ready", flush=True)
(elsewhere_in_forward if mode == "elsewhere" else all_reduce_wait)()
"""


def start_ranks(tmp_path, modes):
    run_dir = tmp_path / "runs" / "r1"
    (run_dir / "logs").mkdir(parents=True)
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(repo=str(REPO)))
    procs = []
    for rank, (host, mode) in enumerate(modes):
        p = subprocess.Popen([sys.executable, str(script), str(run_dir), str(rank), host, mode],
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    return run_dir, procs


def test_every_ranks_stack_is_captured_and_the_stopped_and_the_odd_rank_are_named(tmp_path):
    run_dir, procs = start_ranks(tmp_path, [("node-a", "wait"), ("node-a", "wait"), ("node-a", "stop"),
                                            ("node-a", "elsewhere")])
    try:
        os.kill(procs[2].pid, signal.SIGSTOP)  # rank 2: stopped, cannot answer the signal
        stat = Path(f"/proc/{procs[2].pid}/stat")
        deadline = time.monotonic() + 10
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        dumps = dump_node(str(tmp_path / "runs"), "r1", 0, 4, wait_s=5.0)
        took = time.monotonic() - t0
        assert all(p.poll() is None for p in procs)  # the signal dumps, it does not end a rank
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert [d["rank"] for d in dumps] == [0, 1, 2, 3]
    assert dumps[2]["state"] == "T" and dumps[2]["stack"] == "", dumps[2]
    for d in (dumps[0], dumps[1], dumps[3]):
        assert "most recent call first" in d["stack"], d
        assert Path(d["log"]) == run_dir / "logs" / f"node-a.rank{d['rank']}.log"
        assert d["stack"] in Path(d["log"]).read_text()  # the stack is in the rank's own log
    assert main_thread(parse_dump(dumps[0]["stack"]))[0]["func"] == "all_reduce_wait"
    assert took < 5.0, took  # the answering ranks' stacks came at once; the stopped one was not waited for long
    stuck, said = odd_ranks([dict(d, host="node-a") for d in dumps])
    assert [(s["rank"], s["host"]) for s in stuck] == [(2, "node-a"), (3, "node-a")], stuck
    assert said.startswith("rank 2 on node-a wrote no stack: its process is stopped (state T); rank 3 on node-a is "
                           "in elsewhere_in_forward ("), said
    assert "; ranks 0, 1 wait in the same all_reduce_wait (" in said, said


DUMP = """Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f0000000002 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2806 in all_reduce
  File "/code/train/rank/pretrain.py", line 410 in main
  File "/code/train/rank/pretrain.py", line 500 in <module>
  File "/usr/lib/python3.11/runpy.py", line 88 in _run_code
  File "/usr/lib/python3.11/runpy.py", line 198 in _run_module_as_main
"""


def test_every_rank_in_the_same_collective_names_none_and_says_where_they_are():
    threads = parse_dump("a log line\n" + DUMP + "another log line\n")
    assert len(threads) == 2 and where(main_thread(threads)) == \
        "all_reduce (torch/distributed/distributed_c10d.py:2806)"
    stuck, said = odd_ranks([{"rank": r, "host": "n", "state": "S", "stack": DUMP} for r in range(3)])
    assert stuck == [] and said.startswith("every rank is in the same place, all_reduce (torch/distributed/"
                                           "distributed_c10d.py:2806): none is elsewhere"), said
    gone = odd_ranks([{"rank": 0, "host": "n", "state": "S", "stack": DUMP},
                      {"rank": 1, "host": "m", "state": "", "stack": ""}])
    assert gone == ([{"rank": 1, "host": "m", "why": "wrote no stack: its process is gone"}],
                    "rank 1 on m wrote no stack: its process is gone; rank 0 waits in all_reduce "
                    "(torch/distributed/distributed_c10d.py:2806)")


def test_the_command_line_prints_one_json_line_and_refuses_bad_arguments(tmp_path, capsys):
    from train.node.watchdog import main
    (tmp_path / "r" / "ranks").mkdir(parents=True)
    assert main(["dump", str(tmp_path), "r", "0", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"rank": 0, "host": "", "pid": None, "state": "", "stack": "",
                                                    "log": ""}]
    assert main(["dump", str(tmp_path)]) == 2 and "usage: watchdog.py" in capsys.readouterr().err

"""train/node/rank_status.py with real processes: each way a rank ends leaves the record the playbook reads."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import sys, time
sys.path.insert(0, %r)
from train.node import rank_status
rank_status.record_start(rank=3, world_size=4, local_rank=1, host="node-x", job_file=sys.argv[1])
print("ready", flush=True)
how = sys.argv[2]
if how == "error":
    raise RuntimeError("a file it needs is missing")
if how == "wait":
    time.sleep(60)
if how == "join":  # through torch.distributed's rendezvous after a while (a process group of one, gloo)
    sys.stdin.readline()
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1] + ".store", rank=0, world_size=1)
    print("joined", flush=True)
    time.sleep(60)
"""


def run_child(tmp_path, how):
    job = tmp_path / "job.json"
    job.write_text("{}")
    proc = subprocess.Popen([sys.executable, "-c", CHILD % str(REPO), str(job), how], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
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


@pytest.mark.torch
def test_a_rank_records_when_it_got_through_the_rendezvous(tmp_path):
    from train.node.rank_status import read_node

    proc, path = run_child(tmp_path, "join")
    try:
        time.sleep(1.2)
        before = read_node(path.parent, 3, 1)[0]
        assert before["joined"] is None and before["alive"] and before["waiting_s"] >= 1.0, before
        assert abs(before["started"] - time.time()) < 60
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "joined"
        deadline = time.time() + 10
        while status(path)["joined"] is None and time.time() < deadline:
            time.sleep(0.2)
        after = read_node(path.parent, 3, 1)[0]
        assert after["joined"] >= before["started"] + 1.0 and "waiting_s" not in after, after
        assert after["end"] is None
    finally:
        proc.kill()
        proc.wait()


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
    from train.node.rank_status import dead_ranks

    records = [{"rank": 1, "end": "terminated"}, {"rank": 5, "end": None, "alive": False},
               {"rank": 2, "end": "error: RuntimeError: Connection closed by peer [10.0.0.2]:4000"},
               {"rank": 3, "end": "finished"}, {"rank": 4, "end": None, "alive": True},
               {"rank": 6, "end": "never started"}, {"rank": 0, "end": "error: FileNotFoundError: /data/x"}]
    assert [r["rank"] for r in dead_ranks(records)] == [5, 0, 6, 2]


def test_read_node_sees_live_dead_and_missing_ranks(tmp_path):
    from train.node.rank_status import read_node

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
    from train.node import rank_status

    monkeypatch.delenv("DSC_JOB_FILE", raising=False)
    assert rank_status.record_start(0, 1, 0, "h") is None


def test_the_command_line_reads_a_nodes_ranks_without_naming_the_run_directory(tmp_path):
    """stop.yml runs it while it stops every process whose command line holds <runs>/<run>/: it must not be one."""
    (tmp_path / "r1" / "ranks").mkdir(parents=True)
    (tmp_path / "r1" / "ranks" / "rank-2.json").write_text(json.dumps({"rank": 2, "pid": 2 ** 22 + 9, "end": None}))
    argv = [sys.executable, "-m", "train.node.rank_status", "read", str(tmp_path), "r1", "2", "2"]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    assert [r["rank"] for r in got] == [2, 3] and got[0]["alive"] is False and got[1]["end"] == "never started"
    assert f"{tmp_path}/r1/" not in " ".join(argv)
    bad = subprocess.run([sys.executable, "-m", "train.node.rank_status", str(tmp_path), "r1"], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("usage: ") and "Traceback" not in bad.stderr


def test_node_ranks_numbers_ranks_in_host_order():
    from train.node.rank_status import node_ranks

    assert node_ranks(["head-1", "worker-1", "worker-2"], {"head-1": 2, "worker-1": 1, "worker-2": 3}) == {
        "head-1": [0, 1], "worker-1": [2], "worker-2": [3, 4, 5]}


STUBBORN = "import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(120)\n"


def test_stop_ends_the_runs_processes_sigkill_for_one_that_ignores_sigterm_and_leaves_the_rest(tmp_path):
    """Real processes: two of run r1 (one ignores SIGTERM), one of run r2, a tail of r1's log. `stop RUNS r1`
    ends both of r1's, leaves r2's and the tail, and its own command line is not taken for one of r1's."""
    from train.node.rank_status import run_processes

    runs = tmp_path / "runs"
    (runs / "r1").mkdir(parents=True)
    (runs / "r2").mkdir()
    (runs / "r1" / "train.log").write_text("x\n")
    mine = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"{runs}/r1/job.json"]),
            subprocess.Popen([sys.executable, "-c", STUBBORN, f"--output_dir={runs}/r1/output"],
                             stdout=subprocess.PIPE, text=True)]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"{runs}/r2/job.json"])
    tail = subprocess.Popen(["tail", "-f", str(runs / "r1" / "train.log")], stdout=subprocess.DEVNULL)
    # a shell command naming no run directory that exists (a clean-up's glob): no run of this node's
    glob = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"{runs}/*/output"])
    # a process of a run r1 in a container on this node (its own PID namespace: unshare, as root): not this node's
    contained = None
    if os.geteuid() == 0 and shutil.which("unshare"):
        # the run's path only in the contained process's command line, not in unshare's (which stays out here)
        contained = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c",
             "import os, sys; os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', "
             "os.environ['RUN_FILE']])"], env=dict(os.environ, RUN_FILE=f"{runs}/r1/job.json"))
    try:
        assert mine[1].stdout.readline().strip() == "ready"
        if contained is not None:  # the child of unshare in the new namespace is up when it lists as r1's
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not _pids_of_cmdline(f"{runs}/r1/job.json", exclude=mine[0].pid):
                time.sleep(0.05)
            assert _pids_of_cmdline(f"{runs}/r1/job.json", exclude=mine[0].pid), "the contained process did not start"
        assert run_processes(str(runs)) == {"r1": sorted(p.pid for p in mine), "r2": [other.pid]}
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "train.node.rank_status", "stop", str(runs), "r1"], cwd=REPO,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"stopped": True, "left": []}
        assert time.monotonic() - t0 < 15
        assert mine[0].wait(timeout=5) == -signal.SIGTERM and mine[1].wait(timeout=5) == -signal.SIGKILL
        assert other.poll() is None and tail.poll() is None
        assert contained is None or contained.poll() is None  # the container's process was not stopped
        again = subprocess.run([sys.executable, "-m", "train.node.rank_status", "stop", str(runs), "r1"], cwd=REPO,
                               capture_output=True, text=True, check=True)
        assert json.loads(again.stdout) == {"stopped": False, "left": []}
    finally:
        for p in mine + [other, tail, glob] + ([contained] if contained is not None else []):
            p.kill()
            p.wait()


def _pids_of_cmdline(text: str, exclude: int) -> list[int]:
    """The pids (as this namespace numbers them) of python processes whose command line holds ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(pid) != exclude and text.encode() in cmdline and b"python" in cmdline.split(b"\0", 1)[0]:
            found.append(int(pid))
    return found


def test_check_nodes_reads_the_local_node_and_reports_nodes_that_do_not_answer_within_the_timeout(tmp_path):
    """The liveness check: the local node's ranks from their files (one alive, one killed); a node whose ssh port
    is closed, and one that accepts the connection but never speaks (a paused node: its kernel still answers TCP),
    both "did not answer" -- the silent one within the timeout, not ssh's default."""
    from train.node.rank_status import check_nodes, trouble

    (tmp_path / "r1").mkdir()
    proc, _ = run_child(tmp_path / "r1", "wait")
    ranks = tmp_path / "r1" / "ranks"
    (ranks / "rank-4.json").write_text(json.dumps({"rank": 4, "pid": 2 ** 22 + 7, "end": None}))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    try:
        ssh = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
        local = {"host": "here", "first": 3, "count": 2, "python": sys.executable, "code_dir": str(REPO),
                 "local": True}
        got = check_nodes([local], str(tmp_path), "r1", timeout_s=2)
        assert got["here"]["answered"] is True
        assert {r["rank"]: r["alive"] for r in got["here"]["ranks"]} == {3: True, 4: False}
        assert trouble(got["here"]) == f"rank 4 is gone (killed: no exit recorded, pid {2 ** 22 + 7})"
        (ranks / "rank-4.json").write_text(json.dumps({"rank": 4, "pid": 2 ** 22 + 7, "end": "finished"}))
        assert trouble(check_nodes([local], str(tmp_path), "r1")["here"]) is None
        peer = "error: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:8928"
        (ranks / "rank-4.json").write_text(json.dumps({"rank": 4, "pid": 2 ** 22 + 7, "end": peer}))
        assert trouble(check_nodes([local], str(tmp_path), "r1")["here"]) is None  # the peer is the dead one
        (ranks / "rank-4.json").write_text(json.dumps({"rank": 4, "pid": 2 ** 22 + 7, "end": "error: OSError: x"}))
        assert trouble(check_nodes([local], str(tmp_path), "r1")["here"]) == "rank 4 ended with error: OSError: x"

        for port in (closed_port, silent.getsockname()[1]):
            t0 = time.monotonic()
            node = dict(local, host="127.0.0.1", local=False)
            got = check_nodes([node], str(tmp_path), "r1", timeout_s=2, ssh_options=ssh + ["-p", str(port)])
            took = time.monotonic() - t0
            assert got["127.0.0.1"]["answered"] is False, got
            assert trouble(got["127.0.0.1"]).startswith("did not answer ("), got
            assert took < 5, took
    finally:
        silent.close()
        proc.kill()
        proc.wait()


def _claim_cmd(runs, run, hold_s=60):
    """`python - claim RUNS RUN HOLD_S BY` as the preflight runs it: rank_status.py's source on stdin."""
    return subprocess.Popen([sys.executable, "-", "claim", str(runs), run, str(hold_s), f"me@ctl-{run}"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_two_claims_in_the_same_moment_one_wins_the_other_names_it_and_release_ends_the_holder(tmp_path):
    """Real processes: two `claim` commands started together for runs a and b (their source written to both stdins
    at once): exactly one claims the cluster, its holder process outlives the command, and the other is refused
    naming the winner's run and who claimed; `release` ends the holder and removes the claim, and a new claim then
    wins."""
    runs = tmp_path / "runs"
    source = (REPO / "train" / "node" / "rank_status.py").read_text()
    for attempt in range(2):  # two rounds of the race, each with its own runs directory
        runs = tmp_path / f"runs{attempt}"
        procs = {run: _claim_cmd(runs, run) for run in ("a", "b")}
        outs = {run: p.communicate(source, timeout=30) for run, p in procs.items()}
        for run, p in procs.items():
            assert p.returncode == 0, outs[run]
        said = {run: json.loads(out) for run, (out, _) in outs.items()}
        winners = [run for run, r in said.items() if r["claimed"]]
        assert len(winners) == 1, said
        won, lost = winners[0], ({"a", "b"} - set(winners)).pop()
        holder = said[won]["pid"]
        assert _alive(holder)
        assert said[lost]["state"] == "claimed" and said[lost]["claim"]["run"] == won, said
        assert said[lost]["claim"]["by"] == f"me@ctl-{won}" and said[lost]["claim"]["pid"] == holder
        record = json.loads((runs / ".claim.json").read_text())
        assert record["run"] == won and record["pid"] == holder
        out = subprocess.run([sys.executable, "-m", "train.node.rank_status", "release", str(runs), won], cwd=REPO,
                             capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == {"released": True, "held": True, "running": False}
        deadline = time.monotonic() + 10
        while _alive(holder) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(holder) and not (runs / ".claim.json").exists()
        again = _claim_cmd(runs, lost)
        out, err = again.communicate(source, timeout=30)
        assert json.loads(out)["claimed"], (out, err)
        subprocess.run([sys.executable, "-m", "train.node.rank_status", "release", str(runs), lost], cwd=REPO,
                       check=True, capture_output=True)


def test_a_claim_holds_while_its_run_runs_and_is_stale_once_holder_and_run_are_gone(tmp_path):
    """A claim whose holder was killed (its train.yml gone) but whose run has a process here still holds
    ("running"); once that process ends, the claim is stale and the next run claims the cluster. A holder ends by
    itself after HOLD_S (a train.yml that died before its launch), and -e stop='s `stop` ends a claim-only run."""
    from train.node.rank_status import claim, claim_state, _read_claim

    runs = tmp_path / "runs"
    first = claim(str(runs), "a", "me@ctl", 60)
    assert first["claimed"]
    os.kill(first["pid"], signal.SIGKILL)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", f"{runs}/a/job.json"])
    try:
        deadline = time.monotonic() + 10
        while _alive(first["pid"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        refused = claim(str(runs), "b", "you@ctl", 60)
        assert refused == {"claimed": False, "claim": _read_claim(str(runs)), "state": "running"}
    finally:
        proc.kill()
        proc.wait()
    assert claim_state(str(runs), _read_claim(str(runs))) is None
    short = claim(str(runs), "b", "you@ctl", 1)
    assert short["claimed"]
    deadline = time.monotonic() + 15
    while _alive(short["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(short["pid"])  # gone by itself after its 1 s
    third = claim(str(runs), "c", "me@ctl", 60)
    assert third["claimed"]
    out = subprocess.run([sys.executable, "-m", "train.node.rank_status", "stop", str(runs), "c"], cwd=REPO,
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"stopped": True, "left": []}
    deadline = time.monotonic() + 10
    while _alive(third["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(third["pid"]) and not (runs / ".claim.json").exists()

"""The preflight's "one run at a time" facts, with real sockets and processes: train/node/rank_status.py's finder of a
run's processes (which the preflight runs as its source on python's stdin), the node_report module's port_in_use,
and preflight.py's refusal text."""

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

FILES = Path(__file__).resolve().parents[1] / "files"
RANK_STATUS = Path(__file__).resolve().parents[3] / "train" / "node" / "rank_status.py"
sys.path.insert(0, str(FILES))
sys.path.insert(0, str(FILES.parent / "library"))

import node_report  # noqa: E402
import preflight  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_listener_holds_the_port_and_an_ended_connection_does_not():
    port = free_port()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen()
    assert node_report.port_in_use(port) is True
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    conn.close()
    client.close()
    srv.close()
    time.sleep(0.2)
    assert node_report.port_in_use(port) is False  # TIME_WAIT, as after the last run: torch binds it again


def test_the_preflight_finds_a_running_run_by_its_run_directory(tmp_path):
    """rank_status.py run as the preflight runs it (its source on `python -`'s stdin, no code of the project on the
    node): a process with <runs>/r1/ in its command line is r1's; a follower's tail of r1's log is not; nothing once
    it ended."""
    runs = tmp_path / "runs"
    (runs / "r1").mkdir(parents=True)
    (runs / "r1" / "train.log").write_text("x\n")

    def found():
        out = subprocess.run([sys.executable, "-", "processes", str(runs)], input=RANK_STATUS.read_text(),
                             capture_output=True, text=True, check=True, cwd=tmp_path).stdout
        return json.loads(out)

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--output_dir={runs}/r1/output"])
    tail = subprocess.Popen(["tail", "-f", str(runs / "r1" / "train.log")], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        assert found() == {"r1": [proc.pid]}
    finally:
        proc.kill()
        proc.wait()
        tail.kill()
        tail.wait()
    assert found() == {}


def test_the_refusal_names_the_run_and_the_commands_that_follow_or_stop_it():
    reports = {"head-1": {"runs": {"old": [11, 12]}, "master_port_in_use": True}, "worker-1": {"runs": {}}}
    problems = preflight.busy(reports, ["head-1", "worker-1"], "head-1", "new", 29500)
    assert problems == ["host head-1: run old is still running there (pid 11, 12). One run at a time: wait for it to "
                        "end (ansible-playbook train.yml -e attach=old follows it and brings its results back), or "
                        "stop it on every node with ansible-playbook train.yml -e stop=old"]
    reports["head-1"]["runs"] = {}
    assert "the master port 29500 is taken" in preflight.busy(reports, ["head-1", "worker-1"], "head-1", "new",
                                                             29500)[0]

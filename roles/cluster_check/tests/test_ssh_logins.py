"""roles/cluster_check/files/ssh_logins.py, run as the preflight runs it on the head (``python -c <its text> HOST...``):
every node's login at once, each one's ssh status and error in the order given."""
import json
import os
import subprocess
import sys
from pathlib import Path

PROGRAM = (Path(__file__).resolve().parents[1] / "files" / "ssh_logins.py").read_text()


def logins(*hosts, env=None):
    res = subprocess.run([sys.executable, "-c", PROGRAM, *hosts], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_real_ssh_failures_are_reported_per_host_in_order():
    """A real ssh to names that do not resolve (.invalid never does), each named with ssh's own line, in order."""
    got = logins("node-x.invalid", "node-y.invalid")
    assert [g["host"] for g in got] == ["node-x.invalid", "node-y.invalid"]
    for g in got:
        assert g["rc"] == 255 and f"Could not resolve hostname {g['host']}" in g["stderr"], got


def stand_in_ssh(tmp_path, seconds=0.5, fails=()):
    """An ``ssh`` on PATH that records when each login starts and ends (``seconds`` each) and fails for ``fails``."""
    stand_in = tmp_path / "bin" / "ssh"
    stand_in.parent.mkdir()
    calls = tmp_path / "calls"
    bad = " ".join(fails) or "none"
    stand_in.write_text(
        "#!/bin/sh\n"
        'host=""; for a in "$@"; do case "$a" in node-*) host=$a;; esac; done\n'
        f'echo "start $host $(date +%s.%N) $*" >> {calls}\n'
        f"sleep {seconds}\n"
        f'echo "end $host $(date +%s.%N)" >> {calls}\n'
        f'for b in {bad}; do [ "$host" = "$b" ] && {{ echo "Permission denied (publickey)." >&2; exit 255; }}; done\n'
        "exit 0\n")
    stand_in.chmod(0o755)
    return dict(os.environ, PATH=f"{stand_in.parent}:{os.environ['PATH']}"), calls


def spans_of(calls):
    spans: dict[str, dict[str, float]] = {}
    for line in calls.read_text().splitlines():
        what, host, at, *argv = line.split()
        spans.setdefault(host, {})[what] = float(at)
        if what == "start":
            assert argv[:4] == ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15"] and argv[-1] == "true", argv
    return spans


def test_every_node_is_logged_in_to_at_once_not_one_after_another(tmp_path):
    """Twelve half-second logins, one failing: all began before the first ended, the BatchMode options reached ssh,
    and the failing node alone has its status and error."""
    env, calls = stand_in_ssh(tmp_path, fails=("node-7",))
    hosts = [f"node-{i}" for i in range(12)]
    got = logins(*hosts, env=env)
    assert [g["host"] for g in got] == hosts
    assert [g["rc"] for g in got] == [255 if h == "node-7" else 0 for h in hosts], got
    assert got[7]["stderr"] == "Permission denied (publickey).", got[7]
    spans = spans_of(calls)
    assert sorted(spans) == sorted(hosts)
    first_end = min(s["end"] for s in spans.values())
    assert all(s["start"] < first_end for s in spans.values()), spans


def test_at_most_32_logins_run_at_once(tmp_path):
    """Forty logins: never more than FANOUT (32) at once -- the head's process and connection limits -- and more
    than one."""
    env, calls = stand_in_ssh(tmp_path, seconds=0.3)
    hosts = [f"node-{i}" for i in range(40)]
    assert [g["rc"] for g in logins(*hosts, env=env)] == [0] * 40
    events = sorted((t, +1 if what == "start" else -1) for s in spans_of(calls).values() for what, t in s.items())
    running, peak = 0, 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert 1 < peak <= 32, peak


def test_no_host_no_login():
    assert logins() == []

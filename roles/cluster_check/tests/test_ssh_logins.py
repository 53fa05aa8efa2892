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
    """A real ssh: a name that does not resolve and a port nothing listens on, each named with ssh's own line."""
    got = logins("node-x.invalid", "127.0.0.1")
    assert [g["host"] for g in got] == ["node-x.invalid", "127.0.0.1"]
    assert got[0]["rc"] == 255 and "Could not resolve hostname node-x.invalid" in got[0]["stderr"], got
    assert got[1]["rc"] == 255 and "Connection refused" in got[1]["stderr"], got


def test_every_node_is_logged_in_to_at_once_not_one_after_another(tmp_path):
    """A stand-in ssh on PATH that records when each login starts and ends (0.5 s each) and fails for one node: all
    twelve logins began before the first ended, the BatchMode options reached ssh, and the failing node alone has
    its status and error."""
    stand_in = tmp_path / "bin" / "ssh"
    stand_in.parent.mkdir()
    calls = tmp_path / "calls"
    stand_in.write_text(
        "#!/bin/sh\n"
        f'host=""; for a in "$@"; do case "$a" in node-*) host=$a;; esac; done\n'
        f'echo "start $host $(date +%s.%N) $*" >> {calls}\n'
        "sleep 0.5\n"
        f'echo "end $host $(date +%s.%N)" >> {calls}\n'
        'if [ "$host" = node-7 ]; then echo "Permission denied (publickey)." >&2; exit 255; fi\n')
    stand_in.chmod(0o755)
    hosts = [f"node-{i}" for i in range(12)]
    got = logins(*hosts, env=dict(os.environ, PATH=f"{stand_in.parent}:{os.environ['PATH']}"))
    assert [g["host"] for g in got] == hosts
    assert [g["rc"] for g in got] == [255 if h == "node-7" else 0 for h in hosts], got
    assert got[7]["stderr"] == "Permission denied (publickey).", got[7]
    spans: dict[str, dict[str, float]] = {}
    for line in calls.read_text().splitlines():
        what, host, at, *argv = line.split()
        spans.setdefault(host, {})[what] = float(at)
        if what == "start":
            assert argv[:4] == ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15"] and argv[-1] == "true", argv
    assert sorted(spans) == sorted(hosts)
    first_end = min(s["end"] for s in spans.values())
    assert all(s["start"] < first_end for s in spans.values()), spans


def test_no_host_no_login():
    assert logins() == []

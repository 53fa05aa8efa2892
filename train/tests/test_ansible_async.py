"""train/controller/ansible_async.py's _read_from: the followers' offsets stay on the file's bytes when Ansible's ssh runs the
read with a terminal (``ssh -tt``: every "\\n" arrives as "\\r\\n"). Seen on the cluster: every read after the first
lost its first progress record. Runs in the controller's Python (.venv: ansible-core)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTROLLER_PY = REPO / ".venv" / "bin" / "python"

CODE = r"""
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from train.controller.ansible_async import AsyncFollowAction
from train.controller.progress import parse_records

class OverATerminal(AsyncFollowAction):
    def __init__(self):  # no task, no connection: only the read is tested
        pass

    def run(self, tmp=None, task_vars=None):
        raise NotImplementedError

    def _low_level_execute_command(self, cmd, **kwargs):
        out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True).stdout
        return {"stdout": out.replace("\n", "\r\n")}  # what the terminal of ssh -tt does to the output

path, action, offset, steps = sys.argv[2], OverATerminal(), 0, []
for first, last in ((1, 2), (3, 5), (6, 6), (7, 9)):
    with open(path, "a") as f:
        f.write("".join('{"step": %d, "loss": 1.5}\n' % i for i in range(first, last + 1)))
    chunk = action._read_from(path, offset)
    records, consumed = parse_records(chunk)
    offset += len(chunk[:consumed].encode("utf-8"))
    steps += [r["step"] for r in records]
print(steps, action._read_from(path + ".missing", 0) == "")
"""


@pytest.mark.skipif(not CONTROLLER_PY.exists(), reason="no controller venv (.venv): make setup")
def test_every_record_arrives_once_through_a_terminal(tmp_path):
    proc = subprocess.run([str(CONTROLLER_PY), "-c", CODE, str(REPO), str(tmp_path / "progress.jsonl")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[1,", "2,", "3,", "4,", "5,", "6,", "7,", "8,", "9]", "True"]


RETRY_CODE = r"""
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from ansible.errors import AnsibleConnectionFailure
from train.controller import ansible_async

ansible_async.RETRY_WAIT_S = 0.01

class Connection:
    resets = 0
    def reset(self):
        Connection.resets += 1

class DroppedOnce(ansible_async.AsyncFollowAction):
    def __init__(self, drops):
        self.drops, self.calls, self._connection = drops, 0, Connection()

    def run(self, tmp=None, task_vars=None):
        raise NotImplementedError

    def _low_level_execute_command(self, cmd, **kwargs):
        self.calls += 1
        if self.calls <= self.drops:  # what ssh's exit status 255 becomes in Ansible's ssh connection plugin
            raise AnsibleConnectionFailure("Failed to connect to the host via ssh: Shared connection to 10.89.78.10 closed.")
        return {"stdout": subprocess.run(["sh", "-c", cmd], capture_output=True, text=True).stdout}

path = sys.argv[2]
open(path, "w").write("a line\n")
action = DroppedOnce(2)
got = action._read_from(path, 0)
print(repr(got), action.calls, Connection.resets)
try:
    DroppedOnce(99)._tail(path, 5)
except AnsibleConnectionFailure as exc:
    print("raised", exc.message.split(": ", 1)[-1])
"""


@pytest.mark.skipif(not CONTROLLER_PY.exists(), reason="no controller venv (.venv): make setup")
def test_a_dropped_ssh_connection_is_tried_again_and_only_a_lasting_one_raises(tmp_path):
    """A follower's read whose ssh connection drops twice (another playbook stopping processes on the head closed
    the shared connection) succeeds on the third try over a reset connection; one that keeps failing raises after
    CONNECTION_RETRIES tries again, so that Ansible takes the node for unreachable."""
    proc = subprocess.run([str(CONTROLLER_PY), "-c", RETRY_CODE, str(REPO), str(tmp_path / "log")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = proc.stdout.splitlines()
    assert first == "'a line\\n' 3 2", proc.stdout
    assert second == "raised Shared connection to 10.89.78.10 closed.", proc.stdout

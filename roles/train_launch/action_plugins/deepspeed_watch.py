"""Follow a training job started with ``async`` and print its progress while it runs.

Ansible prints a task's result only when the task ends, and a recursive ``include_tasks`` poll loop hits Python's
recursion limit after a few hundred polls. This action polls ``ansible.builtin.async_status`` on the head node,
reads the new bytes of the run's ``progress.jsonl`` (written by rank 0, see train/progress.py) and of its log, and
prints each new progress record as one line the moment it appears, with the step of the last checkpoint saved so
far (the save events of the same file), and each event (a save, a warning) as a line of its own.

Options:
  jid: the ``ansible_job_id`` of the async launch task (required).
  progress_file: path of ``progress.jsonl`` on the head (required).
  log_file: path of the launcher's log on the head (required); its ``[rank R/W]`` lines are echoed, and its tail is
    returned as ``log_tail`` (and shown) when the job fails.
  poll_seconds: seconds between polls (default 10).
  tail_lines: how many log lines to show on failure (default 40).
  echo_log: print every new log line until the first progress record appears (default false) -- for a user's
    script, which may write no progress.jsonl at all (not an HF Trainer script): its log is then streamed.
  grace_seconds: after the log says a node's ranks ended with an error (pdsh's ``<host>: ssh exited with exit code
    N``, or DeepSpeed's launcher's ``exits with return code = N``) while the job still runs, how long to wait for it
    to end by itself before giving up on it (default 15). The other nodes' ranks would otherwise wait in their next
    collective until torch's process-group timeout (30 min on gloo, 10 on NCCL).

Returns ``rc`` (the launcher's exit status), ``records`` (how many progress records were seen), ``last`` (the last
record) and ``log_tail``; after a node failed, also ``dead_host`` (the node named by the first failure line, or ""
for the head's own launcher on one node), ``dead_line`` and ``dead_lines`` (that node's last log lines). Fails when
the launcher exits non-zero, or ``grace_seconds`` after a node failed (the playbook then stops the run everywhere:
roles/train_launch/tasks/stop.yml).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from ansible.utils.display import Display

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from train.ansible_async import AsyncFollowAction  # noqa: E402
from train.progress import (format_duration, format_event, format_record, is_event, last_checkpoint,  # noqa: E402
                            parse_records)

display = Display()

_ARGSPEC = {
    "jid": {"type": "str", "required": True},
    "progress_file": {"type": "path", "required": True},
    "log_file": {"type": "path", "required": True},
    "poll_seconds": {"type": "float", "default": 10.0},
    "tail_lines": {"type": "int", "default": 40},
    "echo_log": {"type": "bool", "default": False},
    "grace_seconds": {"type": "float", "default": 15.0},
}

# A node's ranks ended with an error: pdsh's report of that node's ssh, or DeepSpeed's launcher (launch.py's
# sigkill_handler) on that node, its line prefixed "<host>: " by pdsh.
_PDSH_EXIT = re.compile(r"^pdsh@\S+: (?P<host>[^:\s]+): ssh exited with exit code (?P<rc>-?\d+)")
_LAUNCH_EXIT = re.compile(r"^(?:(?P<host>[^:\s\[]+): )?.*\bexits with return code = (?P<rc>-?\d+)")


def node_lines(recent: list[str], host: str) -> list[str]:
    """The last 12 lines of ``recent`` from ``host`` (pdsh's "<host>: " prefix; all lines for "" or none found),
    DeepSpeed launcher's own lines left out."""
    mine = [l for l in recent if host and l.startswith(f"{host}: ")] or recent
    return [l for l in mine if "[launch.py" not in l][-12:]


def failed_node(line: str) -> tuple[str, int] | None:
    """(host, exit code) when ``line`` says a node's ranks ended with an error, else None; host "" = unprefixed."""
    for pattern in (_PDSH_EXIT, _LAUNCH_EXIT):
        m = pattern.match(line.strip())
        if m and int(m.group("rc")) != 0:
            return m.group("host") or "", int(m.group("rc"))
    return None


class ActionModule(AsyncFollowAction):
    """Poll an async training job; print progress lines as they arrive."""

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=_ARGSPEC)
        jid, progress_file, log_file = args["jid"], args["progress_file"], args["log_file"]
        poll = max(1.0, args["poll_seconds"])

        progress_offset = 0
        log_offset = 0
        log_pending = ""
        seen = 0
        last: dict = {}
        checkpoint: int | None = None
        started = time.monotonic()
        last_news = started
        dead: tuple[str, int] | None = None
        dead_line = ""
        dead_at = 0.0
        recent: list[str] = []

        while True:
            status = self._async_status(jid, "status", task_vars)
            if status.get("failed") and not status.get("finished"):
                result.update(failed=True, msg=f"cannot read the status of async job {jid}: {status.get('msg')}")
                return result
            finished = bool(status.get("finished"))

            chunk = self._read_from(progress_file, progress_offset)
            records, consumed = parse_records(chunk)
            progress_offset += len(chunk[:consumed].encode("utf-8"))

            chunk = self._read_from(log_file, log_offset)
            log_offset += len(chunk.encode("utf-8"))
            log_pending += chunk
            *complete, log_pending = log_pending.split("\n")
            for line in complete:
                if (args["echo_log"] and not seen and not records) or ("[rank " in line and "host=" in line):
                    display.display(f"  {line.rstrip()}")
                recent = (recent + [line.rstrip()])[-400:]
                node = failed_node(line)
                if node is not None and dead is None:
                    dead, dead_line, dead_at = node, line.strip(), time.monotonic()
                    if not finished:
                        display.display(f"  {line.strip()}")
                        display.display(f"  ranks on {node[0] or 'the head'} ended with exit code {node[1]} while the "
                                        f"run goes on elsewhere: waiting {int(args['grace_seconds'])} s for it to stop")

            for record in records:
                if is_event(record):
                    checkpoint = last_checkpoint([record], checkpoint)
                    line = format_event(record)
                    if line:
                        display.display(f"  {line}")
                    continue
                display.display(f"  {format_record(record, checkpoint)}")
                last = record
                seen += 1
                last_news = time.monotonic()

            if finished:
                break
            now = time.monotonic()
            if dead is not None and now - dead_at >= args["grace_seconds"]:
                host, code = dead
                result.update(failed=True, rc=None, records=seen, last=last, dead_host=host, dead_line=dead_line,
                              dead_lines=node_lines(recent, host),
                              log_tail=self._tail(log_file, args["tail_lines"]),
                              msg=f"ranks on {host or 'the head'} ended with exit code {code} "
                                  f"({format_duration(now - started)} after the launch) and the other ranks did not "
                                  f"stop by themselves within {int(args['grace_seconds'])} s")
                return result
            if now - last_news >= 60:
                what = "the first logged step" if not seen else "the next logged step"
                display.display(
                    f"  still running, waiting for {what} ({format_duration(now - started)} so far; log: {log_file})"
                )
                last_news = now
            time.sleep(poll)

        self._async_status(jid, "cleanup", task_vars)
        log_tail = self._tail(log_file, args["tail_lines"])
        rc = status.get("rc")
        dead_lines = node_lines(recent, dead[0]) if dead is not None else []
        result.update(changed=False, rc=rc, records=seen, last=last, log_tail=log_tail,
                      dead_host=dead[0] if dead else "", dead_line=dead_line, dead_lines=dead_lines)
        if rc != 0:
            result["failed"] = True
            result["msg"] = (
                f"training exited with status {rc} after {format_duration(time.monotonic() - started)}; "
                f"the last lines of {log_file} are in log_tail (the whole log is on the head node)"
            )
        return result

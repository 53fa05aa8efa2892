"""Follow a training job started with ``async`` and print its progress while it runs.

Ansible prints a task's result only when the task ends, and a recursive ``include_tasks`` poll loop hits Python's
recursion limit after a few hundred polls. This action polls ``ansible.builtin.async_status`` on the head node,
reads the new bytes of the run's ``progress.jsonl`` (written by rank 0, see train/progress.py) and of its log, and
prints each new progress record as one line the moment it appears.

Options:
  jid: the ``ansible_job_id`` of the async launch task (required).
  progress_file: path of ``progress.jsonl`` on the head (required).
  log_file: path of the launcher's log on the head (required); its ``[rank R/W]`` lines are echoed, and its tail is
    returned as ``log_tail`` (and shown) when the job fails.
  poll_seconds: seconds between polls (default 10).
  tail_lines: how many log lines to show on failure (default 40).
  echo_log: print every new log line until the first progress record appears (default false) -- for a user's
    script, which may write no progress.jsonl at all (not an HF Trainer script): its log is then streamed.

Returns ``rc`` (the launcher's exit status), ``records`` (how many progress records were seen), ``last`` (the last
record) and ``log_tail``. Fails when the launcher exits non-zero.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ansible.utils.display import Display

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from train.ansible_async import AsyncFollowAction  # noqa: E402
from train.progress import format_duration, format_record, parse_records  # noqa: E402

display = Display()

_ARGSPEC = {
    "jid": {"type": "str", "required": True},
    "progress_file": {"type": "path", "required": True},
    "log_file": {"type": "path", "required": True},
    "poll_seconds": {"type": "float", "default": 10.0},
    "tail_lines": {"type": "int", "default": 40},
    "echo_log": {"type": "bool", "default": False},
}


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
        started = time.monotonic()
        last_news = started

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

            for record in records:
                display.display(f"  {format_record(record)}")
                last = record
                seen += 1
                last_news = time.monotonic()

            if finished:
                break
            now = time.monotonic()
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
        result.update(changed=False, rc=rc, records=seen, last=last, log_tail=log_tail)
        if rc != 0:
            result["failed"] = True
            result["msg"] = (
                f"training exited with status {rc} after {format_duration(time.monotonic() - started)}; "
                f"the last lines of {log_file} are in log_tail (the whole log is on the head node)"
            )
        return result

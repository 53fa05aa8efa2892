"""Follow the DeepSpeed op build that build.yml started with ``async`` and print which op compiles, as it happens.

Replaces an ``until:`` loop on ``async_status``, which prints "FAILED - RETRYING ... (721 retries left)" at every
poll of a build that is fine. Reads the new lines of pip's ``--log`` file: setuptools logs
``Install Ops={...}`` (the ops DS_BUILD_OPS will build, value 1) and ``building '<module>' extension`` when it starts
each one; this prints ``compiling cpu_adam (3 of 6), 1m12s so far`` and, every minute without news, that the
build is still running.

Options: jid (the async task's ansible_job_id), log_file (pip's log on the node), poll_seconds (default 10),
timeout_s (give up after this long; default 7200).
Returns async_status's result for the finished job (rc, start, end, delta, ...); fails when the build failed or ran
past timeout_s (the task's rescue then shows the log).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ansible.utils.display import Display

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from train.controller.ansible_async import AsyncFollowAction  # noqa: E402
from train.controller.progress import format_duration, op_started, ops_planned  # noqa: E402

display = Display()

_ARGSPEC = {
    "jid": {"type": "str", "required": True},
    "log_file": {"type": "path", "required": True},
    "poll_seconds": {"type": "float", "default": 10.0},
    "timeout_s": {"type": "float", "default": 7200.0},
}

class ActionModule(AsyncFollowAction):
    """Poll the op build; print each op as its compilation starts."""

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=_ARGSPEC)
        poll = max(1.0, args["poll_seconds"])
        started = last_news = time.monotonic()
        offset, pending, total, current, count = 0, "", None, None, 0
        while True:
            status = self._async_status(args["jid"], "status", task_vars)
            chunk = self._read_from(args["log_file"], offset)
            offset += len(chunk.encode("utf-8"))
            *lines, pending = (pending + chunk).split("\n")
            for line in lines:
                total = ops_planned(line) or total
                name = op_started(line)
                if name:
                    count, current, last_news = count + 1, name, time.monotonic()
                    of = f" ({count} of {total})" if total else ""
                    display.display(f"  compiling {name}{of}, {format_duration(last_news - started)} so far")
            if status.get("finished") or (status.get("failed") and "finished" not in status):
                break
            now = time.monotonic()
            if now - started > args["timeout_s"]:
                result.update(failed=True, msg=f"the op build ran longer than {int(args['timeout_s'])} s")
                return result
            if now - last_news >= 60:
                what = f"compiling {current}" if current else "preparing the build"
                display.display(f"  still {what} ({format_duration(now - started)} so far; log: {args['log_file']})")
                last_news = now
            time.sleep(poll)
        self._async_status(args["jid"], "cleanup", task_vars)
        result.update(status)
        result["changed"] = False
        return result

"""Follow the data preparation that prepare.yml started with ``async`` and relay its progress lines as they come.

train/data/prepare_data.py appends every line it prints to its ``--progress-file`` (what it reads, the tokenizer it
trains, how far tokenizing and grouping are, each with the seconds since it started); this action polls
``ansible.builtin.async_status`` on the head (train/controller/ansible_async.py's AsyncFollowAction, as deepspeed_watch and
deepspeed_build_watch do) and prints each new line at once, and a "still preparing" line after a minute without
one. No ``until:`` loop, so nothing prints "FAILED - RETRYING" while the preparation is fine.

Options: jid (the async task's ansible_job_id), log_file (the --progress-file on the head), poll_seconds (default
5), timeout_s (give up after this long; default 14400).
Returns async_status's result for the finished command (rc, stdout, stderr, stdout_lines, stderr_lines, ...), so
the tasks after it read the command's own result; never fails by itself when the command failed (the task's
failed_when decides), only when the job's status can't be read or it ran past timeout_s.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.utils.display import Display

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from train.controller.ansible_async import AsyncFollowAction  # noqa: E402
from train.controller.progress import format_duration  # noqa: E402

display = Display()

_ARGSPEC = {
    "jid": {"type": "str", "required": True},
    "log_file": {"type": "path", "required": True},
    "poll_seconds": {"type": "float", "default": 5.0},
    "timeout_s": {"type": "float", "default": 14400.0},
}


class ActionModule(AsyncFollowAction):
    """Poll the data preparation; print each of its progress lines as it appears."""

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=_ARGSPEC)
        host = task_vars.get("inventory_hostname", "")
        status = self._follow_lines(
            args["jid"], args["log_file"], task_vars,
            lambda line: display.display(f"  {host}: {line}") if line.strip() else None,
            poll=max(1.0, args["poll_seconds"]), timeout_s=args["timeout_s"],
            on_idle=lambda s: display.display(
                f"  {host}: still preparing the data ({format_duration(s)} so far; log: {args['log_file']})"))
        if status.get("failed") and "finished" not in status:
            result.update(failed=True, msg=f"host {host}: data preparation: {status['msg']}")
            return result
        result.update(status)
        result.pop("failed", None)  # the command's rc decides, in the task's failed_when
        result["changed"] = False
        return result

"""The controller side of following a job that an Ansible task started with ``async`` (imported by the action
plugins ``deepspeed_watch`` of roles/train_launch, ``deepspeed_build_watch`` of roles/deepspeed, and
``prepare_data_watch`` / ``stage_copy`` of roles/train_stage only; needs ansible-core, so nothing on the nodes
imports it).

Ansible prints a task's result only when the task ends, and an ``until:`` loop on ``async_status`` prints
"FAILED - RETRYING" at every poll of a job that is fine. An action built on this class polls ``async_status``
itself and prints what the job's log says as it comes.
"""

from __future__ import annotations

import base64
import binascii
import shlex
import time

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.action import ActionBase

#: how often a follower's call to the node is tried again after its ssh connection broke (seconds waited before
#: each: RETRY_WAIT_S x the attempt) -- a follower of a run of hours should not give up on one dropped connection
CONNECTION_RETRIES = 3
RETRY_WAIT_S = 2.0


class AsyncFollowAction(ActionBase):
    """ActionBase plus the calls a follower needs: the status of an async job, a file's new bytes, a command; each
    tried again over a new connection when the ssh connection breaks (CONNECTION_RETRIES)."""

    TRANSFERS_FILES = False
    _requires_connection = True

    def _again(self, call, *args, **kwargs):
        """``call(*args, **kwargs)``, tried again up to CONNECTION_RETRIES times when it raises Ansible's
        AnsibleConnectionFailure (ssh's "Shared connection to ... closed", exit status 255: the multiplexed
        connection went away, e.g. while another playbook stopped processes on the node), the connection reset
        before each new try. The last failure is raised (the node is then unreachable for Ansible)."""
        for attempt in range(CONNECTION_RETRIES + 1):
            try:
                return call(*args, **kwargs)
            except AnsibleConnectionFailure:
                if attempt == CONNECTION_RETRIES:
                    raise
                time.sleep(RETRY_WAIT_S * (attempt + 1))
                try:
                    self._connection.reset()
                except Exception:  # noqa: BLE001 -- a reset that fails leaves the next try to connect anew
                    pass
        raise AssertionError("unreachable")

    def _run(self, cmd: str) -> dict:
        """``_low_level_execute_command(cmd)`` on the target, tried again over a new connection (:meth:`_again`)."""
        return self._again(self._low_level_execute_command, cmd)

    def _read_from(self, path: str, offset: int) -> str:
        """The text of ``path`` on the target from byte ``offset`` on ('' when the file does not exist).

        The bytes travel base64-encoded: over ssh, Ansible runs a low-level command with ``-tt`` (a terminal), which
        turns every "\n" into "\r\n"; counted as the file's bytes, each line would move the caller's offset one
        byte too far, and the first line of the next read would be cut (a progress record or a log line lost).
        """
        cmd = f"tail -c +{int(offset) + 1} {shlex.quote(path)} 2>/dev/null | base64 -w0 || true"
        out = self._run(cmd).get("stdout", "")
        try:
            return base64.b64decode("".join(out.split()), validate=True).decode("utf-8", errors="replace")
        except (ValueError, binascii.Error):
            return ""

    def _tail(self, path: str, lines: int) -> list[str]:
        """The last ``lines`` lines of ``path`` on the target ([] when it does not exist)."""
        cmd = f"tail -n {int(lines)} {shlex.quote(path)} 2>/dev/null || true"
        return self._run(cmd).get("stdout", "").splitlines()

    def _async_status(self, jid: str, mode: str, task_vars) -> dict:
        """Run ansible.builtin.async_status (mode status or cleanup) the way its own action does (with _async_dir).

        Returns the module's result: finished (0/1), rc, start, end, delta, failed, ... as async_status gives them.
        """
        async_dir = self._again(self._remote_expand_user,
                                self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._again(self._execute_module, module_name="ansible.legacy.async_status",
                           module_args={"jid": jid, "mode": mode, "_async_dir": async_dir}, task_vars=task_vars)

    def _follow_lines(self, jid: str, log_file: str, task_vars, on_line, *, poll: float = 10.0,
                      timeout_s: float | None = None, on_idle=None, idle_s: float = 60.0, on_poll=None) -> dict:
        """Poll async job ``jid`` until it ends, handing each new complete line of ``log_file`` to ``on_line``.

        Args:
            jid: the job's ansible_job_id; log_file: a file the job appends lines to, on the target.
            on_line: called with each new line (no newline), as soon as a poll sees it; the lines written just
                before the job ended are read once more after it.
            poll: seconds between polls (the first ones are shorter: 0.5, 1, 2, ... up to poll).
            timeout_s: give up after this long (None: never).
            on_idle: called with the seconds elapsed after ``idle_s`` seconds without a new line (a "still
                running" line), then again every ``idle_s``.
            on_poll: called (no arguments) after each poll's lines were handed over: to print a summary of them.

        Returns:
            async_status's result for the ended job (rc, stdout, stderr, start, end, delta, ...), the job cleaned
            up; or ``{"failed": True, "msg": ...}`` when its status can't be read or it ran past ``timeout_s``.
        """
        started = last_news = time.monotonic()
        offset, pending, polls = 0, "", 0
        while True:
            status = self._async_status(jid, "status", task_vars)
            chunk = self._read_from(log_file, offset)
            offset += len(chunk.encode("utf-8"))
            *lines, pending = (pending + chunk).split("\n")
            for line in lines:
                on_line(line.rstrip())
                last_news = time.monotonic()
            if on_poll is not None:
                on_poll()
            if status.get("finished"):
                break
            if status.get("failed"):
                return {"failed": True, "msg": f"cannot read the status of async job {jid}: {status.get('msg')}"}
            now = time.monotonic()
            if timeout_s is not None and now - started > timeout_s:
                return {"failed": True, "msg": f"ran longer than {int(timeout_s)} s (log: {log_file})"}
            if on_idle is not None and now - last_news >= idle_s:
                on_idle(now - started)
                last_news = now
            # a short job is seen to end within a second or two; a long one is looked at every `poll` seconds
            time.sleep(min(poll, 0.5 * 2 ** polls))
            polls += 1
        if pending.strip():
            on_line(pending.rstrip())
        self._async_status(jid, "cleanup", task_vars)
        return status

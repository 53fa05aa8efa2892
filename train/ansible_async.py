"""The controller side of following a job that an Ansible task started with ``async`` (imported by the action
plugins ``deepspeed_watch`` of roles/train_launch and ``deepspeed_build_watch`` of roles/deepspeed only; needs
ansible-core, so nothing on the nodes imports it).

Ansible prints a task's result only when the task ends, and an ``until:`` loop on ``async_status`` prints
"FAILED - RETRYING" at every poll of a job that is fine. An action built on this class polls ``async_status``
itself and prints what the job's log says as it comes.
"""

from __future__ import annotations

import shlex

from ansible.plugins.action import ActionBase


class AsyncFollowAction(ActionBase):
    """ActionBase plus the two calls a follower needs: the status of an async job, and a file's new bytes."""

    TRANSFERS_FILES = False
    _requires_connection = True

    def _read_from(self, path: str, offset: int) -> str:
        """The text of ``path`` on the target from byte ``offset`` on ('' when the file does not exist)."""
        cmd = f"tail -c +{int(offset) + 1} {shlex.quote(path)} 2>/dev/null || true"
        return self._low_level_execute_command(cmd).get("stdout", "")

    def _tail(self, path: str, lines: int) -> list[str]:
        """The last ``lines`` lines of ``path`` on the target ([] when it does not exist)."""
        cmd = f"tail -n {int(lines)} {shlex.quote(path)} 2>/dev/null || true"
        return self._low_level_execute_command(cmd).get("stdout", "").splitlines()

    def _async_status(self, jid: str, mode: str, task_vars) -> dict:
        """Run ansible.builtin.async_status (mode status or cleanup) the way its own action does (with _async_dir).

        Returns the module's result: finished (0/1), rc, start, end, delta, failed, ... as async_status gives them.
        """
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._execute_module(module_name="ansible.legacy.async_status",
                                    module_args={"jid": jid, "mode": mode, "_async_dir": async_dir},
                                    task_vars=task_vars)

"""ansible.posix.synchronize, run in the background and followed: which file is being copied, how much so far,
elapsed -- per node, while the copy runs, and at its end where the copy came from (the delegate_to host).

The copy itself is exactly ansible.posix.synchronize's (this class is its action plugin, same options, same rsync
command: ``verify_host: true`` keeps host-key checking on), with two additions: rsync logs each file it sends to
``log_file`` on the machine rsync runs on (``--log-file``, ``%i|%l|%n``: itemized change, length, name; rsync
writes the line when the file is done), and the module is started with ``async`` and followed by
train/controller/ansible_async.py's AsyncFollowAction (as deepspeed_watch and prepare_data_watch do): every poll that saw
files done prints the last one and the running totals (files, MB of the total, elapsed), a line a minute while a
big file is under way, and a last line with what was copied. No ``until:`` loop, so nothing prints "FAILED - RETRYING" while a copy is fine.

On a node (``delegate_to`` another node: the head copying to a worker) rsync's ssh gets no ``-i`` unless
``private_key`` is given: the node's own ssh configuration names its keys.

Options, besides synchronize's: log_file (required; a path on the host rsync runs on: the delegate_to host),
total_bytes (the source's size, for "x of y MB"; optional), poll_seconds (default 5), timeout_s (default 14400),
follow_min_bytes (default 16e6: a copy whose total_bytes is below it runs synchronize in the foreground, without the
background job and its polls, and prints only its last line; its rsync gives up after a minute without data moving,
rsync --timeout; a copy of unknown size is always followed).
Returns synchronize's result (changed, cmd, msg, rc, stdout_lines); fails as it does (an rsync error, a host key
that does not match is said in one message naming the node, the head and the fix), or when the copy runs past timeout_s. Check mode runs
synchronize's own check (no background job).
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display
from ansible_collections.ansible.posix.plugins.action.synchronize import ActionModule as SynchronizeAction

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from train.controller.ansible_async import AsyncFollowAction  # noqa: E402
from train.controller.progress import format_duration  # noqa: E402

display = Display()

# seconds without data moving after which a small copy's rsync gives up (rsync --timeout)
_SMALL_COPY_IO_TIMEOUT_S = 60

_OWN = {"log_file": None, "total_bytes": None, "poll_seconds": 5.0, "timeout_s": 14400.0, "follow_min_bytes": 16e6}


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _count(seen: dict, line: str) -> None:
    """Count one line of rsync's --log-file (``%i|%l|%n``) into ``seen``: a file received or sent adds to files and
    bytes and becomes the current one; any other line (a directory, rsync's own lines) counts nothing."""
    fields = line.split("] ", 1)[-1].split("|", 2)
    if len(fields) == 3 and fields[0].startswith(("<", ">")) and fields[0][1:2] == "f":
        size = int(fields[1]) if fields[1].isdigit() else 0
        seen["files"] += 1
        seen["bytes"] += size
        seen["current"] = (fields[2], size)


class ActionModule(AsyncFollowAction, SynchronizeAction):
    """synchronize whose module runs with async and is followed, printing per-file progress."""

    def run(self, tmp=None, task_vars=None):
        args = dict(self._task.args)
        own = {k: args.pop(k, default) for k, default in _OWN.items()}
        if not own["log_file"]:
            raise AnsibleActionFail("stage_copy needs log_file (a path on the host rsync runs on)")
        self._own = own
        self._host = (task_vars or {}).get("inventory_hostname", "")
        args["rsync_opts"] = list(args.get("rsync_opts") or []) + [
            "--log-file=" + shlex.quote(str(own["log_file"])), shlex.quote("--log-file-format=%i|%l|%n")]
        if own["total_bytes"] not in (None, "") and int(own["total_bytes"]) < float(own["follow_min_bytes"]):
            # run in the foreground (see _execute_module), without the background job's timeout: rsync gives up
            # when no data moves for a minute (its exit status 30), and the caller can try another source
            args["rsync_opts"].append(f"--timeout={_SMALL_COPY_IO_TIMEOUT_S}")
        delegate = self._task.delegate_to
        if delegate and delegate not in ("localhost", "127.0.0.1") and "private_key" not in args:
            # rsync runs on a node (the head): its ssh uses that node's keys (the ssh mesh's ~/.ssh/config), not the
            # controller's ansible_ssh_private_key_file, which synchronize would pass as -i (a path that is not
            # there: "Warning: Identity file ... not accessible")
            args["private_key"] = None
        self._task.args = args
        return super().run(tmp, task_vars)

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):
        if module_name != "ansible.posix.synchronize" or self._task.check_mode:
            return super()._execute_module(module_name=module_name, module_args=module_args, task_vars=task_vars,
                                           **kwargs)
        own, host = self._own, self._host
        self._low_level_execute_command(f": > {shlex.quote(str(own['log_file']))}")  # this copy's lines only
        total = int(own["total_bytes"]) if own["total_bytes"] not in (None, "") else None
        seen = {"files": 0, "bytes": 0, "current": None, "shown": None}
        t0 = time.monotonic()
        if total is not None and total < float(own["follow_min_bytes"]):
            # a small copy ends in about a second: run synchronize itself, then read what rsync logged once (the
            # background job and its polls would cost more than the copy)
            status = super()._execute_module(module_name=module_name, module_args=module_args, task_vars=task_vars,
                                             **kwargs)
            for line in self._read_from(str(own["log_file"]), 0).splitlines():
                _count(seen, line)
            return self._finish(status, seen, t0, task_vars)
        self._task.async_val = int(own["timeout_s"]) + 60
        try:
            started = super()._execute_module(module_name=module_name, module_args=module_args,
                                              task_vars=task_vars, wrap_async=True)
        finally:
            self._task.async_val = 0
        if started.get("failed") or "ansible_job_id" not in started:
            return started

        def on_line(line: str) -> None:
            _count(seen, line)

        def show() -> None:
            if seen["current"] is None or seen["shown"] == seen["files"]:
                return
            name, size = seen["current"]
            of = f" of {_mb(total)}" if total else ""
            display.display(f"  {host}: copied {name} ({_mb(size)}); {seen['files']} files, {_mb(seen['bytes'])}"
                            f"{of} so far, {format_duration(time.monotonic() - t0)}")
            seen["shown"] = seen["files"]

        def idle(elapsed: float) -> None:
            done = f"; {seen['files']} files, {_mb(seen['bytes'])} done" if seen["files"] else ""
            display.display(f"  {host}: still copying ({format_duration(elapsed)} so far{done}; log: "
                            f"{own['log_file']})")

        status = self._follow_lines(started["ansible_job_id"], str(own["log_file"]), task_vars, on_line,
                                    poll=max(1.0, float(own["poll_seconds"])), timeout_s=float(own["timeout_s"]),
                                    on_idle=idle, on_poll=show)
        if status.get("failed") and "finished" not in status:
            return {"failed": True, "msg": f"host {host}: copy: {status['msg']}"}
        show()
        return self._finish(status, seen, t0, task_vars)

    def _finish(self, status: dict, seen: dict, t0: float, task_vars) -> dict:
        """synchronize's result, with a host key refusal said in words and the copy's last line printed."""
        host = self._host
        said = str(status.get("msg") or "")
        if status.get("failed") and "Host key verification failed" in said:
            source = next(iter((task_vars or {}).get("ansible_delegated_vars") or {}), "the head")
            changed = "changed" if "IDENTIFICATION HAS CHANGED" in said else "not known there"
            status["msg"] = (
                f"host {host}: the copy from {source} was refused: {host}'s ssh host key is not the one in "
                f"{source}'s known_hosts ({changed}), so rsync would not send the data to it. If {host} was "
                f"reinstalled on purpose, record its new key: ansible-playbook playbooks/ssh_mesh.yml -e "
                f"'{{\"ssh_mesh_accept_new_host_keys\": [\"{host}\"]}}' (it shows the fingerprints first); else "
                f"find out what answers at its address. rsync said: "
                f"{' '.join(ln for ln in said.splitlines() if 'Host key' in ln or 'Offending' in ln)}")
        if not status.get("failed"):
            source = next(iter((task_vars or {}).get("ansible_delegated_vars") or {}), None)
            display.display(f"  {host}: copied {seen['files']} files, {_mb(seen['bytes'])} in "
                            f"{format_duration(time.monotonic() - t0)}"
                            f"{f' from {source}' if source and source != host else ''}" if seen["files"] else
                            f"  {host}: nothing to copy, the files are the same")
        for key in ("ansible_job_id", "finished", "results_file", "started"):
            status.pop(key, None)
        return status

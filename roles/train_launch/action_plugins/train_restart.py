"""Start the next attempt of a failed run: this same ``ansible-playbook`` command again, with ``extra_vars`` added
(``-e resume=<run> -e train_restart=<state>``: train/controller/restart.py), its output printed line by line as it
comes, and its exit status returned.

The next attempt is a whole train.yml -- the plan, the preflight, the staging and the launch of any
``-e resume=`` -- not a copy of them (docs/developers/architecture.md, "Restarts"). Its own restart, should it fail
too, is started by it in turn; ``train_restart.restarts`` bounds them (``-e max_restarts``).

Options:
  extra_vars: dict, the ``-e`` values added after the command's own (later ``-e`` values win in Ansible).

Returns ``rc`` (the attempt's exit status); fails when it is not 0 (its own output above says why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):
    """Runs the next attempt (see the module docstring)."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("extra_vars",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        extra = self._task.args.get("extra_vars")
        if not isinstance(extra, dict) or not extra:
            return {**result, "failed": True, "msg": "train_restart needs extra_vars (a dict)"}
        # this process is ansible-playbook itself (action plugins run in its forks): its own command line again
        argv = [sys.executable, sys.argv[0], *sys.argv[1:], "-e", json.dumps(extra)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # stdin: nothing (an inherited non-blocking stdin makes ansible-playbook refuse to start)
        with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env, bufsize=1) as child:
            for line in child.stdout:
                display.display(line.rstrip("\n"))
            rc = child.wait()
        return {**result, "changed": True, "rc": rc, "failed": rc != 0,
                "msg": "" if rc == 0 else f"the restarted run failed (exit status {rc}; its output is above)"}

"""Judge the nodes on the controller, inside ansible-playbook's own process: files/preflight.py's ``check_nodes`` or
``check_health`` -- the functions its command line runs -- without a module run and a Python start (~0.3 s of a
train.yml start-up).

    - name: Compare the nodes
      preflight_judge:
        what: nodes          # or health
        input: {...}         # files/preflight.py's IN.json for that check
      delegate_to: localhost
      run_once: true
      register: verdict

Returns ``text`` (the table, notes and warnings: what the command line prints on stdout), ``problems`` (a list, one
line each, ``host <name>: <what is wrong>; <how to fix>``) and ``in_place`` (nodes: the nodes that read the head's
local_ssd_dir in place, the head first). Never fails because of a problem found: the tasks after it stop on
``problems``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from ansible.plugins.action import ActionBase

_PREFLIGHT = Path(__file__).resolve().parents[1] / "files" / "preflight.py"


def _load_preflight():
    """files/preflight.py as a module, loaded when the action runs (an error in it fails the task, named)."""
    spec = importlib.util.spec_from_file_location("dsc_cluster_check_preflight", _PREFLIGHT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

_ARGSPEC = {
    "what": {"type": "str", "required": True, "choices": ["nodes", "health"]},
    "input": {"type": "dict", "required": True},
}


class ActionModule(ActionBase):
    """files/preflight.py's judge, called in-process."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=_ARGSPEC)
        data = json.loads(json.dumps(args["input"], default=str))  # Ansible's tagged values -> plain JSON types
        preflight = _load_preflight()
        judge = preflight.check_nodes if args["what"] == "nodes" else preflight.check_health
        text, problems = judge(data)
        result.update(changed=False, text=text, problems=list(problems), in_place=data.get("in_place") or [])
        return result

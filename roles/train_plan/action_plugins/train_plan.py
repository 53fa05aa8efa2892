"""Plan a training run on the controller: one call into train/controller/plan.py, one ``train_plan`` dict back.

    - name: Plan the run
      train_plan:
        shape: "{{ cluster_shape_values }}"
        node: {dsc_root: ..., local_ssd_dir: ..., venv_dir: ...}
        accelerator: cuda
        train_defaults: "{{ train_defaults | default({}) }}"
        launcher: pdsh
        ...
      run_once: true

The job overrides are read here from the playbook's extra variables (``-e``) only -- never from the merged
variables, so an inventory variable that happens to be named like a job key (``seed:``, ``max_steps:``) does not
change the job -- plus the one documented inventory dict ``train_defaults``. The roles' knobs (``train_*``, given with
``-e`` or in the inventory) are checked first, by their argument specs (train.controller.knobs). A user mistake fails the task with the
one-line message of train.controller.plan.PlanError / train.common.job.JobError. Nothing is written; check mode runs the same.

Returns ``train_plan`` (also as the fact ``train_plan``): see train.controller.plan.build.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars

_REPO = Path(__file__).resolve().parents[3]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from train.controller import knobs  # noqa: E402
from train.controller import plan as planmod  # noqa: E402
from train.common.job import JobError  # noqa: E402

_ARGSPEC = {
    "shape": {"type": "dict", "required": True},
    "node": {"type": "dict", "required": True},
    "accelerator": {"type": "str", "required": True},
    "train_defaults": {"type": "raw", "default": None},
    "launcher": {"type": "str", "default": "pdsh"},
    "master_port": {"type": "raw", "default": 29500},
    "output_root": {"type": "str", "default": None},
    "script": {"type": "str", "default": None},
    "script_args": {"type": "raw", "default": None},
    "script_data": {"type": "str", "default": None},
    "resume": {"type": "str", "default": None},
    "gpu_memory_mib": {"type": "int", "default": None},
    "host_memory_kib": {"type": "int", "default": None},
}


def _plain(value):
    """Ansible's tagged strings, dicts and lists -> plain JSON types (what train/ expects)."""
    return json.loads(json.dumps(value, default=str))


class ActionModule(ActionBase):
    """Build the run's plan from the preset, the overrides and the cluster shape."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def _inventory_knobs(self, declared, task_vars, extra):
        """The knobs set in the inventory (not with -e), rendered; one that does not render is left to its role."""
        out = {}
        for name in declared:
            if name in task_vars and name not in extra:
                try:
                    out[name] = self._templar.template(task_vars[name])
                except Exception:  # noqa: BLE001  (an undefined variable: the role's own check names it later)
                    continue
        return _plain(out)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=_ARGSPEC)
        args = _plain(args)
        extra = _plain(load_extra_vars(self._loader))
        try:
            # the roles' knobs (train_*), by their argument specs: a bad one stops the run here, not at its role
            declared = knobs.load()
            knobs.check(extra, declared, where="-e")
            knobs.check(self._inventory_knobs(declared, task_vars or {}, extra), declared, where="inventory")
            overrides = planmod.job_overrides(extra, args["train_defaults"])
            plan = planmod.build(
                overrides=overrides,
                accelerator=args["accelerator"],
                shape=args["shape"],
                node=args["node"],
                output_root=args["output_root"] or str(_REPO / "outputs"),
                templates_dir=str(_REPO / "templates" / "deepspeed"),
                launcher=args["launcher"],
                master_port=args["master_port"],
                script=args["script"],
                script_args_value=args["script_args"],
                script_data=args["script_data"],
                resume=args["resume"],
                gpu_memory_bytes=args["gpu_memory_mib"] * 2**20 if args["gpu_memory_mib"] else None,
                host_memory_bytes=args["host_memory_kib"] * 1024 if args["host_memory_kib"] else None,
                restart_state=extra.get("train_restart"),
            ).as_dict()
        except JobError as exc:
            result.update(failed=True, msg=f"error: {exc}")
            return result
        except ImportError as exc:
            result.update(failed=True, msg=(
                f"error: the plan needs {exc.name or exc} in the Python that runs ansible-playbook ({sys.executable}) "
                "(a user script's TrainingArguments are read with transformers' HfArgumentParser); install the "
                "controller's requirements.txt there (make setup does)"))
            return result
        except OSError as exc:
            result.update(failed=True, msg=f"error: {exc.strerror or exc} ({exc.filename or 'the controller'}); "
                                           "check the path and its permissions (train_output_dir, script)")
            return result
        result.update(changed=False, train_plan=plan, ansible_facts={"train_plan": plan})
        return result

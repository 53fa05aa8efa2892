#!/usr/bin/python
"""Load pre-built DeepSpeed ops the way a job does and report which fail: an Ansible module.

Run with the venv's interpreter (the task sets ``ansible_python_interpreter: "{{ venv_dir }}/bin/python"``). ds_report
only reads the list of ops setup.py built; loading catches a built op that cannot be used (e.g. a missing shared
library). An op that is not pre-built is reported, never JIT-compiled. Only reads: ``changed`` is always false, and
it runs in check mode too. ``load_ops`` imports DeepSpeed when called, nothing at import (the role tests import this
file with the node venv, which has no Ansible); ``main`` is the module.
"""

import contextlib
import os
import sys

DOCUMENTATION = r"""
---
module: deepspeed_load_ops
short_description: Load pre-built DeepSpeed ops as a job would, and report which fail
description:
  - Imports DeepSpeed with the interpreter the module runs with; run it with the node venv's
    (C(ansible_python_interpreter={{ venv_dir }}/bin/python)) and the environment of a job (C(DS_ACCELERATOR)).
  - An op that is not pre-built for the current accelerator is reported, never JIT-compiled.
  - Only reads; never reports a change; supports check mode. What DeepSpeed prints goes to stderr.
options:
  venv:
    description: The node's C(venv_dir); fails when the interpreter is not C(<venv>/bin/python) (node_venv.py).
    type: path
  ops:
    description: Names of DeepSpeed ops (the keys of C(deepspeed.ops.op_builder.all_ops.ALL_OPS)).
    type: list
    elements: str
    required: true
author: deepspeed-cluster
"""

EXAMPLES = r"""
- name: Load the expected ops
  deepspeed_load_ops:
    venv: "{{ venv_dir }}"
    ops: [cpu_adam, fused_adam]
  vars:
    ansible_python_interpreter: "{{ venv_dir }}/bin/python"
  environment:
    DS_ACCELERATOR: cpu
  register: loaded
"""

RETURN = r"""
ops:
  description:
    - Each op asked for and how it loads; C(ok), C(not pre-built for accelerator <name>), C(unknown op for
      accelerator <name>), or C(<exception type>: <message>) of the load.
  returned: always
  type: dict
  sample: {"cpu_adam": "ok", "async_io": "not pre-built for accelerator cpu"}
failures:
  description: The entries of C(ops) that are not C(ok).
  returned: always
  type: dict
  sample: {"async_io": "not pre-built for accelerator cpu"}
"""


@contextlib.contextmanager
def stdout_to_stderr():
    """Send what is printed meanwhile to stderr, at the file descriptor (DeepSpeed's logger writes to stdout, an
    op's library may write to fd 1): a module's stdout is its JSON result only."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def load_ops(names):
    """{op name: "ok" or why it does not load} for the op names ``names`` (list of str), in their order.
    Raises ImportError when DeepSpeed cannot be imported."""
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import accelerator_name, installed_ops
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    results = {}
    for name in names:
        if name not in ALL_OPS:
            results[name] = "unknown op for accelerator %s" % get_accelerator()._name
        elif not installed_ops.get(name) or accelerator_name != get_accelerator()._name:
            results[name] = "not pre-built for accelerator %s" % get_accelerator()._name
        else:
            try:
                ALL_OPS[name].load(verbose=False)
                results[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - report any load failure
                results[name] = "%s: %s" % (type(exc).__name__, exc)
    return results


def main():
    # imported here: the role tests import this file's functions with the node venv's Python, which has no Ansible
    from ansible.module_utils.basic import AnsibleModule
    from ansible.module_utils.node_venv import VENV_OPTION, refuse_other_python

    module = AnsibleModule(argument_spec={"venv": VENV_OPTION,
                                          "ops": {"type": "list", "elements": "str", "required": True}},
                           supports_check_mode=True)
    refuse_other_python(module, "deepspeed_load_ops")
    try:
        with stdout_to_stderr():
            ops = load_ops(module.params["ops"])
    except ImportError as exc:
        module.fail_json(msg="DeepSpeed cannot be imported with %s (%s: %s); install it into the venv with the "
                             "deepspeed role (site.yml)" % (sys.executable, type(exc).__name__, exc))
    module.exit_json(changed=False, ops=ops, failures={name: why for name, why in ops.items() if why != "ok"})


if __name__ == "__main__":
    main()

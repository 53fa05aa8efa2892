"""What the roles' node-venv modules share (roles/*/library): they run with the node venv's Python, and refuse another.

A task runs such a module with ``vars: ansible_python_interpreter: "{{ venv_dir }}/bin/python"`` and the argument
``venv: "{{ venv_dir }}"``. An ``ansible_python_interpreter`` given with ``-e`` wins over the task's, and the module
would then describe or change another Python: :func:`refuse_other_python` fails the task instead.

The python_env role (the venv's role) holds this file; deepspeed and cluster_check link it into their own
module_utils/, since Ansible finds a role's module_utils only once the play has loaded that role.
"""

import os
import sys

#: the ``venv`` option of every node-venv module's argument_spec
VENV_OPTION = {"type": "path", "required": False}


def refuse_other_python(module, name):
    """fail_json (what, where, fix) when this Python is not ``<venv>/bin/python`` for the module's ``venv`` argument;
    nothing when it is, or when no venv was given. ``module``: the AnsibleModule; ``name``: the module's name."""
    venv = module.params["venv"]
    if venv and os.path.normpath(sys.executable) != os.path.join(os.path.normpath(venv), "bin", "python"):
        module.fail_json(msg="%s runs with %s, not with the venv's %s/bin/python (venv_dir): an "
                             "ansible_python_interpreter given with -e overrides the task's; set it in the inventory "
                             "instead" % (name, sys.executable, venv))

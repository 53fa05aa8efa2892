"""Jinja filter ``deepspeed_launch_argv``: the project's one launch-command builder (train/controller/launch.py) for tasks.

    argv: "{{ venv_dir ~ '/bin/deepspeed' | deepspeed_launch_argv(hostfile, cluster_shape, ['allreduce.py', ...]) }}"

The training's commands come from the same function through the train_plan action; the health check of
cluster_check uses this filter, so both start DeepSpeed's launcher the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[3])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from train.controller.launch import deepspeed_argv, shell_line  # noqa: E402


def deepspeed_launch_argv(deepspeed, hostfile, shape, entry, master_port, node_rank=None):
    """argv (list of str) of ``deepspeed`` for ``shape`` (cluster_shape_values): see train.controller.launch.deepspeed_argv."""
    return deepspeed_argv(str(deepspeed), str(hostfile), str(shape["master_addr"]), master_port,
                          [str(e) for e in entry], include=str(shape.get("include") or ""),
                          single_node=bool(shape["single_node"]), node_rank=node_rank)


def deepspeed_shell_line(argv, log):
    """``exec <argv> > log 2>&1`` for ansible.builtin.shell: see train.controller.launch.shell_line."""
    return shell_line([str(a) for a in argv], str(log))


def is_ip_address(value):
    """True when ``value`` is an IPv4 or IPv6 address (what /etc/hosts needs in its first field)."""
    import ipaddress

    try:
        ipaddress.ip_address(str(value).strip())
    except ValueError:
        return False
    return True


class FilterModule:
    """Filters of the cluster_shape role."""

    def filters(self):
        return {"deepspeed_launch_argv": deepspeed_launch_argv, "deepspeed_shell_line": deepspeed_shell_line,
                "is_ip_address": is_ip_address}

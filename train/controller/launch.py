"""The one builder of DeepSpeed launch commands (argv form), for the training launch and the health check.

Both launch modes start DeepSpeed's own launcher (deepspeed/launcher/runner.py); this module only decides its
arguments, so a job and `playbooks/check.yml`'s all-reduce test start the same way:

* ``pdsh`` (default): the head runs ``deepspeed --hostfile H --master_addr A --master_port P <entry> <args>``; the
  runner starts every node's ranks over ssh with pdsh (PDSHRunner). On one node ``--no_ssh_check`` skips the
  runner's ``ssh <first host> hostname`` probe (that host is the node itself: it would ssh to the machine it runs on;
  docs/developers/architecture.md, "Known facts").
* ``ansible``: Ansible starts ``deepspeed --hostfile H --no_ssh --node_rank N ...`` on every node itself (no ssh
  between the nodes); N is the node's line in the hostfile.

Imported by the ``train_plan`` action (roles/train_plan) and, through the ``deepspeed_launch_argv`` filter
(roles/cluster_shape/filter_plugins), by the cluster_check health check. Standard library only.
"""

from __future__ import annotations

import shlex


def deepspeed_argv(deepspeed: str, hostfile: str, master_addr: str, master_port: int | str, entry: list[str],
                   args: list[str] | None = None, *, include: str = "", single_node: bool = False,
                   node_rank: int | None = None) -> list[str]:
    """Return the argv (list of str) that starts DeepSpeed's launcher for one job or check.

    Args:
        deepspeed: path of the ``deepspeed`` launcher in the node venv (``<venv_dir>/bin/deepspeed``).
        hostfile: path of the rendered hostfile on the node that runs the command.
        master_addr: the head's cluster address (``127.0.0.1`` on one node), from the cluster shape.
        master_port: TCP port of the rendezvous on the head.
        entry: what follows the launcher's own options: the script and its leading arguments, e.g.
            ``["--module", "train.rank.run_script", "scripts/run_mlm.py"]`` (the runner's ``--module`` runs the rank
            as ``python -m``, from the launcher's directory, on every node) or ``["allreduce.py"]``.
        args: the entry's arguments, passed through unchanged (see the quoting rule below).
        include: DeepSpeed's ``--include`` value (``host:0,1@host``); "" when every slot is used.
        single_node: one node in the hostfile (pdsh mode only: adds ``--no_ssh_check``).
        node_rank: None for pdsh mode; the node's index in the hostfile for ``--no_ssh`` (ansible mode).

    Quoting: with pdsh on more than one node the runner joins the entry's arguments into one remote shell line and
    quotes only those that contain a space, so every other argument is shell-quoted once more here (else the remote
    shell splits e.g. ``--config_overrides {"a":1,"b":2}``). In the other cases the arguments are passed as they are.

    Raises:
        ValueError: an empty entry, a port that is not an integer in 1..65535, or a negative node rank.
    """
    if not entry:
        raise ValueError("entry must name the script to launch")
    port = int(master_port)
    if not 1 <= port <= 65535:
        raise ValueError(f"master port {master_port!r} is not a TCP port (1-65535)")
    argv = [deepspeed, "--hostfile", hostfile, "--master_addr", str(master_addr), "--master_port", str(port)]
    if node_rank is not None:
        if int(node_rank) < 0:
            raise ValueError(f"node rank must be >= 0, got {node_rank!r}")
        argv += ["--no_ssh", "--node_rank", str(int(node_rank))]
    elif single_node:
        argv.append("--no_ssh_check")
    if include:
        argv += ["--include", include]
    user = [str(a) for a in list(entry) + list(args or [])]
    if node_rank is None and not single_node:
        user = [a if " " in a else shlex.quote(a) for a in user]
    return argv + user


def shell_line(argv: list[str], log: str) -> str:
    """One ``sh`` line that replaces the shell with ``argv`` and sends stdout and stderr to ``log`` (path).

    Every word is quoted with shlex.quote, so the shell passes ``argv`` to the launcher exactly as given.
    """
    return f"exec {' '.join(shlex.quote(a) for a in argv)} > {shlex.quote(log)} 2>&1"

"""Jinja filter ``ungathered``: the error of a run whose checkpoints the head could not gather (roles/train_launch
ungathered.yml, after the run's results came back).

    "{{ _train_launch_gathered.incomplete | ungathered(train_plan, _held) }}"
"""

from __future__ import annotations

import re

_STEP = re.compile(r"^checkpoint-(\d+)$")


def _by_step(names):
    return sorted(names, key=lambda n: int(_STEP.match(n).group(1)) if _STEP.match(n) else -1)


def _ranks(ranks):
    ranks = list(ranks)
    return "rank%s %s" % ("s" if len(ranks) > 1 else "", ", ".join(str(r) for r in ranks))


def ungathered(incomplete, plan, held):
    """The message that stops train.yml when a run ended but some of its checkpoints are not whole on the head.

    Args:
      incomplete: {checkpoint name: [problem, ...]} -- train/node/checkpoints.py gather's ``incomplete`` (the
        problems of each, then why a node's files could not be pulled, e.g. "worker-1: worker-1's ssh host key ...").
      plan: the run's plan (train_plan): run_name, head, hosts, paths.output (the output directory, the same path on
        every node) and paths.out_dir (the results on the controller).
      held: {node: [global rank, ...]} (the node_ranks filter of the plan).

    Returns:
      str: what is missing (each checkpoint and its problems), where it still is (the output directory on each node
      and the ranks whose files are there), and how to fetch it (mend the cause, then ``-e attach=<run>``).
      "" when ``incomplete`` is empty.
    """
    if not incomplete:
        return ""
    names = _by_step(incomplete)
    what = "; ".join("%s: %s" % (n, "; ".join(incomplete[n]) or "not whole") for n in names)
    where = ", ".join("%s (%s)" % (h, _ranks(held[h])) for h in plan["hosts"] if held.get(h))
    run = plan["run_name"]
    return (
        "run %s trained to its end, but the head %s could not gather every node's part of %s, so %s did not come "
        "back to %s (its model, metrics and logs did): %s. Nothing is lost: each node still holds its part in %s/ "
        "(%s). Mend what is said above (e.g. a changed ssh host key: ansible-playbook playbooks/ssh_mesh.yml says "
        "which key and how to accept it), then ansible-playbook train.yml -e attach=%s gathers %s on the head and "
        "brings %s back."
        % (run, plan["head"], ", ".join(names), "it" if len(names) == 1 else "they", plan["paths"]["out_dir"], what,
           str(plan["paths"]["output"]).rstrip("/") + "/" + ("checkpoint-*" if len(names) > 1 else names[0]), where,
           run, "it" if len(names) == 1 else "them", "it" if len(names) == 1 else "them"))


class FilterModule:
    """ungathered."""

    def filters(self):
        return {"ungathered": ungathered}

"""Jinja filters of a run that ended badly (roles/train_launch follow.yml and stopped.yml): ``run_failure``, the
sentence of a failed run's error that names the node that failed first and the ranks that died after it; ``run_kept``,
the end of every such message: the complete checkpoints that came back and the command that goes on from them.

    "{{ _gone | run_failure(_held, _train_launch_dead_ranks | default([]), _train_launch_watch,
                            _train_launch_dead_host) }}"
    "{{ __train_launch_kept.files | map(attribute='path') | run_kept(train_plan.run_name) }}"
"""

from __future__ import annotations

import re


def _held_by(held, node):
    """"(unreachable: it held rank 2)" / "(unreachable: it held ranks 2, 3)" for a node that did not answer."""
    ranks = list(held.get(node, []))
    return "(unreachable: it held rank%s %s)" % ("s" if len(ranks) > 1 else "", ", ".join(str(r) for r in ranks))


def _ranks_text(dead):
    """"rank 2 on worker-1 (killed: ...), rank 0 on head-1 (error: ...)"."""
    return ", ".join("rank %s on %s (%s)" % (x["rank"], x["node"], x["what"]) for x in dead)


def run_failure(gone, held, dead, watch, dead_host):
    """"Failed node: <node> ...; then: ... . " for the run's error message, or "" when no node is to blame.

    The node that failed first is the first one that did not answer the liveness check (its peers' errors only
    follow from it), else the node of the first dead rank, else ``dead_host``.

    Args:
      gone: the nodes that did not answer the last liveness check, list of str (the watch's silent_nodes), first
        the one to blame.
      held: {node: [global rank, ...]} (the node_ranks filter of the plan); a node missing from it holds none.
      dead: the dead ranks, most likely cause first (the dead_ranks filter): list of {node, rank, what}.
      watch: the deepspeed_watch result (dict, {} when it did not run): dead_lines (list of str, the failure's last
        log lines) and dead_host (the node they came from; "" or absent: the head's own launcher).
      dead_host: the node named by the failure line or the liveness check, "" when none.

    Returns:
      str ending in ". " (to be followed by the next sentence), or "" when gone, dead and dead_host are all empty:
      * a node gone: "Failed node: <g1> (unreachable: it held rank[s] <r, ...>), <g2> (unreachable: ...)" and, for
        the dead ranks on the nodes that answered, "; then: rank <r> on <node> (<what>), ...";
      * else: "Failed node: <node>", ", rank <r> (<what>)" for the first dead rank, "; then: rank <r> on <node>
        (<what>), ..." for the others, and "; its last lines: <l1> | <l2>" when the watch has dead_lines from this
        node (or from the head's launcher: no dead_host).
      Raises KeyError when a dead rank lacks node, rank or what.

    Examples:
      run_failure(["worker-2"], {"head-1": [0], "worker-2": [1, 2]}, [], {}, "")
      -> "Failed node: worker-2 (unreachable: it held ranks 1, 2). "
      run_failure([], {}, [{"node": "worker-1", "rank": 2, "what": "killed: no exit recorded, pid 42"},
                           {"node": "head-1", "rank": 0, "what": "error: RuntimeError"}], {}, "")
      -> "Failed node: worker-1, rank 2 (killed: no exit recorded, pid 42); then: rank 0 on head-1 "
         "(error: RuntimeError). "
    """
    gone, dead = list(gone), list(dead)
    node = gone[0] if gone else (dead[0]["node"] if dead else dead_host)
    if not node:
        return ""
    text = "Failed node: %s" % node
    if gone:
        text += " " + _held_by(held, node) + "".join(", %s %s" % (g, _held_by(held, g)) for g in gone[1:])
        answered = [x for x in dead if x.get("node") not in gone]
        if answered:
            text += "; then: " + _ranks_text(answered)
    else:
        if dead:
            text += ", rank %s (%s)" % (dead[0]["rank"], dead[0]["what"])
        if len(dead) > 1:
            text += "; then: " + _ranks_text(dead[1:])
        lines = list(watch.get("dead_lines") or [])
        if lines and (watch.get("dead_host") or "") in ("", node):
            text += "; its last lines: " + " | ".join(str(line) for line in lines)
    return text + ". "


def run_kept(paths, run):
    """What a run that ended badly kept to go on from, the end of its message: ``", with its complete checkpoints
    (checkpoint-360, checkpoint-380); to go on from the newest: ansible-playbook train.yml -e resume=<run>"``, or
    ``"; it had saved no complete checkpoint, so it can only start again"``.

    Args:
      paths: the ``checkpoint-<step>`` directories that came back to the controller (collect.yml brings complete
        ones only), any order; other names are left out.
      run: the run's name.
    """
    steps = sorted(int(m.group(1)) for m in (re.fullmatch(r"checkpoint-(\d+)", str(p).rstrip("/").rsplit("/", 1)[-1])
                                             for p in paths or []) if m)
    if not steps:
        return "; it had saved no complete checkpoint, so it can only start again"
    return (", with its complete checkpoints (%s); to go on from the newest: ansible-playbook train.yml -e resume=%s"
            % (", ".join("checkpoint-%d" % s for s in steps), run))


class FilterModule:
    """run_failure, run_kept."""

    def filters(self):
        return {"run_failure": run_failure, "run_kept": run_kept}

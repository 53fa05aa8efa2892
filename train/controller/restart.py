"""The restart policy of train.yml: after a run failed, whether it starts again by itself, from which checkpoint, on
which nodes (standard library and train.* only: the controller's Python runs it through the ``restart_decision``
filter of roles/train_launch).

    decision = decide(plan=train_plan, gone=[...], dead=[...], last_step=47, error="...", state=None,
                      max_restarts=3, min_nodes=1, spares=[], now=time.time())
    if decision["retry"]: print(decision["line"]); ansible-playbook <the same command> -e <decision["extra_vars"]>

The fault is classified by :mod:`train.node.faults` (what is retried, what is not, the node to leave out); this
module adds what only the controller knows: the run's complete checkpoints on the controller (a restart is a
``-e resume=`` of the run, so it needs one), the nodes of the next attempt (the run's nodes less those left out
now and before, a spare of the inventory group ``spares`` for each node left out where one is declared), the floor
``min_nodes``, and the head (it holds the checkpoints and starts the launcher: a run whose head failed is not
restarted). Why the loop lives in the controller's train.yml: docs/developers/architecture.md ("Restarts").

The next attempt is the same ``ansible-playbook`` command with ``-e resume=<run>`` and ``-e train_restart=<state>``
added (the plan, the preflight, the staging and the launch of any resume; roles/train_launch allocation.yml takes
the state's ``nodes`` as the run's nodes). The state carries the faults so far, which the attempts record in
``attempts.json`` (metrics.json and the summary list them).
"""

from __future__ import annotations

import re

from train.node import checkpoints, faults

# the follower's line for a lost node: "..., 3 checks in a row over 16s" (train.controller.progress.format_duration:
# 16s, 1m02s, 1h05m)
_LIVENESS = re.compile(r"(\d+) checks in a row over ((?:\d+h)?(?:\d+m)?(?:\d+(?:\.\d+)?s)?)")


def _seconds(text: str) -> float | None:
    """Seconds of a format_duration text ("16s", "1m02s", "1h05m"), None for an empty one."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts) if parts else None


def _detail(kind: str, error: str) -> str:
    """The liveness check's own numbers for a lost node ("3 checks in 16 s"), else ""."""
    m = _LIVENESS.search(error or "") if kind == faults.NODE_LOST else None
    seconds = _seconds(m.group(2)) if m else None
    return f"{m.group(1)} checks in {seconds:.0f} s" if seconds is not None else ""


def _what(fault: faults.Fault, error: str) -> str:
    """"worker-2 did not answer (3 checks in 16 s)" for a lost node, else the fault's own description."""
    if fault.kind == faults.NODE_LOST and fault.node and fault.detail.startswith("Slurm:"):
        return f"Slurm took {fault.node} for dead ({fault.detail})"
    if fault.kind == faults.NODE_LOST and fault.node:
        numbers = _detail(fault.kind, error)
        return f"{fault.node} did not answer" + (f" ({numbers})" if numbers else "")
    return fault.describe()


def decide(*, plan: dict, gone=(), dead=(), last_step=None, error: str = "", state: dict | None = None,
           max_restarts: int = 0, min_nodes: int = 1, spares=(), now: float = 0.0, hung=(),
           slurm: dict | None = None) -> dict:
    """Whether the failed attempt of ``plan``'s run starts again, and how.

    Args:
        plan: the attempt's train_plan (run_name, hosts with the head first, head, ranks {node: ranks},
            world_size, launcher, paths.out_dir: the run's results on the controller, where its complete
            checkpoints came back).
        gone: the nodes that did not answer the last liveness check (the follower's silent_nodes), first the one
            that failed first.
        dead: the dead ranks, most likely cause first ({node, rank, what}: the dead_ranks filter).
        hung: the ranks the hang watchdog named ([{rank, host, why}]: the follower's ``hung``), stuck first.
        slurm: Slurm's record of the attempt's ended job (the follower's ``slurm_record``: JobState, Reason, and
            FailedNode, the job's node Slurm holds down), or None.
        last_step: the last step the attempt logged (None: none).
        error: the follower's error line (its liveness numbers are quoted).
        state: ``-e train_restart`` of this attempt (None for the first): {"restarts": done, "exclude": nodes left
            out before, "faults": [the records of earlier faults]}.
        max_restarts, min_nodes: the run's job keys (train/common/keys.py: validated with the job).
        spares: the inventory group ``spares`` (nodes provisioned but not in the run).
        now: the controller's clock (epoch seconds) when the fault was noticed.

    Returns:
        {"retry": bool, "reason": the sentence for the user (why not, or what is done), "line": the progress
        line of a restart ("" when not retried), "record": this fault's record (kind, node, rank, step, detail,
        attempt, noticed_at, detect_s, checkpoint_step, steps_lost, nodes, world sizes), "extra_vars": the
        ``-e`` values of the next attempt ({} when not retried)}.
    """
    knobs = {"max_restarts": int(max_restarts), "min_nodes": int(min_nodes)}
    state = dict(state or {})
    earlier = [r["fault"] for r in state.get("faults", [])]
    done = int(state.get("restarts", 0))
    hosts, head = list(plan["hosts"]), plan["head"]
    node_of_rank = {}
    start = 0
    for h in hosts:  # global ranks in hostfile order
        for r in range(int(plan["ranks"][h])):
            node_of_rank[start + r] = h
        start += int(plan["ranks"][h])
    fault = faults.classify(unreachable=list(gone), slurm=dict(slurm) if slurm else None,
                            hung=[dict(h) for h in hung or []], dead=[dict(d) for d in dead], step=last_step,
                            node_of_rank=node_of_rank)
    verdict = faults.decide(fault, earlier, done, knobs["max_restarts"])
    numbers = _detail(fault.kind, error)
    ckpt = checkpoints.latest_complete(plan["paths"]["out_dir"])
    ckpt_step = checkpoints.step_of(ckpt) if ckpt is not None else None
    record = {"attempt": done + 1, "fault": fault.as_dict(), "noticed_at": round(float(now), 3),
              "detect_s": _seconds(_LIVENESS.search(error).group(2)) if numbers else None,
              "checkpoint_step": ckpt_step,
              "steps_lost": (int(last_step) - (ckpt_step or 0)) if last_step is not None else None,
              "nodes": hosts, "world_size": int(plan["world_size"])}
    out = {"retry": False, "reason": verdict.reason, "line": "", "record": record, "extra_vars": {}}
    if not verdict.retry:
        return out
    what = _what(fault, error)
    if ckpt is None:
        out["reason"] = (f"not retried: {what}; the run has no complete checkpoint yet in {plan['paths']['out_dir']} "
                         f"to go on from (a run saves one every save_steps steps); start it again")
        return out
    left_out = list(dict.fromkeys([*state.get("exclude", []), *verdict.exclude, *gone]))
    if head in left_out:
        out["reason"] = (f"not retried: {what}; {head} is the run's head (it holds the gathered checkpoints and "
                         f"starts the launcher): bring it back, then ansible-playbook train.yml -e resume="
                         f"{plan['run_name']}")
        return out
    kept = [h for h in hosts if h not in left_out]
    free = [s for s in spares if s not in left_out and s not in hosts]
    lost = [h for h in hosts if h in left_out]
    taken = free[:len(lost)]
    nodes = kept + taken
    if len(nodes) < knobs["min_nodes"]:
        out["reason"] = (f"not retried: {what}; {len(nodes)} node{'s' if len(nodes) != 1 else ''} would be left "
                         f"({', '.join(nodes)}), fewer than min_nodes={knobs['min_nodes']}: bring "
                         f"{', '.join(lost)} back, or give -e min_nodes=")
        return out
    slots = {h: int(plan["ranks"][h]) for h in hosts}
    new_world = sum(slots[h] for h in kept) + sum(slots[lost[i]] for i in range(len(taken)))
    spare_text = f"; spare {', '.join(taken)} in place of {', '.join(lost[:len(taken)])}" if taken else ""
    left_text = f"; {', '.join(lost)} left out" if lost else ""
    out["line"] = (f"fault: {what} — restart {done + 1} of {knobs['max_restarts']} from {ckpt.name} on "
                   f"{', '.join(nodes)} (world size {plan['world_size']} -> {new_world}){left_text}{spare_text}")
    out["reason"] = out["line"]
    out["retry"] = True
    record.update(next_nodes=nodes, next_world_size=new_world, left_out=lost, spares=taken)
    out["extra_vars"] = {"resume": plan["run_name"],
                         "train_restart": {"restarts": done + 1, "exclude": left_out, "nodes": nodes,
                                           "faults": [*state.get("faults", []), record]}}
    return out

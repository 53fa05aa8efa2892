"""What failed a run, and whether a restart could help: the restart policy's one classification of a fault.

Pure functions over what the follower and the head already know when a run fails (the liveness check, the rank
status files of :mod:`train.node.rank_status`, the hang watchdog, Slurm's record of
the job, the launcher's exit status); nothing here reads a file or a node. The restart loop calls them; the policy
is documented in docs/checkpoints-and-failures.md ("Which faults are retried").

Interface (for the restart loop)::

    from train.node.faults import classify, decide

    fault = classify(unreachable=["worker-2"], step=40, node_of_rank={...})   # -> Fault
    verdict = decide(fault, earlier_faults, restarts_done=0, max_restarts=3)  # -> Decision
    if verdict.retry: ... restart from the newest complete checkpoint, leaving out verdict.exclude ...
    else: fail with verdict.reason

``classify`` takes keyword arguments only, each optional, and picks the first cause that applies, in this order
(the node that failed first explains its peers' errors, so it comes before them):

* ``unreachable``: nodes that did not answer the liveness check (the watch's ``silent_nodes``)    -> NODE_LOST
* ``slurm``: Slurm's record of the ended job (``train.controller.progress.slurm_record``: ``JobState``, ``Reason``,
  ``NodeList``; the follower adds ``FailedNode`` and ``FailedNodeReason``, the job's node Slurm holds down and the
  reason given); ``NODE_FAIL`` (a node Slurm took for dead) -> NODE_LOST, ``PREEMPTED`` -> PREEMPTED,
  ``TIMEOUT`` (the job's time limit) -> TIME_LIMIT, ``OUT_OF_MEMORY`` -> RANK_KILLED
* ``hung``: ranks the hang watchdog found stuck (``[{"rank", "host"}]``)                             -> HANG
* ``late``: ranks not through the rendezvous in time (``rank_status.late_to_join``)                 -> RENDEZVOUS
* ``dead``: the dead ranks, most likely cause first (``rank_status.dead_ranks`` records, or the playbook's
  ``{node, rank, what}``): no exit recorded (SIGKILL, the OOM killer) -> RANK_KILLED; an error that says a peer or
  the communication went away (COLLECTIVE_ERRORS) -> COLLECTIVE; an error of the GPU itself (GPU_ERRORS) ->
  GPU_ERROR; any other exception -> EXCEPTION (``at_start`` when no step was logged in this attempt)
* ``exit_code``: the launcher's exit status alone: killed by a signal (negative, or 128 + N) -> RANK_KILLED,
  another non-zero one -> UNKNOWN

``decide(fault, earlier, restarts_done, max_restarts)`` says whether to restart:

* no, when ``max_restarts`` restarts are used (0: never; the reason says the knob);
* no, for a kind that a restart cannot mend (NOT_RETRIED: an exception in the user's or the preset's code before
  the first step, the job's time limit, a cause not known);
* no, when the same error (:meth:`Fault.signature`) came at the same step in an earlier attempt: a deterministic
  failure is not retried in a loop (Determined's ``cancel_retries``);
* else yes; ``exclude`` lists the node to leave out of the next attempt (the lost node, the one whose GPU failed,
  the one whose rank hung); the restart loop's check of the nodes before the restart may leave out more.

Every ``reason`` is a sentence for the user's shell, naming what happened, where and the knob.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

# the kinds of fault
NODE_LOST = "node_lost"  # a node stopped answering (liveness check), or Slurm took it for dead (NODE_FAIL)
RANK_KILLED = "rank_killed"  # a rank killed by a signal: SIGKILL, the kernel's OOM killer, Slurm's OUT_OF_MEMORY
COLLECTIVE = "collective"  # a collective or connection error: a peer went away, NCCL/gloo failed, a store timed out
GPU_ERROR = "gpu_error"  # the GPU itself failed (ECC, Xid, a lost device)
HANG = "hang"  # no new logged step within the watchdog's bound
RENDEZVOUS = "rendezvous"  # the ranks did not all get through torch.distributed's rendezvous in time
PREEMPTED = "preempted"  # Slurm preempted the job
EXCEPTION = "exception"  # an exception in the training code (the user's script or the preset's)
TIME_LIMIT = "time_limit"  # the Slurm job's time limit
UNKNOWN = "unknown"  # the launcher failed and nothing says why

#: kinds a restart may mend (a node, a process, the network); the others need a person
RETRIED = frozenset({NODE_LOST, RANK_KILLED, COLLECTIVE, GPU_ERROR, HANG, RENDEZVOUS, PREEMPTED, EXCEPTION})
NOT_RETRIED = frozenset({TIME_LIMIT, UNKNOWN})

#: kinds whose cause is the node itself: it is left out of the next attempt (Decision.exclude)
NODE_KINDS = frozenset({NODE_LOST, GPU_ERROR, HANG})

#: what an error says when the communication failed rather than the code: gloo, NCCL, torch's store and elastic
COLLECTIVE_ERRORS = ("closed by peer", "Connection reset by peer", "Broken pipe", "communicator was aborted",
                     "Socket Timeout", "recvValue failed", "Connection refused", "Connection closed",
                     "DistBackendError", "DistNetworkError", "DistStoreError", "NCCL error", "ncclRemoteError",
                     "ncclSystemError", "ncclInternalError", "Watchdog caught collective operation timeout",
                     "ProcessGroupNCCL", "ProcessGroupGloo", "Gloo connectFullMesh", "Timed out waiting")

#: what an error says when the GPU failed (the node is suspect: it is left out of the next attempt)
GPU_ERRORS = ("uncorrectable ECC error", "ECC error", "Xid", "CUDA error: unspecified launch failure",
              "CUDA-capable device(s) is/are busy or unavailable", "GPU is lost", "device has fallen off the bus",
              "cudaErrorDevicesUnavailable", "CUDA error: unknown error")

# the parts of an error message that differ between two runs of the same failure (addresses, pids, times, ports)
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\bpid \d+|\d+(?:\.\d+)?\s*(?:s|ms)\b")


@dataclass(frozen=True)
class Fault:
    """One fault of a run, as :func:`classify` found it.

    Attributes:
      kind: one of the kinds above (NODE_LOST, ...).
      node: the node it points at ("" when none: e.g. the head's own launcher, a cause not known).
      rank: the global rank it points at, or None.
      step: the last step the run logged before it (None: none in this attempt).
      detail: one line: what was seen (the error text, the liveness check's reason, Slurm's state and reason).
      at_start: no step was logged in this attempt when it came.
    """

    kind: str
    node: str = ""
    rank: int | None = None
    step: int | None = None
    detail: str = ""
    at_start: bool = False

    def signature(self) -> tuple[str, str, str]:
        """(kind, node, detail without addresses, pids and times): two faults with the same signature at the same
        step are the same failure. The node counts only for a fault of the node itself (NODE_KINDS): an exception
        is the same wherever it is raised, a lost node is not another node lost."""
        return self.kind, self.node if self.kind in NODE_KINDS else "", _VOLATILE.sub("#", self.detail).strip()

    def as_dict(self) -> dict:
        """The fault as a JSON-ready dict (the attempt's record in metrics.json and progress.jsonl)."""
        return asdict(self)

    def describe(self) -> str:
        """One phrase for the progress line: "worker-2 did not answer (...)", "rank 3 on worker-1 was killed (...)"."""
        where = (f"rank {self.rank} on {self.node}" if self.rank is not None and self.node
                 else f"rank {self.rank}" if self.rank is not None else self.node or "the run")
        what = {NODE_LOST: "was lost", RANK_KILLED: "was killed", COLLECTIVE: "lost its connection to its peers",
                GPU_ERROR: "had a GPU error", HANG: "hung", RENDEZVOUS: "did not get through the rendezvous",
                PREEMPTED: "was preempted by Slurm", EXCEPTION: "raised an exception",
                TIME_LIMIT: "reached the Slurm job's time limit", UNKNOWN: "failed"}[self.kind]
        return f"{where} {what}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class Decision:
    """:func:`decide`'s verdict: ``retry``, the ``reason`` (a sentence for the user) and the nodes to leave out of the
    next attempt (``exclude``; empty when not retried)."""

    retry: bool
    reason: str
    exclude: list[str] = field(default_factory=list)


def _killed_by_signal(code: int | None) -> int | None:
    """The signal number of an exit status that says a process was killed by one (-N from Python's subprocess,
    128 + N from a shell), else None."""
    if code is None:
        return None
    if code < 0:
        return -code
    if 128 < code < 128 + 65:
        return code - 128
    return None


def _what_of(record: dict) -> str | None:
    """The end of a dead rank: ``what`` of the playbook's records, else ``end`` of rank_status's (None: killed)."""
    if "what" in record:
        what = str(record["what"])
        return None if what.startswith("killed") else what
    end = record.get("end")
    return None if end is None else str(end)


def classify(*, unreachable=(), slurm: dict | None = None, hung=(), late=(), dead=(), exit_code: int | None = None,
             step: int | None = None, node_of_rank: dict | None = None) -> Fault:
    """The fault that failed a run, from the evidence the follower has (see the module's docstring for the order).

    Args:
      unreachable: node names that did not answer the liveness check, first the one that failed first.
      slurm: Slurm's record of the ended job (str -> str: JobState, Reason, NodeList, ...), or None.
      hung: ``[{"rank": int, "host": str, ...}]``: the ranks the hang watchdog named (stuck first).
      late: ``[{"rank", "host", "waiting_s"}]``: ranks late to the rendezvous (rank_status.late_to_join).
      dead: dead ranks, most likely cause first: rank_status records (``rank``, ``end``, ``host`` or ``node``) or
        the playbook's ``{node, rank, what}`` ("killed: ..." for a rank with no exit recorded).
      exit_code: the launcher's exit status, or None.
      step: the last step the run logged in this attempt (None: none yet).
      node_of_rank: {global rank: node}, to name the node of a rank when the evidence does not.

    Returns:
      A Fault. Never raises on missing evidence: with none at all the kind is UNKNOWN.
    """
    at_start = step is None
    node_of_rank = node_of_rank or {}

    def base(kind, node="", rank=None, detail=""):
        if not node and rank is not None:
            node = str(node_of_rank.get(rank, node_of_rank.get(str(rank), "")))
        return Fault(kind=kind, node=node, rank=rank, step=step, detail=" ".join(str(detail).split())[:300],
                     at_start=at_start)

    unreachable = list(unreachable or [])
    if unreachable:
        return base(NODE_LOST, unreachable[0], detail="did not answer the liveness check" + (
            f"; also {', '.join(unreachable[1:])}" if len(unreachable) > 1 else ""))
    if slurm:
        state, reason = str(slurm.get("JobState", "")), str(slurm.get("Reason", "") or "")
        said = f"Slurm: {state}" + (f", reason {reason}" if reason and reason != "None" else "")
        if state == "NODE_FAIL":
            node = str(slurm.get("FailedNode", ""))
            why = str(slurm.get("FailedNodeReason") or "")
            return base(NODE_LOST, node, detail=said + (f"; {node} down: {why}" if node and why else ""))
        if state == "PREEMPTED":
            return base(PREEMPTED, detail=said)
        if state in ("TIMEOUT", "DEADLINE"):
            return base(TIME_LIMIT, detail=said)
        if state == "OUT_OF_MEMORY":
            return base(RANK_KILLED, detail=said + " (a rank killed for memory)")
    hung = list(hung or [])
    if hung:
        first = hung[0]
        return base(HANG, str(first.get("host") or first.get("node") or ""), first.get("rank"),
                    detail=str(first.get("why") or "no new logged step within the watchdog's bound"))
    late = list(late or [])
    if late:
        first = late[0]
        return base(RENDEZVOUS, str(first.get("host") or ""), first.get("rank"),
                    detail="not through torch.distributed's rendezvous" + (
                        " (not started)" if first.get("waiting_s") is None else ""))
    dead = list(dead or [])
    if dead:
        first = dead[0]
        rank = first.get("rank")
        rank = int(rank) if rank is not None else None
        node = str(first.get("node") or first.get("host") or "")
        what = _what_of(first)
        if what is None:
            return base(RANK_KILLED, node, rank, detail="no exit recorded: SIGKILL or the kernel's OOM killer")
        if any(p in what for p in GPU_ERRORS):
            return base(GPU_ERROR, node, rank, detail=what)
        if any(p in what for p in COLLECTIVE_ERRORS):
            return base(COLLECTIVE, node, rank, detail=what)
        if what == "never started":
            return base(RENDEZVOUS, node, rank, detail="the rank never started")
        return base(EXCEPTION, node, rank, detail=what)
    sig = _killed_by_signal(exit_code)
    if sig is not None:
        return base(RANK_KILLED, detail=f"the launcher ended with exit status {exit_code} (signal {sig})")
    return base(UNKNOWN, detail=f"the launcher ended with exit status {exit_code}" if exit_code is not None
                else "nothing says why")


def decide(fault: Fault, earlier=(), restarts_done: int = 0, max_restarts: int = 0) -> Decision:
    """Whether a run that failed with ``fault`` is started again (see the module's docstring for the rules).

    Args:
      fault: this attempt's fault (:func:`classify`).
      earlier: the faults of the run's earlier attempts (Fault or its ``as_dict()``), oldest first.
      restarts_done: restarts already made in this run (0 on the first failure).
      max_restarts: the job's ``max_restarts`` (0: never restart).

    Returns:
      A Decision; ``exclude`` names ``fault.node`` for a fault that points at a node (not for a collective error,
      an exception or a rendezvous, whose node is only where it showed).
    """
    earlier = [e if isinstance(e, Fault) else Fault(**e) for e in earlier]
    what = fault.describe()
    if fault.kind in NOT_RETRIED:
        why = {TIME_LIMIT: "the job's time limit is not a fault: the run saved a checkpoint and stopped; go on with "
                           "-e resume= in a new job (or a longer train_slurm_time_limit)",
               UNKNOWN: "its cause is not known, so a restart could fail the same way; the launcher's log says more"}
        return Decision(False, f"not retried: {what}; {why[fault.kind]}")
    if fault.kind == EXCEPTION and fault.at_start:
        return Decision(False, f"not retried: {what} before the first step: an exception in the training code (the "
                               f"script's or the preset's) at start fails the same way again; fix it and run again")
    same = [e for e in earlier if e.step == fault.step and e.signature() == fault.signature()]
    if same:
        at = f"step {fault.step}" if fault.step is not None else "the start"
        return Decision(False, f"not retried: {what}, the same error at {at} as in attempt "
                               f"{earlier.index(same[0]) + 1}: a failure that repeats where it happened is "
                               f"deterministic, a restart would only repeat it")
    if restarts_done >= max_restarts:
        return Decision(False, f"not retried: {what}; " + (
            "restarts are off (max_restarts=0)" if max_restarts <= 0 else
            f"the run has used its {max_restarts} restart{'s' if max_restarts != 1 else ''} (max_restarts="
            f"{max_restarts})"))
    exclude = [fault.node] if fault.node and fault.kind in NODE_KINDS else []
    return Decision(True, f"{what}: restart {restarts_done + 1} of {max_restarts}", exclude)

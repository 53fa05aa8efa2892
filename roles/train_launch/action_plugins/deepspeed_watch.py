"""Follow a training job started with ``async`` and print its progress while it runs.

Ansible prints a task's result only when the task ends, and a recursive ``include_tasks`` poll loop hits Python's
recursion limit after a few hundred polls. This action polls ``ansible.builtin.async_status`` on the head node,
reads the new bytes of the run's ``progress.jsonl`` (written by rank 0, see train/controller/progress.py) and of its log, and
prints each new progress record as one line the moment it appears, with the step of the last checkpoint saved so
far (the save events of the same file), and each event (a save, a warning) as a line of its own.

Options:
  jid: the ``ansible_job_id`` of the async launch task (required).
  progress_file: path of ``progress.jsonl`` on the head (required).
  log_file: path of the launcher's log on the head (required); its ``[rank R/W]`` lines are echoed, and its tail is
    returned as ``log_tail`` (and shown) when the job fails.
  poll_seconds: seconds between polls (default 10).
  tail_lines: how many log lines to show on failure (default 40).
  echo_log: print every new log line until the first progress record appears (default false) -- for a user's
    script, which may write no progress.jsonl at all (not an HF Trainer script): its log is then streamed.
  grace_seconds: after the log says a node's ranks ended with an error (pdsh's ``<host>: ssh exited with exit code
    N``, or DeepSpeed's launcher's ``exits with return code = N``) while the job still runs, how long to wait for it
    to end by itself before giving up on it (default 15). The other nodes' ranks would otherwise wait in their next
    collective until torch's process-group timeout (30 min on gloo, 10 on NCCL).
  rendezvous: ``{"within_s", "master"}`` or omitted/null: with the liveness check, a rank that has not got through
    torch.distributed's rendezvous (train.node.rank_status's ``joined``) ``within_s`` seconds after it started, or
    has not started that long after the launch, fails the run, naming the ranks and quoting torch's last line about
    it (``master``: "address:port", for the message). Torch itself would wait for its process-group timeout.
  end_within_s: seconds the ranks may take, after the progress record of the run's last step (step = max_steps),
    to write the final checkpoint and model and exit; past that the run fails, saying where it was (default 0: no
    bound). A rank stuck after ``Writing model shards`` or in a barrier would otherwise hold the nodes for ever.
  hang: the hang watchdog, ``{"floor_s", "factor", "first_step_s"}`` or omitted/null for none: no new progress
    record within train.node.watchdog.hang_bound (``max(floor_s, factor x the slowest logging interval seen)``,
    ``first_step_s`` from the launch before the first record) fails the run after every rank's Python stack is
    captured into its log, naming the ranks not where the others are (:class:`HangWatch`; the stacks need the
    liveness check's nodes).
  straggler: ``{"ratio", "intervals"}`` or omitted/null: a node whose ranks' median step time (each rank's own, in the
    progress records' ``step_s``) is above ``ratio`` x the median rank's in each of the last ``intervals`` records is
    named once, ``straggler: worker-2's ranks take 1.8x the median step time (last 3 intervals; ...)``
    (train.common.stragglers), and again if it becomes one again after keeping up.
  checkpoint: the step of the checkpoint the run resumed from (-e resume=), or omitted: the progress lines name it as
    the last checkpoint until the run saves a new one.
  stopped_file: path on the head of the note that ``train.yml -e stop=<run>`` writes before it stops the run, or
    omitted: when the follower would fail the run and the note is there, the run was stopped on request, not failed:
    the result is not failed and holds the note as ``stopped`` ({by, at}).
  news_every_s: seconds without news before a line says the run is still running (default 60); its time counts from
    the last logged step (whose number it gives), or from the launch before the first.
  slurm_job: the name of the run's Slurm job (-e launcher=slurm), or omitted: until the first progress record,
    every poll asks ``squeue`` on the head about it and prints a line when its state, Slurm's reason or its place
    among the pending jobs changes (train.controller.progress.slurm_job_line): a PENDING job is not silence.
    Slurm, not the head's ``sbatch --wait`` (the async job), says when the job has ended: while squeue lists it,
    it runs, even when the head's sbatch was killed (a head restarted, a login session ended); once squeue no longer
    lists it, Slurm's record of it (``scontrol show job``, else ``sacct``) gives its end state and the exit status
    (train.controller.progress.slurm_record, slurm_exit_status). ``jid`` may then be the id of an async job the
    head no longer has (or "").
  attach: true for ``train.yml -e attach=`` (default false): the newest record of a job of that name is this run's
    even when this follower never saw squeue list it (one run of a name at a time); at a launch, a record is taken
    only for the job squeue listed (an earlier attempt's ended job of the same name may still be in scontrol's).
  liveness: the liveness check, or omitted/null for none: ``{"nodes": [{"host", "first", "count", "python",
    "code_dir", "local"}], "runs_dir", "run", "every_s", "failures", "timeout_s", "ssh_checked"}``
    (train.node.rank_status.check_nodes' arguments; ``ssh_checked``: the preflight logged in from the head to every node,
    so each is watched from the first check, else from its first answer). Every ``every_s`` seconds one command on the head asks every node at once, over the cluster's ssh
    mesh with ``timeout_s`` (ConnectTimeout, keep-alives), whether it answers and its ranks (their status files'
    pids) live; a node that fails ``failures`` checks in a row is taken for dead (a powered-off, paused or
    cut-off node gives no error line: its peers wait in their next collective until torch's timeout). It does not
    depend on the training code or on progress: a long checkpoint save or a first-step compile is not a failure.

Returns ``rc`` (the launcher's exit status), ``records`` (how many progress records were seen), ``last`` (the last
record), ``log_tail``, for a Slurm job that ended ``slurm_record`` (Slurm's record of it) and, when it did not end
COMPLETED, ``slurm_nodes`` (its nodes Slurm holds out of service, with their reason:
train.controller.progress.slurm_nodes_in_trouble; the first is the record's ``FailedNode``), and, when the last step was seen, ``end_s`` (seconds from its record to the job's end); after a node failed, also ``dead_host`` (the node named by the first failure line or the
liveness check, or "" for the head's own launcher on one node), ``dead_line`` and ``dead_lines`` (that node's last
log lines), and on every failure ``silent_nodes`` (the nodes that did not answer the last liveness check; not
``unreachable``, which would make Ansible take the head for unreachable: the
playbook does not wait for them), and after a hang ``hung`` (the stuck ranks, ``[{"rank", "host", "why"}]``). Fails
when the launcher exits non-zero, ``grace_seconds`` after a node failed, ``end_within_s`` after the last step, past
the hang watchdog's bound, or when the liveness check takes a node for dead (the playbook then stops the run everywhere:
roles/train_launch/tasks/stop.yml).

The poll loop (``ActionModule.run``) only orders its parts, each a class or function of its own that reads and updates
the follower's :class:`Run`: :class:`Progress` (the files' new bytes, the lines printed), :class:`Stragglers`, the liveness check
(:class:`Liveness`, :class:`Rendezvous`), :class:`SlurmState`, the grace after a node failed (:func:`grace_failure`)
the end bound (:func:`end_bound_failure`) and the hang watchdog (:class:`HangWatch`). A part that gives up on the run returns a :class:`Failure`; a new
bound on a run that has not ended is one more such function in the loop's chain.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ansible.utils.display import Display

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from train.controller.ansible_async import AsyncFollowAction  # noqa: E402
from train.controller.progress import (SCONTROL_JOBS_ARGS, SLURM_ENDED, SQUEUE_ARGS, format_duration,  # noqa: E402
                                       format_event, format_record, is_event, last_checkpoint, parse_records,
                                       sacct_args, sinfo_nodes_args, slurm_exit_status, slurm_failed_nodes,
                                       slurm_job_id, slurm_job_line, slurm_nodes_in_trouble, slurm_nodes_text,
                                       slurm_record, slurm_requeue_text, slurmctld_node_down)
from train.common.stragglers import node_step_times, straggler_line, stragglers  # noqa: E402
from train.node.rank_status import late_to_join, trouble  # noqa: E402
from train.node.watchdog import hang_bound  # noqa: E402

display = Display()

_ARGSPEC = {
    "jid": {"type": "str", "required": True},
    "progress_file": {"type": "path", "required": True},
    "log_file": {"type": "path", "required": True},
    "poll_seconds": {"type": "float", "default": 10.0},
    "tail_lines": {"type": "int", "default": 40},
    "echo_log": {"type": "bool", "default": False},
    "grace_seconds": {"type": "float", "default": 15.0},
    "liveness": {"type": "dict", "default": None},
    "slurm_job": {"type": "str", "default": None},
    "attach": {"type": "bool", "default": False},
    "checkpoint": {"type": "int", "default": None},
    "rendezvous": {"type": "dict", "default": None},
    "end_within_s": {"type": "float", "default": 0.0},
    "hang": {"type": "dict", "default": None},
    "straggler": {"type": "dict", "default": None},
    "stopped_file": {"type": "path", "default": None},
    "news_every_s": {"type": "float", "default": 60.0},
}

# seconds the head's sbatch --wait is given, after squeue no longer lists the job, to see its end and exit (Slurm's
# sbatch polls slurmctld every few seconds); past that a lingering one is ended (SBATCH_PATTERN: a pkill -f regex
# whose bracket keeps it from matching the shell that runs it)
SBATCH_GRACE_S = 60.0
SBATCH_PATTERN = "[s]batch --wait --job-name={} "
# seconds a job Slurm is ending (squeue: COMPLETING) is given past grace_seconds to end, so that its record says why
# (Slurm's KillWait, 30 s by default, then SIGKILL)
SLURM_ENDING_S = 90.0

# torch.distributed's own lines about its rendezvous (c10d's TCPStore client/server, socket.cpp): quoted when the
# ranks do not all join in time
_RENDEZVOUS_LINE = re.compile(r"\[c10d\]|TCPStore|socket\.cpp|rendezvous|DistStoreError|store_based_barrier", re.I)


def rendezvous_failure(late: list[dict], bound_s: float, master: str, recent: list[str]) -> str:
    """The error of a run whose ranks did not all join the rendezvous: which ranks (where, for how long), torch's own
    last line about it from the launcher's log (``recent``), and what to do."""
    said = next((l.strip() for l in reversed(recent) if _RENDEZVOUS_LINE.search(l)), "")
    who = ", ".join(f"rank {x['rank']} on {x['host']} " + (f"(waiting {format_duration(x['waiting_s'])})"
                                                          if x["waiting_s"] is not None else "(not started)")
                    for x in late)
    return (f"the ranks did not all get through torch.distributed's rendezvous at {master} within "
            f"{format_duration(bound_s)}: {who}; " + (f"torch said: {said.rstrip('.')}" if said else "torch said nothing about it "
                                                     "in the launcher's log") +
            f". Every node must reach {master} (the plan's master address and port; playbooks/check.yml tests it), "
            f"and every rank must start; if the ranks are only slow to start, raise train_rendezvous_timeout_s")

def is_last_step(record: dict) -> bool:
    """Whether a progress record is the run's last step (``step`` >= ``max_steps``, both known)."""
    step, most = record.get("step"), record.get("max_steps")
    return isinstance(step, int) and isinstance(most, int) and most > 0 and step >= most


def end_failure(waited_s: float, bound_s: float, last: dict, checkpoint: int | None, recent: list[str]) -> str:
    """The error of a run whose ranks did not end within ``bound_s`` of its last step: where it was, the launcher's
    last line, what is kept, and the knob."""
    said = next((l.strip() for l in reversed(recent) if l.strip()), "")
    kept = (f"its checkpoints up to step {checkpoint} are complete and come back" if checkpoint is not None
            else "it saved no checkpoint")
    return (f"the ranks did not end within {format_duration(bound_s)} of the run's last step ({last.get('step')} of "
            f"{last.get('max_steps')}; waited {format_duration(waited_s)}): the final checkpoint save, the model "
            f"write or the ranks' exit after them is stuck" + (f"; the launcher's last line: {said}" if said else "")
            + f". {kept}. A model whose final save takes longer needs a larger train_end_timeout_s (0 switches the "
              f"bound off)")


# A node's ranks ended with an error: pdsh's report of that node's ssh, or DeepSpeed's launcher (launch.py's
# sigkill_handler) on that node, its line prefixed "<host>: " by pdsh.
_PDSH_EXIT = re.compile(r"^pdsh@\S+: (?P<host>[^:\s]+): ssh exited with exit code (?P<rc>-?\d+)")
_LAUNCH_EXIT = re.compile(r"^(?:(?P<host>[^:\s\[]+): )?.*\bexits with return code = (?P<rc>-?\d+)")


def node_lines(recent: list[str], host: str) -> list[str]:
    """The last 12 lines of ``recent`` from ``host`` (pdsh's "<host>: " prefix; all lines for "" or none found),
    DeepSpeed launcher's own lines left out."""
    mine = [l for l in recent if host and l.startswith(f"{host}: ")] or recent
    return [l for l in mine if "[launch.py" not in l][-12:]


def failed_node(line: str) -> tuple[str, int] | None:
    """(host, exit code) when ``line`` says a node's ranks ended with an error, else None; host "" = unprefixed."""
    for pattern in (_PDSH_EXIT, _LAUNCH_EXIT):
        m = pattern.match(line.strip())
        if m and int(m.group("rc")) != 0:
            return m.group("host") or "", int(m.group("rc"))
    return None


class Liveness:
    """Counts each node's failed liveness checks in a row (train.node.rank_status.check_nodes run on the head)."""

    def __init__(self, spec: dict, run_on_head):
        """spec: the ``liveness`` option; run_on_head(cmd) -> (rc, stdout, stderr) of a shell command there."""
        self.spec, self.run_on_head = spec, run_on_head
        self.every = float(spec.get("every_s") or 5)
        self.failures = max(1, int(spec.get("failures") or 3))
        self.head_python = next(n["python"] for n in spec["nodes"] if n.get("local"))
        self.code_dir = spec["nodes"][0]["code_dir"]
        self.next_at = 0.0
        # a node is watched once it answered (under pdsh from the start: the preflight logged in to every node from
        # the head); a node the head cannot reach over ssh at all (-e launcher=ansible without the mesh) is not
        self.watched = {n["host"] for n in spec["nodes"]} if spec.get("ssh_checked") else set()
        self.misses: dict[str, int] = {}
        self.first_miss: dict[str, float] = {}
        self.last: dict[str, dict] = {}
        self.broken = ""

    def check(self) -> dict[str, dict]:
        """One check of every node; ``{host: status}`` (check_nodes'), {} when the check itself could not run."""
        spec = self.spec
        argv = [self.head_python, "-m", "train.node.rank_status", "check", spec["runs_dir"], spec["run"],
                json.dumps(spec["nodes"]), str(spec.get("timeout_s") or 5)]
        rc, out, err = self.run_on_head(f"cd {shlex.quote(self.code_dir)} && {shlex.join(argv)}")
        try:
            result = json.loads(out.strip().splitlines()[-1])
        except (IndexError, ValueError):
            if not self.broken:
                self.broken = (err.strip().splitlines() or [f"exit code {rc}"])[-1][:300]
                display.warning(f"the liveness check could not run on the head ({self.broken}); only the launcher's "
                                f"log tells of a failed node now")
            return {}
        self.last = result
        return result

    def due(self, now: float) -> bool:
        """Whether the next check is due at ``now`` (time.monotonic() seconds)."""
        return now >= self.next_at

    def poll(self, now: float) -> tuple[str, str] | None:
        """Check now; (host, why) for the first node that failed ``failures`` checks in a row, else None."""
        self.next_at = now + self.every
        dead = None
        for host, status in self.check().items():
            why = trouble(status)
            if status.get("answered"):
                self.watched.add(host)
            elif host not in self.watched:
                if host not in self.misses:
                    display.warning(f"the liveness check cannot reach {host} from the head over ssh ({why}); it is "
                                    f"watched once it answers (playbooks/ssh_mesh.yml lets the head log in)")
                    self.misses[host] = 0
                continue
            if why is None:
                if self.misses.get(host):
                    display.display(f"  {host} answers again and its ranks run")
                self.misses[host] = 0
                continue
            self.misses[host] = self.misses.get(host, 0) + 1
            if self.misses[host] == 1:
                self.first_miss[host] = now
            if self.misses[host] < self.failures:
                display.display(f"  liveness check: {host} {why} ({self.misses[host]} of {self.failures} checks "
                                f"in a row before the run is stopped)")
            elif dead is None:
                dead = (host, f"{host} {why}, {self.failures} checks in a row over "
                              f"{format_duration(now - self.first_miss[host] + self.every)}")
        return dead

    def unreachable(self, fresh: bool = True) -> list[str]:
        """The nodes that did not answer: a new check (``fresh``), else the last one's."""
        result = self.check() if fresh else self.last
        return [host for host, status in result.items() if not status.get("answered")]


@dataclass
class Run:
    """What the follower knows of the run so far: the parts below read and update it, one poll after another
    (times are time.monotonic() seconds)."""

    started: float
    checkpoint: int | None  # the step of the last checkpoint saved (or resumed from), None before one
    status: dict = field(default_factory=dict)  # the launch's async_status (or Slurm's end: {"rc"}) at the last poll
    finished: bool = False  # the job ended (the head's async job, or the Slurm job once Slurm has no more of it)
    seen: int = 0  # progress records (steps logged) seen
    last: dict = field(default_factory=dict)  # the last progress record
    last_news: float = 0.0  # when the follower last printed news of the run (a record, a Slurm state, a "still")
    last_step_at: float | None = None  # when the record of the run's last step came (the end of the run starts)
    recent: list[str] = field(default_factory=list)  # the launcher log's last 400 lines
    dead: tuple[str, int] | None = None  # (host, exit code) of the first node whose ranks ended with an error
    dead_line: str = ""  # the log line that said so
    dead_at: float = 0.0  # when it was read
    last_record_at: float | None = None  # when the last progress record (a logged step) was read


@dataclass
class Failure:
    """Why the follower gives up on a run that has not ended (a part's verdict): the message and, where a node is
    to blame, its name and last log lines; ``silent_nodes`` None leaves that key out of the result."""

    msg: str
    dead_host: str = ""
    dead_line: str = ""
    dead_lines: list[str] = field(default_factory=list)
    silent_nodes: list[str] | None = None
    hung: list[dict] | None = None  # the hang watchdog's stuck ranks ([{"rank", "host", "why"}]), None: not a hang


class Progress:
    """The progress part: the new bytes of rank 0's progress.jsonl and of the launcher's log at every poll; prints
    each progress record and event, the ``[rank R/W]`` lines (every log line while ``echo_log`` and no record yet),
    notes the first node whose ranks ended with an error (train.controller.progress, failed_node), and says "still
    running" after a minute without news."""

    def __init__(self, read_from, progress_file: str, log_file: str, echo_log: bool, grace_s: float):
        """read_from(path, offset) -> the text of ``path`` on the head from byte ``offset`` on."""
        self.read_from, self.progress_file, self.log_file = read_from, progress_file, log_file
        self.echo_log, self.grace_s = echo_log, grace_s
        self.progress_offset = 0
        self.log_offset = 0
        self.log_pending = ""

    def read(self, run: Run) -> list[dict]:
        """Read both files' new bytes; the new progress records (complete lines only), the log's lines taken in."""
        chunk = self.read_from(self.progress_file, self.progress_offset)
        records, consumed = parse_records(chunk)
        self.progress_offset += len(chunk[:consumed].encode("utf-8"))

        chunk = self.read_from(self.log_file, self.log_offset)
        self.log_offset += len(chunk.encode("utf-8"))
        self.log_pending += chunk
        *complete, self.log_pending = self.log_pending.split("\n")
        for line in complete:
            if (self.echo_log and not run.seen and not records) or ("[rank " in line and "host=" in line):
                display.display(f"  {line.rstrip()}")
            run.recent = (run.recent + [line.rstrip()])[-400:]
            node = failed_node(line)
            if node is not None and run.dead is None:
                run.dead, run.dead_line, run.dead_at = node, line.strip(), time.monotonic()
                if not run.finished:
                    display.display(f"  {line.strip()}")
                    display.display(f"  ranks on {node[0] or 'the head'} ended with exit code {node[1]} while the "
                                    f"run goes on elsewhere: waiting {int(self.grace_s)} s for it to stop")
        return records

    @staticmethod
    def show(run: Run, records: list[dict]) -> None:
        """Print the records read (an event on a line of its own, a step with the last checkpoint) and take them in."""
        for record in records:
            if is_event(record):
                run.checkpoint = last_checkpoint([record], run.checkpoint)
                line = format_event(record)
                if line:
                    display.display(f"  {line}")
                continue
            display.display(f"  {format_record(record, run.checkpoint)}")
            run.last = record
            run.seen += 1
            run.last_news = run.last_record_at = time.monotonic()
            if run.last_step_at is None and is_last_step(record):
                run.last_step_at = run.last_news

    def quiet(self, run: Run, now: float, every_s: float = 60.0) -> None:
        """After ``every_s`` without news, say what the run is waiting for (a step, or its end after the last step),
        and for how long: since the last logged step (named), or since the launch before the first."""
        if now - run.last_news < every_s:
            return
        if run.last_step_at is not None:
            display.display(f"  the last step is done; the ranks are writing the final checkpoint and model "
                            f"({format_duration(now - run.last_step_at)} so far; log: {self.log_file})")
        elif run.seen:
            since = format_duration(now - (run.last_record_at or run.started))
            display.display(f"  still running, waiting for the next logged step ({since} since step "
                            f"{run.last.get('step')}; log: {self.log_file})")
        else:
            display.display(f"  still running, waiting for the first logged step ({format_duration(now - run.started)} "
                            f"since the launch; log: {self.log_file})")
        run.last_news = now


class Stragglers:
    """The straggler part: each progress record's step times per node (train.common.stragglers.node_step_times); a
    node slower than ``ratio`` x the median rank in each of the last ``intervals`` records is named once, and again
    only after it kept up in between."""

    def __init__(self, spec: dict):
        self.ratio, self.last = float(spec.get("ratio") or 0), int(spec.get("intervals") or 0)
        self.intervals: list = []
        self.named: set[str] = set()

    def note(self, records: list[dict]) -> list[str]:
        """Take in the new records; the lines printed (one per node newly named)."""
        lines = []
        for record in records:
            times = node_step_times(record) if not is_event(record) else None
            if times is None:
                continue
            self.intervals = (self.intervals + [times])[-max(1, self.last):]
            slow = dict(stragglers(self.intervals, self.ratio, self.last))
            for node, ratio in slow.items():
                if node not in self.named:
                    lines.append(straggler_line(node, ratio, self.last))
            self.named = set(slow)
        for line in lines:
            display.display(f"  {line}")
        return lines


class Rendezvous:
    """The rendezvous bound (the ``rendezvous`` option, read from the liveness check's last answer): until the first
    progress record, a rank that has not joined ``within_s`` s after it started (or not started that long after
    the launch) fails the run (train.node.rank_status.late_to_join)."""

    def __init__(self, spec: dict):
        self.within_s, self.master = spec["within_s"], spec["master"]
        self.done = False  # every rank has joined: nothing more to check

    def check(self, run: Run, live: Liveness, now: float) -> Failure | None:
        """After a liveness check: a Failure naming the late ranks, else None."""
        if run.seen or self.done:
            return None
        late = late_to_join(live.last, self.within_s, now - run.started)
        self.done = bool(live.last) and all(
            r.get("joined") is not None for st in live.last.values() for r in st.get("ranks") or [])
        if not late:
            return None
        return Failure(rendezvous_failure(late, self.within_s, self.master, run.recent),
                       silent_nodes=live.unreachable(fresh=False))


def liveness_failure(live: Liveness, rendezvous: Rendezvous | None, run: Run, now: float) -> Failure | None:
    """The liveness part, when a check is due: a Failure for a node taken for dead or ranks late to the
    rendezvous, else None."""
    found = live.poll(now)
    if found is not None:
        host, why = found
        return Failure(f"{why} ({format_duration(now - run.started)} after the launch)", dead_host=host,
                       dead_lines=node_lines(run.recent, host), silent_nodes=live.unreachable(fresh=False))
    return rendezvous.check(run, live, now) if rendezvous is not None else None


class SlurmState:
    """The Slurm part (``slurm_job``): Slurm, not the head's ``sbatch --wait``, says whether the job runs (squeue)
    and how it ended (scontrol's record, else sacct's); until the first progress record a change of its state,
    reason or place in the queue is printed."""

    def __init__(self, name: str, attach: bool, run_on_head):
        """run_on_head(cmd) -> (rc, stdout, stderr) of a shell command on the head."""
        self.name, self.attach, self.run_on_head = name, attach, run_on_head
        self.said = ""  # the last line printed about the job's state
        self.job_id: str | None = None  # the job id squeue gave for the run's job (once it listed it)
        self.end: dict | None = None  # Slurm's record of the job's end, where Slurm told it
        self.gone_at: float | None = None  # when squeue first no longer listed the job
        self.sbatch_said = False  # the head's sbatch --wait ended while Slurm still runs the job: said once

    def record(self, job_id: str | None) -> dict | None:
        """Slurm's record of the ended job (scontrol's, else sacct's; train.controller.progress.slurm_record), or None
        while it has none of an ended job; with ``job_id``, only a record of that job counts."""
        _, out, _ = self.run_on_head(shlex.join(SCONTROL_JOBS_ARGS))
        record = slurm_record(out, "", self.name)
        if record is None or (job_id and record.get("JobId") != job_id):
            _, acct, _ = self.run_on_head(shlex.join(sacct_args(self.name)) + " 2>/dev/null")
            record = slurm_record("", acct, self.name)
        if record is None or record.get("JobState") not in SLURM_ENDED or (job_id and record.get("JobId") != job_id):
            return None
        return record

    def poll(self, run: Run, with_records: bool) -> Failure | None:
        """Ask squeue: while it lists the job, the run goes on (``run.finished`` False); once not, Slurm's record
        ends it (``run.status`` its exit status). A Failure when Slurm has no record and the head no sbatch."""
        status = run.status
        _, out, _ = self.run_on_head(shlex.join(SQUEUE_ARGS))
        said = slurm_job_line(out, self.name)
        if said is not None:
            self.job_id = slurm_job_id(out, self.name)
            if run.finished and not self.sbatch_said:
                display.display(f"  the head's sbatch --wait ended (status {status.get('rc')}) while Slurm "
                                f"still runs job {self.job_id}: following it through squeue")
                self.sbatch_said = True
            run.finished = False
            # before the first step every change; after it, what Slurm does to a running job (a node taken for dead
            # ends it: COMPLETING), not the end of one that trained to its last step
            if said != self.said and (not run.seen and not with_records or self.said and run.last_step_at is None):
                display.display(f"  {said} ({format_duration(time.monotonic() - run.started)} after the "
                                f"submission)")
                self.said, run.last_news = said, time.monotonic()
        elif self.job_id or self.attach or (status.get("failed") and not run.finished):
            # not listed: the job ended (or was never submitted); its record says how. (At a launch whose
            # sbatch ended before squeue ever listed the job, sbatch's status stands: a record of that name
            # may be an earlier attempt's.)
            self.end = self.record(self.job_id if not self.attach else None)
            # the head's sbatch --wait still waits: it sees the end at its next poll of slurmctld (a few
            # seconds), and while it runs it is a process of the run (its command line holds the run
            # directory), which the next train.yml would take for the run still running
            waiting = not run.finished and not status.get("failed")
            self.gone_at = self.gone_at or time.monotonic()
            late = time.monotonic() - self.gone_at >= SBATCH_GRACE_S
            if self.end is not None and (not waiting or late):
                if waiting:
                    self.run_on_head(f"pkill -f -- {shlex.quote(SBATCH_PATTERN.format(self.name))}")
                run.finished = True
                run.status = {"rc": slurm_exit_status(self.end)}
            elif self.end is None and not run.finished and (late or not waiting):
                return Failure(f"Slurm no longer lists job {(self.job_id + ' ') if self.job_id else ''}"
                               f"({self.name}) and keeps no record of how it ended (scontrol "
                               f"keeps an ended job for MinJobAge; sacct needs accounting), and the head "
                               f"has no sbatch of it ({status.get('msg') or 'still waiting'})")
        return None

    def ending(self) -> bool:
        """Whether Slurm is ending the job (squeue's last word: COMPLETING): its record will say why."""
        return " is COMPLETING" in self.said

    def nodes_out_of_service(self, run_dir: str) -> list[dict]:
        """The ended job's nodes that Slurm holds out of service, with their reason (sinfo;
        train.controller.progress.slurm_nodes_in_trouble); [] without a record. Where sinfo holds none but the job
        ended NODE_FAIL (Slurm took the node back already: ReturnToService), the nodes srun named in the job's
        output (``<run_dir>/slurm.out``), with what slurmctld's log says of them (the reason, when, taken back)."""
        if self.end is None:
            return []
        _, out, _ = self.run_on_head(shlex.join(sinfo_nodes_args(self.end.get("NodeList") or "")) + " 2>/dev/null")
        held = slurm_nodes_in_trouble(out)
        if held or self.end.get("JobState") != "NODE_FAIL":
            return held
        _, said, _ = self.run_on_head(f"cat {shlex.quote(run_dir + '/slurm.out')} 2>/dev/null")
        failed = slurm_failed_nodes(said)
        if not failed:
            return []
        _, config, _ = self.run_on_head("scontrol show config 2>/dev/null")
        log = next((line.split("=", 1)[1].strip() for line in config.splitlines()
                    if line.replace(" ", "").startswith("SlurmctldLogFile=")), "")
        found = []
        for node in failed:
            text = ""
            if log:
                _, text, _ = self.run_on_head(f"grep -a -- {shlex.quote(' ' + node + ' ')} {shlex.quote(log)} "
                                              f"2>/dev/null | tail -n 200")
            found.append(slurmctld_node_down(text + "\n", node) or
                         {"node": node, "state": "down", "reason": "", "since": "", "returned": False})
        return found


def grace_failure(run: Run, now: float, grace_s: float, live: Liveness | None,
                  slurm: "SlurmState | None" = None) -> Failure | None:
    """The grace part: a Failure when a node's ranks ended with an error ``grace_s`` s ago and the job still runs.
    A job Slurm is ending (a node it took for dead, a task that failed) is given SLURM_ENDING_S more: it ends
    within Slurm's KillWait, and its record then says why, which the grace would cut off."""
    if run.dead is None or now - run.dead_at < grace_s:
        return None
    if slurm is not None and slurm.ending() and now - run.dead_at < grace_s + SLURM_ENDING_S:
        return None
    host, code = run.dead
    return Failure(f"ranks on {host or 'the head'} ended with exit code {code} ({format_duration(now - run.started)} "
                   f"after the launch) and the other ranks did not stop by themselves within {int(grace_s)} s",
                   dead_host=host, dead_line=run.dead_line, dead_lines=node_lines(run.recent, host),
                   silent_nodes=live.unreachable() if live is not None else [])


def end_bound_failure(run: Run, now: float, bound_s: float, live: Liveness | None) -> Failure | None:
    """The end bound: a Failure when the ranks have not ended ``bound_s`` s after the last step's record (0: none)."""
    if run.last_step_at is None or not 0 < bound_s <= now - run.last_step_at:
        return None
    return Failure(end_failure(now - run.last_step_at, bound_s, run.last, run.checkpoint, run.recent),
                   silent_nodes=live.unreachable() if live is not None else [])


class HangWatch:
    """The hang watchdog (the ``hang`` option: ``{"floor_s", "factor", "first_step_s"}``): a run that logs no new
    step within train.node.watchdog.hang_bound of its last one (of the launch, before the first) is taken for hung;
    before the stop every rank's Python stack is captured into its log (``python -m train.node.watchdog dump-all``
    on the head, over the ssh mesh; the liveness check's nodes) and the ranks not where the others are are named."""

    def __init__(self, spec: dict, liveness: dict | None, run_on_head):
        self.floor_s, self.factor = float(spec.get("floor_s") or 0), float(spec.get("factor") or 5)
        self.first_step_s = float(spec.get("first_step_s") or 0)
        self.liveness, self.run_on_head = liveness, run_on_head
        self.intervals: list[float] = []  # interval_s of every record of this attempt but its first
        self.steps = 0

    def note(self, records: list[dict]) -> None:
        """Take in the new progress records' measured intervals (the first record's covers the warm-up)."""
        for record in records:
            if is_event(record):
                continue
            if self.steps and isinstance(record.get("interval_s"), (int, float)):
                self.intervals.append(float(record["interval_s"]))
            self.steps += 1

    def bound_text(self, bound: float) -> str:
        """How the bound was reached, for the message."""
        if not self.steps:
            return f"train_hang_first_step_s, {format_duration(bound)} before the first logged step"
        slowest = max(self.intervals, default=0.0)
        return (f"max(train_hang_floor_s {format_duration(self.floor_s)}, {self.factor:g} x the slowest logging "
                f"interval seen {format_duration(slowest)}) = {format_duration(bound)}")

    def stacks(self) -> dict:
        """Every rank's stack, captured now: ``{"ranks", "stuck", "said"}`` (train.node.watchdog.main), or a
        ``said`` of why not."""
        if not self.liveness:
            return {"stuck": [], "said": "the stacks were not captured: the liveness check is off "
                                         "(train_liveness_failures=0), and it gives the watchdog the nodes"}
        spec = self.liveness
        python = next(n["python"] for n in spec["nodes"] if n.get("local"))
        argv = [python, "-m", "train.node.watchdog", "dump-all", spec["runs_dir"], spec["run"],
                json.dumps(spec["nodes"]), str(spec.get("timeout_s") or 5)]
        rc, out, err = self.run_on_head(f"cd {shlex.quote(spec['nodes'][0]['code_dir'])} && {shlex.join(argv)}")
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (IndexError, ValueError):
            why = (err.strip().splitlines() or [f"exit code {rc}"])[-1][:300]
            return {"stuck": [], "said": f"the stacks could not be captured ({why})"}

    def check(self, run: Run, now: float) -> Failure | None:
        """A Failure when the run has gone past the bound without a new logged step (never after its last step:
        the end bound's), else None."""
        if run.last_step_at is not None:
            return None
        bound = hang_bound(self.intervals, self.floor_s, self.factor, self.first_step_s, self.steps)
        since = now - (run.last_record_at or run.started)
        if bound is None or since < bound:
            return None
        display.display(f"  no new logged step for {format_duration(since)} (the hang watchdog's bound: "
                        f"{self.bound_text(bound)}): capturing every rank's Python stack")
        found = self.stacks()
        stuck = list(found.get("stuck") or [])
        what = (f"no new logged step for {format_duration(since)} " + (
            f"after step {run.last.get('step')}" if run.seen else "since the launch") +
            f" (the hang watchdog's bound: {self.bound_text(bound)}): {found.get('said')}")
        return Failure(f"{what}. Every rank's Python stack is in its log (logs/<host>.rank<R>.log, brought back "
                       f"with the run). If the run's steps are only slow, raise train_hang_floor_s "
                       f"(train_hang_first_step_s before the first step); 0 switches the watchdog off",
                       dead_host=stuck[0]["host"] if stuck else "",
                       dead_lines=node_lines(run.recent, stuck[0]["host"]) if stuck else [],
                       silent_nodes=[], hung=stuck)


class ActionModule(AsyncFollowAction):
    """Poll an async training job; print progress lines as they arrive.

    Each poll runs the parts in turn: liveness (its own, shorter period: :func:`liveness_failure`), the job's status,
    :class:`Progress` (the files' new bytes), :class:`SlurmState`, the records printed, then the bounds on a run that
    has not ended (:func:`grace_failure`, :func:`end_bound_failure`) and the "still running" line. A part that gives
    up returns a :class:`Failure`; the result is then built by :meth:`_failed`."""

    def _run_on_head(self, cmd: str) -> tuple[int, str, str]:
        r = self._run(cmd)
        return r.get("rc", 1), r.get("stdout", ""), r.get("stderr", "")

    def _failed(self, result: dict, run: Run, failure: Failure, args: dict) -> dict:
        """``result`` of a run the follower gave up on (rc None: the job has not ended)."""
        result.update(failed=True, rc=None, records=run.seen, last=run.last, dead_host=failure.dead_host,
                      dead_line=failure.dead_line, dead_lines=failure.dead_lines,
                      log_tail=self._tail(args["log_file"], args["tail_lines"]), msg=failure.msg)
        if failure.silent_nodes is not None:
            result["silent_nodes"] = failure.silent_nodes
        if failure.hung is not None:
            result["hung"] = failure.hung
        return result

    def run(self, tmp=None, task_vars=None):
        result = self._follow(tmp, task_vars)
        stopped_file = self._task.args.get("stopped_file")
        if result.get("failed") and stopped_file:
            try:
                note = json.loads(self._read_from(stopped_file, 0) or "null")
            except Exception:  # noqa: BLE001 -- unreadable (the head gone): the failure stands
                note = None
            if isinstance(note, dict):  # stopped on request: the playbook says so, once (stopped.yml)
                result.update(failed=False, stopped=note)
                result.pop("msg", None)
        return result

    def _follow(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=_ARGSPEC)
        jid, log_file = args["jid"], args["log_file"]
        poll = max(1.0, args["poll_seconds"])

        run = Run(started=time.monotonic(), checkpoint=args["checkpoint"])
        run.last_news = run.started
        progress = Progress(self._read_from, args["progress_file"], log_file, args["echo_log"], args["grace_seconds"])
        live = Liveness(args["liveness"], self._run_on_head) if args["liveness"] else None
        rendezvous = (Rendezvous(args["rendezvous"])
                      if live is not None and (args["rendezvous"] or {}).get("within_s") else None)
        slurm = SlurmState(args["slurm_job"], args["attach"], self._run_on_head) if args["slurm_job"] else None
        hang = HangWatch(args["hang"], args["liveness"], self._run_on_head) if args["hang"] else None
        slow = Stragglers(args["straggler"]) if args["straggler"] else None
        next_poll = run.started

        while True:
            now = time.monotonic()
            if live is not None and live.due(now):
                failure = liveness_failure(live, rendezvous, run, now)
                if failure is not None:
                    return self._failed(result, run, failure, args)
            if time.monotonic() < next_poll:  # the next liveness check comes before the next progress poll
                time.sleep(max(0.05, min(next_poll, live.next_at if live else next_poll) - time.monotonic()))
                continue
            run.status = self._async_status(jid, "status", task_vars) if jid else {"failed": True, "msg": "no job id"}
            if run.status.get("failed") and not run.status.get("finished") and slurm is None:
                result.update(failed=True, msg=f"cannot read the status of async job {jid}: {run.status.get('msg')}")
                return result
            run.finished = bool(run.status.get("finished"))
            records = progress.read(run)
            if slurm is not None:
                failure = slurm.poll(run, bool(records))
                if failure is not None:
                    return self._failed(result, run, failure, args)
            progress.show(run, records)
            if hang is not None:
                hang.note(records)
            if slow is not None:
                slow.note(records)
            if run.finished:
                break
            now = time.monotonic()
            failure = (grace_failure(run, now, args["grace_seconds"], live, slurm)
                       or end_bound_failure(run, now, args["end_within_s"], live)
                       or (hang.check(run, now) if hang is not None else None))
            if failure is not None:
                return self._failed(result, run, failure, args)
            progress.quiet(run, now, args["news_every_s"])
            next_poll = time.monotonic() + poll  # the loop's top sleeps until then, checking liveness meanwhile

        return self._ended(result, run, live, slurm, args, jid, task_vars)

    def _ended(self, result: dict, run: Run, live: Liveness | None, slurm: SlurmState | None, args: dict, jid: str,
               task_vars) -> dict:
        """``result`` of a job that ended: its exit status, the end's duration after the last step, and on a
        non-zero status the failure (which node, which nodes did not answer)."""
        log_file = args["log_file"]
        if jid:
            self._async_status(jid, "cleanup", task_vars)
        if slurm is not None and slurm.end is not None:
            end = slurm.end
            said = f"  Slurm's record of job {end.get('JobId')}: {end.get('JobState')} (" + (
                f"{end['Reason']}; " if end.get("Reason") not in (None, "", "None") else "") + (
                f"exit code {end.get('ExitCode') or '?'})")
            if end.get("JobState") != "COMPLETED":
                # what Slurm did and why: the job's nodes it holds out of service, with their reason, and whether it
                # requeued the job (train.yml submits with --no-requeue: docs/slurm.md)
                result["slurm_nodes"] = slurm.nodes_out_of_service(str(Path(log_file).parent))
                said += "".join(f"; {x}" for x in (slurm_nodes_text(result["slurm_nodes"]), slurm_requeue_text(end))
                                if x)
                if result["slurm_nodes"]:  # the node to blame for NODE_FAIL (train.node.faults.classify)
                    end = dict(end, FailedNode=result["slurm_nodes"][0]["node"],
                               FailedNodeReason=result["slurm_nodes"][0]["reason"])
            display.display(said)
            result["slurm_record"] = end
        log_tail = self._tail(log_file, args["tail_lines"])
        rc = run.status.get("rc")
        if run.last_step_at is not None:
            # the end of the run: the final checkpoint, the model write and the ranks' exit, as the follower saw it
            result["end_s"] = round(time.monotonic() - run.last_step_at, 1)
            if rc == 0:
                display.display(f"  the ranks ended {format_duration(result['end_s'])} after the last step (the "
                                f"final checkpoint and model written)")
        dead = run.dead
        dead_lines = node_lines(run.recent, dead[0]) if dead is not None else []
        result.update(changed=False, rc=rc, records=run.seen, last=run.last, log_tail=log_tail,
                      dead_host=dead[0] if dead else "", dead_line=run.dead_line, dead_lines=dead_lines)
        if rc != 0:
            # a node that went away may have ended the run with an error (its peers' connections closed): name it
            result["silent_nodes"] = live.unreachable() if live is not None else []
            result["failed"] = True
            result["msg"] = (
                f"training exited with status {rc} after {format_duration(time.monotonic() - run.started)}; "
                f"the last lines of {log_file} are in log_tail (the whole log is on the head node)"
            )
        return result

"""Turn the rank-0 progress stream (``progress.jsonl``) into one-line progress reports.

``train/rank/pretrain.py`` appends one JSON object per logging step to ``<output_dir>/progress.jsonl``::

    {"step": 40, "max_steps": 200, "loss": 6.12, "learning_rate": 0.0009, "grad_norm": 1.7,
     "samples_per_second": 35.1, "tokens_per_second": 4492.8, "interval_s": 9.1, "elapsed_s": 61.8, "eta_s": 247.0,
     "epoch": 0.4}

(the rates over the interval since the record before: train/rank/callbacks.py; with several ranks also
``"step_s": {"worker-1": [0.021, 0.020], ...}``, each node's ranks' own step time over the interval, which
train/common/stragglers.py reads)

and an event line after each checkpoint save (``{"event": "save", "step": 100, "checkpoint": "checkpoint-100",
"elapsed_s": 150.2}``) or for a warning (``{"event": "warning", "message": "..."}``; train/rank/callbacks.py).

The playbook's ``deepspeed_watch`` action (roles/train_launch/action_plugins/) reads the new bytes of that file while the
job runs and prints each record with :func:`format_record` (with the last checkpoint's step, :func:`last_checkpoint`)
and each event with :func:`format_event`; at the end, roles/train_launch/tasks/collect.yml prints
:func:`summary_lines` of the results brought back. Only the standard library is used: this module runs in the
Ansible controller's Python.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from train.common.stragglers import node_medians, run_stragglers


def format_duration(seconds: float | None) -> str:
    """Format a duration for people.

    Args:
        seconds: duration in seconds (``None`` or negative means unknown).

    Returns:
        ``"45s"``, ``"3m05s"`` or ``"2h03m"``; ``"?"`` when unknown.
    """
    if seconds is None or seconds < 0:
        return "?"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


_NO_CHECKPOINT = object()


def format_count(value: float) -> str:
    """A rate in the units people read: ``"950"``, ``"4.5 k"``, ``"583 k"``, ``"1.2 M"`` (3 significant digits at
    most, 1 decimal below 10 k / 10 M)."""
    for scale, unit in ((1e6, " M"), (1e3, " k")):
        if abs(value) >= scale:
            v = value / scale
            return f"{v:.1f}{unit}" if abs(v) < 10 else f"{v:.0f}{unit}"
    return f"{value:.0f}"


def format_record(record: dict, checkpoint=_NO_CHECKPOINT) -> str:
    """Format one progress record as a single line.

    Args:
        record: one object of ``progress.jsonl`` (keys as in the module docstring; missing keys print ``?``).
        checkpoint: the step of the last checkpoint saved so far (:func:`last_checkpoint`), None for none yet;
            left out, the line says nothing about checkpoints.

    Returns:
        e.g. ``"step 40/200 (20%) | loss 6.1200 | 35.1 samples/s, 4.5 k tokens/s | elapsed 1m02s | ETA 4m07s"``
        (the rates over the last logging interval; tokens/s only when the record has it), with
        ``" | last checkpoint: step 30"`` (or ``" | last checkpoint: none yet"``) when ``checkpoint`` is given.
    """
    step = record.get("step")
    max_steps = record.get("max_steps")
    if isinstance(step, int) and isinstance(max_steps, int) and max_steps > 0:
        where = f"step {step}/{max_steps} ({100 * step // max_steps}%)"
    else:
        where = f"step {step if step is not None else '?'}"
    loss = record.get("loss")
    loss_txt = f"loss {loss:.4f}" if isinstance(loss, (int, float)) else "loss ?"
    sps = record.get("samples_per_second")
    sps_txt = f"{sps:.1f} samples/s" if isinstance(sps, (int, float)) else "? samples/s"
    tps = record.get("tokens_per_second")
    if isinstance(tps, (int, float)):
        sps_txt += f", {format_count(tps)} tokens/s"
    parts = [where, loss_txt, sps_txt, f"elapsed {format_duration(record.get('elapsed_s'))}",
             f"ETA {format_duration(record.get('eta_s'))}"]
    if checkpoint is not _NO_CHECKPOINT:
        parts.append(f"last checkpoint: step {checkpoint}" if checkpoint is not None else "last checkpoint: none yet")
    return " | ".join(parts)


def is_event(record: dict) -> bool:
    """Whether a progress.jsonl object is an event line (a save, a warning), not a logged step."""
    return "event" in record


def last_checkpoint(records: list[dict], previous: int | None = None) -> int | None:
    """The step of the last save event among ``records`` (in file order), else ``previous``."""
    for record in records:
        if record.get("event") == "save" and isinstance(record.get("step"), int):
            previous = record["step"]
    return previous


def format_event(record: dict) -> str | None:
    """One line for an event of progress.jsonl: ``"saved checkpoint-100 (step 100; 1.20 GB on the head, in 3.4 s)"``
    (the size and time where the event has them), ``"warning: ..."``, ``"stopping at step 40 of 5000 before the
    Slurm job's time limit: ..."``, ``"attempt 2 after a fault: node_lost of worker-2 at step 47 ..."`` (a restart,
    train/controller/restart.py), ``"training again 95 s after the fault was noticed (step 45)"``; None for an event
    this version does not know."""
    kind = record.get("event")
    if kind == "save":
        detail = []
        if isinstance(record.get("size_bytes"), (int, float)):
            detail.append(f"{record['size_bytes'] / 1e9:.2f} GB on the head")
        if isinstance(record.get("save_s"), (int, float)):
            detail.append(f"in {record['save_s']:.1f} s")
        return (f"saved {record.get('checkpoint') or 'a checkpoint'} (step {record.get('step', '?')}"
                f"{'; ' + ', '.join(detail) if detail else ''})")
    if kind == "warning":
        return f"warning: {record.get('message', '')}"
    if kind == "stop_request":
        return (f"stopping at step {record.get('step', '?')} of {record.get('max_steps', '?')} before the Slurm job's "
                f"time limit: every rank saves checkpoint-{record.get('step', '?')} first; go on with "
                f"ansible-playbook train.yml -e resume={record.get('run') or '<run>'}")
    if kind == "restart":
        return f"attempt {int(record.get('attempt', 0)) + 1} after a fault: {fault_text(record)}"
    if kind == "recovered":
        return (f"training again {record.get('recover_s', '?')} s after the fault was noticed "
                f"(step {record.get('step', '?')}, attempt {record.get('attempt', '?')})")
    return None


#: ``squeue`` output format that :func:`slurm_job_line` reads: job id, name, state, reason, nodes; one job a line,
#: most urgent first (``--sort=-p,i``: priority, then submission order)
SQUEUE_ARGS = ["squeue", "--noheader", "--sort=-p,i", "--format=%i|%j|%T|%r|%N"]

#: every job slurmctld still holds, one ``Key=Value`` line each (an ended job stays MinJobAge, 300 s by default)
SCONTROL_JOBS_ARGS = ["scontrol", "--oneliner", "show", "job"]

#: the end states of a Slurm job (squeue(1)/sacct(1) "JOB STATE CODES"); a RUNNING or COMPLETING job has not ended
SLURM_ENDED = {"COMPLETED", "FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "PREEMPTED", "BOOT_FAIL",
               "DEADLINE"}

_PAIR = re.compile(r"(\S+?)=(\S*)")


def sacct_args(name: str) -> list[str]:
    """``sacct`` of the jobs named ``name`` of the last 7 days, in the columns :func:`slurm_record` reads (where the
    cluster has accounting, slurmdbd; elsewhere sacct fails and says so)."""
    return ["sacct", "-X", "-n", "-P", "--starttime=now-7days", f"--name={name}",
            "--format=JobID,JobName,State,ExitCode,Reason,NodeList"]


def _scontrol_jobs(text: str) -> list[dict]:
    return [dict(_PAIR.findall(line)) for line in str(text or "").splitlines() if line.startswith("JobId=")]


def _sacct_jobs(text: str) -> list[dict]:
    jobs = []
    for line in str(text or "").splitlines():
        cols = line.split("|")
        if len(cols) >= 6 and cols[0].strip():
            # sacct writes "CANCELLED by 0" where scontrol writes CANCELLED
            jobs.append({"JobId": cols[0], "JobName": cols[1], "JobState": cols[2].split()[0] if cols[2] else "",
                         "ExitCode": cols[3], "Reason": cols[4], "NodeList": cols[5]})
    return jobs


def _job_number(job: dict) -> int:
    m = re.match(r"\d+", str(job.get("JobId", "")))  # array and het-job suffixes (12_3, 12+0) cut off
    return int(m.group(0)) if m else -1


def slurm_record(scontrol_out: str, sacct_out: str, name: str) -> dict | None:
    """Slurm's record of the newest job named ``name``, or None when Slurm no longer knows such a job.

    Args:
        scontrol_out: the output of :data:`SCONTROL_JOBS_ARGS`.
        sacct_out: the output of :func:`sacct_args` (read where scontrol no longer lists the job), or "".

    Returns:
        scontrol's fields of the job (``JobId``, ``JobName``, ``JobState``, ``ExitCode`` as Slurm's ``code:signal``,
        ``Reason``, ``NodeList``, ...); sacct's columns under the same names where scontrol has no such job.
    """
    jobs = [j for j in _scontrol_jobs(scontrol_out) if j.get("JobName") == name]
    if not jobs:
        jobs = [j for j in _sacct_jobs(sacct_out) if j.get("JobName") == name]
    return max(jobs, key=_job_number) if jobs else None


def slurm_exit_status(record: dict) -> int:
    """The exit status a job's end stands for, like ``sbatch --wait``'s: 0 for COMPLETED with exit code 0:0, else
    the exit code's first number (the batch script's status), or 1 where that is 0 (a job cancelled, timed out or
    whose node failed ended no script with an error)."""
    code, _, _signal = str(record.get("ExitCode", "")).partition(":")
    status = int(code) if code.isdigit() else 1
    if record.get("JobState") == "COMPLETED" and status == 0:
        return 0
    return status or 1


def slurm_job_id(squeue_out: str, name: str) -> str | None:
    """The id of the job named ``name`` in the output of :data:`SQUEUE_ARGS`, or None when squeue does not list it."""
    for line in squeue_out.splitlines():
        cols = line.split("|", 4)
        if len(cols) == 5 and cols[1] == name:
            return cols[0]
    return None


def slurm_job_line(squeue_out: str, name: str) -> str | None:
    """What the Slurm job named ``name`` is doing, as one progress line, or None when squeue does not list it.

    Args:
        squeue_out: the output of :data:`SQUEUE_ARGS` (every job Slurm holds, most urgent first).
        name: the job's name (train.yml names it after the run).

    Returns:
        ``"Slurm job 12 (NAME) is PENDING: Resources; 2nd of 3 pending jobs"`` (its place among the PENDING jobs in
        squeue's order; the reason is Slurm's own, e.g. Resources, Priority, QOSMaxNodePerUserLimit),
        ``"Slurm job 12 (NAME) is RUNNING on n1,n2"``, or None.
    """
    rows = [line.split("|", 4) for line in squeue_out.splitlines() if line.count("|") >= 4]
    pending = [r for r in rows if r[2] == "PENDING"]
    for job_id, job_name, state, reason, nodes in rows:
        if job_name != name:
            continue
        if state == "PENDING":
            place = next(i for i, r in enumerate(pending, 1) if r[0] == job_id)
            suffix = {1: "st", 2: "nd", 3: "rd"}.get(place if place < 20 else place % 10, "th")
            return (f"Slurm job {job_id} ({name}) is PENDING: {reason}; {place}{suffix} of {len(pending)} pending "
                    f"job{'s' if len(pending) != 1 else ''}")
        return f"Slurm job {job_id} ({name}) is {state}" + (f" on {nodes}" if nodes and nodes != "(null)" else "")
    return None


def sinfo_nodes_args(nodelist: str) -> list[str]:
    """``sinfo`` of the nodes of ``nodelist`` (Slurm's hostlist, e.g. ``head-1,worker-[1-2]``: a job's NodeList), one
    line a node and partition, in the columns :func:`slurm_nodes_in_trouble` reads: name, state (``down*``: not
    responding too), the reason an admin or Slurm gave, when it was given."""
    return ["sinfo", "--noheader", "--Node", f"--nodes={nodelist}", "--format=%N|%T|%E|%H"]


#: node states of sinfo's %T that keep a node from running jobs (sinfo(1) "NODE STATE CODES"; a trailing ``*``: the
#: node does not respond)
_NODE_TROUBLE = ("down", "drain", "fail", "inval", "not_responding", "power_down", "powered_down", "maint", "reboot")


def slurm_nodes_in_trouble(sinfo_out: str) -> list[dict]:
    """The nodes Slurm holds out of service, from the output of :func:`sinfo_nodes_args`: ``[{"node", "state",
    "reason", "since"}]`` in sinfo's order, each node once; ``reason`` "" where none was given, ``since`` "" where
    Slurm gives no time. A node idle, allocated, mixed or completing is not listed."""
    out: dict[str, dict] = {}
    for line in str(sinfo_out or "").splitlines():
        cols = line.split("|", 3)
        if len(cols) != 4 or cols[0] in out:
            continue
        state = cols[1].strip().lower()
        if not (state.endswith("*") or any(t in state for t in _NODE_TROUBLE)):
            continue
        reason = cols[2].strip()
        since = cols[3].strip()
        out[cols[0]] = {"node": cols[0], "state": state, "reason": "" if reason in ("none", "None") else reason,
                        "since": "" if since in ("Unknown", "None", "") else since}
    return list(out.values())


_NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")
_CTLD_LINE = re.compile(r"^\[(?P<at>[\dT:.-]+)\] (?P<what>.*)$")


def slurm_failed_nodes(slurm_out: str) -> list[str]:
    """The nodes srun reported failed in the job's output (slurm.out: ``srun: error: Node failure on worker-2``),
    each once, in order."""
    return list(dict.fromkeys(_NODE_FAILURE.findall(str(slurm_out or ""))))


def slurmctld_node_down(log_text: str, node: str) -> dict | None:
    """What slurmctld's log says of ``node`` being set down: ``{"node", "state": "down", "reason", "since",
    "returned"}`` from its last ``update_node: node N reason set to: R`` / ``node N state set to DOWN`` /
    ``Killing JobId=J on failed node N`` lines (``since`` their time, to the second) and whether a later
    ``node N returned to service`` line says Slurm took it back (ReturnToService); None when the log says
    nothing of it. Read where sinfo no longer holds the node down."""
    found: dict | None = None
    for line in str(log_text or "").splitlines():
        m = _CTLD_LINE.match(line.strip())
        if not m:
            continue
        what, at = m.group("what"), m.group("at").split(".")[0]
        if what == f"update_node: node {node} state set to DOWN" or what.endswith(f" on failed node {node}"):
            found = {"node": node, "state": "down", "reason": (found or {}).get("reason", ""), "since": at,
                     "returned": False}
        elif what.startswith(f"update_node: node {node} reason set to: "):
            found = dict(found or {"node": node, "state": "down", "since": at, "returned": False},
                         reason=what.split("reason set to: ", 1)[1].strip())
        elif found and what.endswith(f"node {node} returned to service"):
            found["returned"] = True
    return found


def slurm_nodes_text(nodes: list[dict]) -> str:
    """One phrase for :func:`slurm_nodes_in_trouble`'s (or :func:`slurmctld_node_down`'s) nodes: ``"worker-2 is
    down (reason: test, since 2026-12-07T17:50:01)"`` (``"worker-2 was down (...), then returned to service"``
    where Slurm took it back since), several joined with "; ", or "" for none."""
    return "; ".join(f"{n['node']} {'was' if n.get('returned') else 'is'} {n['state']}" + (
        f" (reason: {n['reason']}" + (f", since {n['since']}" if n.get("since") else "") + ")" if n.get("reason")
        else f" (since {n['since']})" if n.get("since") else "") + (
        ", then returned to service" if n.get("returned") else "") for n in nodes)


def slurm_requeue_text(record: dict) -> str:
    """What Slurm did about requeueing an ended job, from its record (scontrol's ``Requeue`` and ``Restarts``):
    ``"not requeued (submitted with --no-requeue)"``, ``"requeued 2 times before"`` or "" where the record does
    not say (sacct's)."""
    restarts = str(record.get("Restarts", ""))
    if restarts.isdigit() and int(restarts) > 0:
        return f"requeued {restarts} time{'s' if restarts != '1' else ''} before"
    if record.get("Requeue") == "0":
        return "not requeued (submitted with --no-requeue)"
    return ""


def parse_records(text: str) -> tuple[list[dict], int]:
    """Parse the complete lines of a chunk of ``progress.jsonl``.

    Args:
        text: bytes of the file decoded as UTF-8, starting at a line boundary.

    Returns:
        ``(records, consumed)``: the records of every complete line (a trailing line without ``\\n`` may still be
        being written and is left for the next read) and the number of characters consumed. Lines that are not
        JSON objects are skipped.
    """
    records: list[dict] = []
    consumed = 0
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        consumed += len(line)
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            records.append(obj)
    return records, consumed


def main(argv: list[str] | None = None) -> int:
    """``python -m train.controller.progress FILE``: print every record of a progress file, one line each."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m train.controller.progress <output_dir>/progress.jsonl", file=sys.stderr)
        return 2
    try:
        with open(args[0], encoding="utf-8") as fh:
            records, _ = parse_records(fh.read())
    except OSError as err:
        print(f"error: cannot read {args[0]}: {err.strerror}; is the path the run's output_dir/progress.jsonl?",
              file=sys.stderr)
        return 2
    checkpoint = None
    for record in records:
        if is_event(record):
            checkpoint = last_checkpoint([record], checkpoint)
            line = format_event(record)
            if line:
                print(line)
        else:
            print(format_record(record, checkpoint))
    return 0


# ------------------------------------------------------------------------------------------ the end-of-run summary
def _fmt(value, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _ranks_by_host(ranks: list) -> str:
    hosts: dict[str, list[int]] = {}
    for r in ranks or []:
        if isinstance(r, dict):
            hosts.setdefault(str(r.get("hostname")), []).append(int(r.get("rank", 0)))
    return ", ".join(f"{h}: rank{'s' if len(rs) > 1 else ''} {','.join(map(str, sorted(rs)))}"
                     for h, rs in hosts.items())


def _rate_text(steady, m: dict, average, last: dict) -> str:
    """The summary's samples/s: the steady rate (metrics.json's steady_*: first to last logged step) with tokens/s
    and MFU where known, then the Trainer's whole-run average, each named; without metrics.json the last logged
    interval's rate."""
    parts = []
    if isinstance(steady, (int, float)):
        text = f"{steady:.1f} steady"
        steps = m.get("steady_steps")
        extra = [f"steps {steps[0]}-{steps[1]}"] if isinstance(steps, list) and len(steps) == 2 else []
        if isinstance(m.get("steady_tokens_per_second"), (int, float)):
            extra.append(f"{format_count(m['steady_tokens_per_second'])} tokens/s")
        if isinstance(m.get("steady_mfu"), (int, float)):
            peak = m.get("mfu_peak") if isinstance(m.get("mfu_peak"), dict) else {}
            of = (f" of {peak['flops'] / 1e12:,.1f} TFLOP/s, {str(peak.get('source', '')).split(':')[0]}"
                  if isinstance(peak.get("flops"), (int, float)) else "")
            extra.append(f"MFU {100 * m['steady_mfu']:.1f} %{of}")
        parts.append(text + (f" ({', '.join(extra)})" if extra else ""))
    if isinstance(average, (int, float)):
        parts.append(f"{average:.1f} whole-run average (the Trainer's; start-up and compilation included)")
    if not parts and isinstance(last.get("samples_per_second"), (int, float)):
        parts.append(f"{last['samples_per_second']:.1f} at the last logged step")
    return "; ".join(parts) or "-"


def _seconds(value) -> float | None:
    """A number of seconds from a filter argument (a number, its string, or None / "" for unknown)."""
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def end_text(end: dict) -> str | None:
    """The summary's "end of run" value: ``"the ranks ended 12s after the last step (final checkpoint and model
    written); results brought back in 3s"``, or None when neither is known. ``end``: {ranks_s, results_s}."""
    ranks, results = _seconds(end.get("ranks_s")), _seconds(end.get("results_s"))
    parts = []
    if ranks is not None:
        parts.append(f"the ranks ended {format_duration(ranks)} after the last step (final checkpoint and model "
                     f"written)")
    if results is not None:
        parts.append(f"results brought back in {format_duration(results)}")
    return "; ".join(parts) or None


def step_time_text(m: dict, records: list[dict], ratio: float = 1.2, last: int = 3) -> str | None:
    """The summary's "step time" value: each node's median step time (metrics.json's ``node_step_s``, else from the
    records) and the nodes named as stragglers during the run (train.common.stragglers.run_stragglers over the
    records, ``ratio`` and ``last`` as the follower had them), e.g. ``"head-1 0.021 s, worker-1 0.020 s, worker-2
    0.052 s (each node's median of its ranks' own compute per step); straggler: worker-2 (2.5x the median)"``; None
    when the run has none (one rank)."""
    medians = m.get("node_step_s") if isinstance(m.get("node_step_s"), dict) else node_medians(records)
    if not medians:
        return None
    text = (", ".join(f"{node} {seconds:.3g} s" for node, seconds in medians.items())
            + " (each node's median of its ranks' own compute per step)")
    named = run_stragglers(records, ratio, last)
    if named:
        text += "; straggler: " + ", ".join(f"{node} ({times:.1f}x the median)" for node, times in named.items())
    return text


def fault_text(record: dict) -> str:
    """One summary row for a fault that restarted the run (train/controller/restart.py's record, metrics.json's
    ``attempts``): what, where and at which step; the seconds to notice it (fault -> noticed) and to train again
    (noticed -> the next attempt's first logged step), the checkpoint gone on from and the steps lost, the nodes
    after. Unknown numbers are left out."""
    f = record.get("fault") or {}
    where = (f"rank {f.get('rank')} on {f.get('node')}" if f.get("rank") is not None and f.get("node")
             else f.get("node") or "the run")
    text = f"{f.get('kind', 'fault')} of {where}" + (f" at step {f['step']}" if f.get("step") is not None else "")
    if isinstance(record.get("detect_s"), (int, float)):
        text += f"; noticed in {record['detect_s']:.0f} s"
    if isinstance(record.get("recover_s"), (int, float)):
        text += f", training again {record['recover_s']:.0f} s later"
    if record.get("checkpoint_step") is not None:
        text += f"; from checkpoint-{record['checkpoint_step']}"
        if record.get("steps_lost") is not None:
            text += f" ({record['steps_lost']} steps lost)"
    if record.get("next_nodes"):
        text += (f" on {', '.join(record['next_nodes'])} (world size {record.get('world_size')} -> "
                 f"{record.get('next_world_size')})")
    return text


def summary_lines(out_dir: str | Path, run_name: str = "", failed: bool = False,
                  end: dict | None = None, straggler: dict | None = None, stopped: str = "") -> list[str]:
    """The end-of-run summary table of a run's results on the controller, as aligned lines.

    Args:
        out_dir: the run's directory on the controller (``outputs/<run>/``, as brought back by collect.yml).
        run_name: the run's name, for the first line.
        failed: the run failed (the table then shows what came back); a run that did not fail but wrote no
            metrics.json (a script without an HF Trainer, or ranks that ended early) is not called finished.
        end: {ranks_s, results_s}: seconds from the last step's record to the ranks' exit, and to bring the
            results back (:func:`end_text`); the row is left out when neither is known.
        straggler: {ratio, intervals}, the follower's (train_straggler_ratio, train_straggler_intervals): the
            "step time" row names the nodes it would have named (:func:`step_time_text`); default 1.2 and 3.
        stopped: what stopped the run on request (``ansible-playbook train.yml -e stop=<run>``), "" when nothing
            did: the first line then says it was stopped, not that it failed.

    Reads what is there, never assumes it: metrics.json (steps, world size, losses, samples/s, wall time; without
    it the last logged step of progress.jsonl), the ``checkpoint-*`` directories, ``runs/`` (TensorBoard event
    files), ``logs/`` (one log per rank), model/, loss_curve.png, train.log.

    Returns:
        lines such as ``"steps        150 of 150 (world size 2; node1: ranks 0,1)"``; the first says the run's name.
    """
    out = Path(out_dir)
    m = _read_json(out / "metrics.json") or {}
    records: list[dict] = []
    if (out / "progress.jsonl").is_file():
        try:
            records, _ = parse_records((out / "progress.jsonl").read_text(encoding="utf-8", errors="replace"))
        except OSError:
            records = []
    steps_rec = [r for r in records if not is_event(r)]
    last = steps_rec[-1] if steps_rec else {}
    losses = [r["loss"] for r in steps_rec if isinstance(r.get("loss"), (int, float))]
    steps = m.get("steps", last.get("step"))
    max_steps = m.get("max_steps", last.get("max_steps"))
    first_loss = m.get("first_loss", losses[0] if losses else None)
    last_loss = m.get("last_loss", losses[-1] if losses else None)
    sps = m.get("train_samples_per_second")
    steady = m.get("steady_samples_per_second")
    wall = m.get("wall_time_s", last.get("elapsed_s"))

    rows: list[tuple[str, str]] = []
    where = f"{steps if steps is not None else '-'}"
    if max_steps:
        where += f" of {max_steps}"
    if m.get("world_size"):
        where += f" (world size {m['world_size']}; {_ranks_by_host(m.get('ranks'))})"
    rows.append(("steps", where))
    rows.append(("loss", f"{_fmt(first_loss, 4)} -> {_fmt(last_loss, 4)} (first -> last logged step)"))
    rows.append(("samples/s", _rate_text(steady, m, sps, last)))
    rows.append(("wall time", format_duration(wall) if isinstance(wall, (int, float)) else "-"))
    knobs = straggler or {}
    step_time = step_time_text(m, steps_rec, float(knobs.get("ratio", 1.2)), int(knobs.get("intervals", 3)))
    if step_time:
        rows.append(("step time", step_time))
    ending = end_text(end or {})
    if ending:
        rows.append(("end of run", ending))
    checkpoints = sorted((p.name for p in out.glob("checkpoint-*") if p.is_dir()),
                         key=lambda n: int(n.rsplit("-", 1)[1]) if n.rsplit("-", 1)[1].isdigit() else -1)
    rows.append(("checkpoints", f"{len(checkpoints)} kept: {', '.join(checkpoints)}" if checkpoints else "none kept"))
    for a in m.get("attempts") or []:
        rows.append((f"fault {a.get('attempt', '?')}", fault_text(a)))

    files: list[tuple[str, str]] = []
    if (out / "model").is_dir():
        files.append(("model/", "the final model and tokenizer"))
    if (out / "metrics.json").is_file():
        files.append(("metrics.json", "steps, losses, samples/s, each rank's host"))
    if (out / "loss_curve.png").is_file():
        files.append(("loss_curve.png", "loss and learning rate by step"))
    events = sorted(out.glob("runs/**/events.out.tfevents.*"))
    if events:
        files.append(("runs/", f"TensorBoard events ({len(events)} file{'s' if len(events) > 1 else ''}): "
                               f"tensorboard --logdir {out / 'runs'}"))
    else:
        files.append(("runs/", "no TensorBoard events (report_to none, or tensorboard missing: see train.log)"))
    logs = sorted(p.name for p in (out / "logs").glob("*.log")) if (out / "logs").is_dir() else []
    if logs:
        shown = ", ".join(logs[:4]) + (f", ... ({len(logs)} files)" if len(logs) > 4 else "")
        files.append(("logs/", f"one log per rank: {shown}"))
    if (out / "progress.jsonl").is_file():
        files.append(("progress.jsonl", "every logged step and checkpoint save"))
    if (out / "train.log").is_file():
        files.append(("train.log", "the launcher's whole output (all ranks, interleaved)"))

    width = max(len(k) for k, _ in rows + [("results", "")])
    stop = next((r for r in reversed(records) if r.get("event") == "stop_request"), None)
    state = (f"stopped ({stopped}), what came back" if stopped
             else "FAILED, what came back" if failed
             else (f"stopped at step {stop.get('step')} before the Slurm job's time limit, its checkpoint saved; go on "
                   f"with ansible-playbook train.yml -e resume={run_name or stop.get('run') or out.name}")
             if stop is not None and m
             else "finished" if m else "ended without a metrics.json (see train.log and logs/)")
    lines = [f"run {run_name or m.get('run_name') or out.name}: {state}"]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines.append(f"{'results'.ljust(width)}  {out}/")
    fwidth = max(len(k) for k, _ in files)
    lines += [f"{''.ljust(width)}    {k.ljust(fwidth)}  {v}" for k, v in files]
    return lines


if __name__ == "__main__":
    sys.exit(main())


# --------------------------------------------------------------------------------- the DeepSpeed op build's log
_OPS_LINE = re.compile(r"Install Ops=(\{.*\})")
_BUILDING_LINE = re.compile(r"building '([\w.]+)' extension")


def ops_planned(line: str) -> int | None:
    """Number of ops set to build (value 1 or True) in setuptools' ``Install Ops={...}`` line of DeepSpeed's
    setup.py (pip's build log), or None for any other line. Used by roles/deepspeed's deepspeed_build_watch."""
    match = _OPS_LINE.search(line)
    return None if not match else len(re.findall(r":\s*(?:1|True)\b", match.group(1)))


def op_started(line: str) -> str | None:
    """The op's short name when setuptools starts compiling it (``building 'deepspeed.ops.adam.cpu_adam_op'
    extension`` -> ``cpu_adam``), or None for any other line."""
    match = _BUILDING_LINE.search(line)
    return None if not match else re.sub(r"_op$", "", match.group(1).rsplit(".", 1)[-1])

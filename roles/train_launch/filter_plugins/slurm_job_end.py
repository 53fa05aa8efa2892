"""Jinja filter ``slurm_job_end``: Slurm's own record of how a run's job ended (state, reason, exit code, nodes),
as one sentence for a failed ``-e launcher=slurm`` run's error (roles/train_launch follow.yml, "Stop with the
run's error").

    "{{ __train_launch_scontrol | slurm_job_end(__train_launch_sacct, train_plan.run_name) }}"
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[3])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from train.controller.progress import (SCONTROL_JOBS_ARGS, SLURM_ENDED, sacct_args, slurm_nodes_text,  # noqa: E402
                                       slurm_record, slurm_requeue_text)

#: what each of Slurm's end states means for the run, in words (squeue(1)/sacct(1) "JOB STATE CODES")
STATE_MEANS = {
    "FAILED": "a task of the job ended with an error (srun --kill-on-bad-exit then ends the others)",
    "NODE_FAIL": ("Slurm took a node of the job for dead and ended the job; train.yml submits it with --no-requeue, so "
                  "that Slurm never starts it again from step 0 over the run's checkpoints (docs/slurm.md)"),
    "TIMEOUT": ("the job reached its time limit (-e train_slurm_time_limit, else the partition's); a run saves and "
                "stops before it when -e train_slurm_signal_s leaves time for a logging interval and a save"),
    "OUT_OF_MEMORY": "a process of the job went over the memory Slurm allows it",
    "CANCELLED": "the job was cancelled (scancel: by a user, an admin or Slurm)",
    "PREEMPTED": "Slurm preempted the job for another one",
    "BOOT_FAIL": "a node of the job failed to boot",
    "DEADLINE": "the job reached its deadline",
}

#: the states of a job that has ended (a RUNNING or COMPLETING job's record is not yet how it ended)
ENDED = SLURM_ENDED


def slurm_job_end(scontrol, sacct, name, out_of_service=()):
    """Slurm's record of the newest job named ``name``, as one sentence, or "" when Slurm no longer knows it.

    Args:
      scontrol: the registered result of ``scontrol --oneliner show job`` on the head (a dict with rc, stdout): every
        job slurmctld still holds, one line each; an ended job stays there for MinJobAge (300 s by default).
      sacct: the registered result of ``sacct -X -n -P --name=NAME -o JobID,JobName,State,ExitCode,Reason,NodeList``
        (read where scontrol no longer lists the job; without an accounting database it fails and says so), or a
        skipped/empty result.
      name: the job's name (train.yml names the job after the run).
      out_of_service: the job's nodes Slurm holds out of service, with their reason (the follower's ``slurm_nodes``:
        train.controller.progress.slurm_nodes_in_trouble), or none.

    Returns:
      "" also while the job has not ended (RUNNING, COMPLETING, ...: the follower found the failure before Slurm did);
      else e.g. ``"Slurm's record of job 57 (bert-tiny-...): FAILED (NonZeroExitCode; exit code 3:0) on
      head-1,worker-[1-2]: a task of the job ended with an error (...). "`` -- scontrol's record first, sacct's
      where scontrol has none; "" when neither names such a job. The exit code is Slurm's ``code:signal``. Then,
      where known, the nodes out of service and whether Slurm requeued the job: ``"Slurm says worker-2 is down (reason:
      test, since 2026-12-07T17:50:01); the job was not requeued (submitted with --no-requeue). "``.
    """
    job = slurm_record((scontrol or {}).get("stdout"), (sacct or {}).get("stdout"), name)
    if job is None:
        return ""
    state = job.get("JobState", "")
    if state not in ENDED:
        return ""
    details = [x for x in (job.get("Reason", "") if job.get("Reason") not in ("", "None", "(null)") else "",
                           f"exit code {job['ExitCode']}" if job.get("ExitCode") else "") if x]
    nodes = job.get("NodeList", "")
    text = f"Slurm's record of job {job.get('JobId')} ({name}): {state}"
    text += f" ({'; '.join(details)})" if details else ""
    text += f" on {nodes}" if nodes and nodes != "(null)" else ""
    means = STATE_MEANS.get(state)
    text += f": {means}. " if means else ". "
    held = slurm_nodes_text(list(out_of_service or []))
    requeue = slurm_requeue_text(job)
    if held:
        text += f"Slurm says {held}" + ("; " if requeue else ". ")
    if requeue:
        text += f"{'T' if not held else 't'}he job was {requeue}. "
    return text


def slurm_record_argv(what, name=""):
    """The argv that reads Slurm's record of the jobs, the one the follower reads too (train.controller.progress):
    ``"scontrol"``: every job slurmctld holds, one line each; ``"sacct"``: the jobs named ``name`` in accounting.
    Raises ValueError for another ``what``."""
    if what == "scontrol":
        return list(SCONTROL_JOBS_ARGS)
    if what == "sacct":
        return sacct_args(name)
    raise ValueError(f"slurm_record_argv: what must be scontrol or sacct, got {what!r}")


class FilterModule:
    def filters(self):
        return {"slurm_job_end": slurm_job_end, "slurm_record_argv": slurm_record_argv}

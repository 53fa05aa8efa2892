"""Jinja filter ``slurm_job_end``: Slurm's own record of how a run's job ended (state, reason, exit code, nodes),
as one sentence for a failed ``-e launcher=slurm`` run's error (roles/train_launch follow.yml, "Stop with the
run's error").

    "{{ __train_launch_scontrol | slurm_job_end(__train_launch_sacct, train_plan.run_name) }}"
"""

from __future__ import annotations

import re

#: what each of Slurm's end states means for the run, in words (squeue(1)/sacct(1) "JOB STATE CODES")
STATE_MEANS = {
    "FAILED": "a task of the job ended with an error (srun --kill-on-bad-exit then ends the others)",
    "NODE_FAIL": "Slurm took a node of the job for dead (see scontrol show node for its reason)",
    "TIMEOUT": ("the job reached its time limit (-e train_slurm_time_limit, else the partition's); a run saves and "
                "stops before it when -e train_slurm_signal_s leaves time for a logging interval and a save"),
    "OUT_OF_MEMORY": "a process of the job went over the memory Slurm allows it",
    "CANCELLED": "the job was cancelled (scancel: by a user, an admin or Slurm)",
    "PREEMPTED": "Slurm preempted the job for another one",
    "BOOT_FAIL": "a node of the job failed to boot",
    "DEADLINE": "the job reached its deadline",
}

#: the states of a job that has ended (a RUNNING or COMPLETING job's record is not yet how it ended)
ENDED = set(STATE_MEANS) | {"COMPLETED"}

_PAIR = re.compile(r"(\S+?)=(\S*)")


def _scontrol_jobs(text):
    """The jobs of ``scontrol --oneliner show job``: one dict of its Key=Value fields per line."""
    return [dict(_PAIR.findall(line)) for line in str(text or "").splitlines() if line.startswith("JobId=")]


def _sacct_jobs(text):
    """The jobs of ``sacct -X -n -P -o JobID,JobName,State,ExitCode,Reason,NodeList`` as scontrol's field names."""
    jobs = []
    for line in str(text or "").splitlines():
        cols = line.split("|")
        if len(cols) >= 6 and cols[0].strip():
            # sacct writes "CANCELLED by 0" where scontrol writes CANCELLED
            jobs.append({"JobId": cols[0], "JobName": cols[1], "JobState": cols[2].split()[0] if cols[2] else "",
                         "ExitCode": cols[3], "Reason": cols[4], "NodeList": cols[5]})
    return jobs


def _job_number(job):
    """The job id as a number for ordering (array and het-job suffixes such as ``12_3`` or ``12+0`` cut off)."""
    m = re.match(r"\d+", str(job.get("JobId", "")))
    return int(m.group(0)) if m else -1


def slurm_job_end(scontrol, sacct, name):
    """Slurm's record of the newest job named ``name``, as one sentence, or "" when Slurm no longer knows it.

    Args:
      scontrol: the registered result of ``scontrol --oneliner show job`` on the head (a dict with rc, stdout): every
        job slurmctld still holds, one line each; an ended job stays there for MinJobAge (300 s by default).
      sacct: the registered result of ``sacct -X -n -P --name=NAME -o JobID,JobName,State,ExitCode,Reason,NodeList``
        (read where scontrol no longer lists the job; without an accounting database it fails and says so), or a
        skipped/empty result.
      name: the job's name (train.yml names the job after the run).

    Returns:
      "" also while the job has not ended (RUNNING, COMPLETING, ...: the follower found the failure before Slurm did);
      else e.g. ``"Slurm's record of job 57 (bert-tiny-...): FAILED (NonZeroExitCode; exit code 3:0) on
      head-1,worker-[1-2]: a task of the job ended with an error (...). "`` -- scontrol's record first, sacct's
      where scontrol has none; "" when neither names such a job. The exit code is Slurm's ``code:signal``.
    """
    jobs = [j for j in _scontrol_jobs((scontrol or {}).get("stdout")) if j.get("JobName") == name]
    if not jobs:
        jobs = [j for j in _sacct_jobs((sacct or {}).get("stdout")) if j.get("JobName") == name]
    if not jobs:
        return ""
    job = max(jobs, key=_job_number)
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
    return text + (f": {means}. " if means else ". ")


class FilterModule:
    def filters(self):
        return {"slurm_job_end": slurm_job_end}

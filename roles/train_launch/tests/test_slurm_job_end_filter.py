"""roles/train_launch/filter_plugins/slurm_job_end.py: Slurm's record of how a run's job ended, from the registered
results of ``scontrol --oneliner show job`` and ``sacct`` on the head (the scontrol line is one Slurm 22.05 printed
for a batch job that exited 3 on the cluster scenario's Slurm)."""

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "slurm_job_end_filter", Path(__file__).resolve().parents[1] / "filter_plugins" / "slurm_job_end.py")
_MOD = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MOD)
slurm_job_end = _MOD.slurm_job_end

FAILED = (
    "JobId=1 JobName=probe-fail UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 "
    "Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A "
    "SubmitTime=2026-12-05T12:55:51 EligibleTime=2026-12-05T12:55:51 AccrueTime=2026-12-05T12:55:51 "
    "StartTime=2026-12-05T12:55:51 EndTime=2026-12-05T12:55:51 Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
    "LastSchedEval=2026-12-05T12:55:51 Scheduler=Main Partition=main AllocNode:Sid=head-1:3073 ReqNodeList=worker-2 "
    "ExcNodeList=(null) NodeList=worker-2 BatchHost=worker-2 NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 "
    "MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 "
    "Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp StdErr=/tmp/probe.out StdIn=/dev/null "
    "StdOut=/tmp/probe.out Power= ")


def _res(stdout, rc=0):
    return {"rc": rc, "stdout": stdout, "stderr": ""}


def test_a_failed_job_is_named_with_its_state_reason_exit_code_and_nodes():
    said = slurm_job_end(_res(FAILED + "\n"), None, "probe-fail")
    assert said.startswith("Slurm's record of job 1 (probe-fail): FAILED (NonZeroExitCode; exit code 3:0) on "
                           "worker-2: a task of the job ended with an error"), said


def test_the_newest_job_of_the_name_is_the_one_told():
    older = FAILED.replace("JobId=1 ", "JobId=9 ").replace("JobState=FAILED", "JobState=COMPLETED") \
                  .replace("Reason=NonZeroExitCode", "Reason=None").replace("ExitCode=3:0", "ExitCode=0:0")
    newer = FAILED.replace("JobId=1 ", "JobId=10 ").replace("JobState=FAILED", "JobState=NODE_FAIL") \
                  .replace("Reason=NonZeroExitCode", "Reason=NodeDown").replace("NodeList=worker-2",
                                                                              "NodeList=head-1,worker-[1-2]")
    other = FAILED.replace("JobId=1 ", "JobId=11 ").replace("JobName=probe-fail", "JobName=someone-else")
    said = slurm_job_end(_res("\n".join([older, newer, other])), None, "probe-fail")
    assert said.startswith("Slurm's record of job 10 (probe-fail): NODE_FAIL (NodeDown; exit code 3:0) on "
                           "head-1,worker-[1-2]: Slurm took a node of the job for dead"), said
    # "Reason=None" is no reason
    alone = slurm_job_end(_res(older), None, "probe-fail")
    assert alone == "Slurm's record of job 9 (probe-fail): COMPLETED (exit code 0:0) on worker-2. ", alone


def test_sacct_is_read_where_scontrol_no_longer_holds_the_job():
    gone = _res("No jobs in the system\n")
    sacct = _res("41|bert-x|TIMEOUT|0:0|TimeLimit|head-1,worker-1\n42|other|FAILED|1:0|NonZeroExitCode|head-1\n")
    said = slurm_job_end(gone, sacct, "bert-x")
    assert said.startswith("Slurm's record of job 41 (bert-x): TIMEOUT (TimeLimit; exit code 0:0) on "
                           "head-1,worker-1: the job reached its time limit"), said
    cancelled = _res("43|bert-y|CANCELLED by 0|0:15||head-1\n")
    assert slurm_job_end(gone, cancelled, "bert-y").startswith(
        "Slurm's record of job 43 (bert-y): CANCELLED (exit code 0:15) on head-1: the job was cancelled")


def test_nothing_is_said_when_slurm_knows_no_such_job():
    no_accounting = {"rc": 1, "stdout": "", "stderr": "Slurm accounting storage is disabled"}
    assert slurm_job_end(_res("No jobs in the system\n"), no_accounting, "bert-x") == ""
    assert slurm_job_end(_res(FAILED), {"skipped": True}, "bert-x") == ""
    assert slurm_job_end({"rc": 2, "msg": "No such file or directory"}, None, "bert-x") == ""


def test_a_job_that_has_not_ended_is_not_told_as_its_end():
    for state in ("RUNNING", "COMPLETING", "PENDING"):
        assert slurm_job_end(_res(FAILED.replace("JobState=FAILED", f"JobState={state}")), None, "probe-fail") == ""


def test_the_record_is_read_with_the_followers_own_argv():
    """follow.yml reads Slurm's record with the argv the follower (train.controller.progress) reads it with."""
    from train.controller import progress
    assert _MOD.slurm_record_argv("scontrol") == progress.SCONTROL_JOBS_ARGS == ["scontrol", "--oneliner", "show", "job"]
    argv = _MOD.slurm_record_argv("sacct", "bert-1")
    assert argv == progress.sacct_args("bert-1") and argv[0] == "sacct" and "--name=bert-1" in argv
    with pytest.raises(ValueError, match="scontrol or sacct"):
        _MOD.slurm_record_argv("squeue")


def test_a_node_slurm_took_for_dead_is_named_with_its_reason_and_the_job_not_requeued():
    """A job ended NODE_FAIL after an admin's `scontrol update nodename=worker-2 state=down reason=test`: the
    sentence names the node Slurm holds down, the reason given, and that the job was not requeued (--no-requeue)."""
    from train.controller.progress import sinfo_nodes_args, slurm_nodes_in_trouble
    lost = FAILED.replace("JobState=FAILED", "JobState=NODE_FAIL").replace("Reason=NonZeroExitCode", "Reason=NodeDown") \
                 .replace("Requeue=1", "Requeue=0").replace("ExitCode=3:0", "ExitCode=0:0") \
                 .replace("NodeList=worker-2", "NodeList=head-1,worker-[1-2]")
    assert sinfo_nodes_args("head-1,worker-[1-2]") == ["sinfo", "--noheader", "--Node", "--nodes=head-1,worker-[1-2]",
                                                        "--format=%N|%T|%E|%H"]
    sinfo = ("head-1|idle|none|Unknown\nworker-1|idle|none|Unknown\n"
             "worker-2|down|test|2026-12-07T17:50:01\nworker-2|down|test|2026-12-07T17:50:01\n")
    nodes = slurm_nodes_in_trouble(sinfo)
    assert nodes == [{"node": "worker-2", "state": "down", "reason": "test", "since": "2026-12-07T17:50:01"}]
    said = slurm_job_end(_res(lost), None, "probe-fail", nodes)
    assert said == ("Slurm's record of job 1 (probe-fail): NODE_FAIL (NodeDown; exit code 0:0) on head-1,worker-[1-2]: "
                    "Slurm took a node of the job for dead and ended the job; train.yml submits it with --no-requeue, "
                    "so that Slurm never starts it again from step 0 over the run's checkpoints (docs/slurm.md). "
                    "Slurm says worker-2 is down (reason: test, since 2026-12-07T17:50:01); the job was not requeued "
                    "(submitted with --no-requeue). "), said
    # a job that an older train.yml submitted, which Slurm requeued: said too
    again = lost.replace("Requeue=0 Restarts=0", "Requeue=1 Restarts=1")
    assert slurm_job_end(_res(again), None, "probe-fail").endswith(" The job was requeued 1 time before. ")
    # a node that does not respond (down*), one drained with no time known; idle, allocated, mixed ones are fine
    more = slurm_nodes_in_trouble("a|down*|Not responding|2026-12-07T17:00:00\nb|drained|bad gpu|Unknown\n"
                                  "c|allocated|none|Unknown\nd|mixed|none|Unknown\n")
    assert [(n["node"], n["state"], n["reason"], n["since"]) for n in more] == [
        ("a", "down*", "Not responding", "2026-12-07T17:00:00"), ("b", "drained", "bad gpu", "")]

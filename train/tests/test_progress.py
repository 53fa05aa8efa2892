"""train/controller/progress.py: the lines the playbook prints while a job runs."""

import json

from train.controller.progress import format_duration, format_record, main, parse_records, summary_lines


def test_format_duration():
    assert format_duration(None) == "?"
    assert format_duration(-1) == "?"
    assert format_duration(44.6) == "45s"
    assert format_duration(185) == "3m05s"
    assert format_duration(7380) == "2h03m"


def test_format_record_full():
    rec = {"step": 40, "max_steps": 200, "loss": 6.12, "samples_per_second": 35.14, "elapsed_s": 62, "eta_s": 247}
    assert format_record(rec) == "step 40/200 (20%) | loss 6.1200 | 35.1 samples/s | elapsed 1m02s | ETA 4m07s"


def test_format_record_shows_tokens_per_second_when_the_record_has_it():
    rec = {"step": 40, "max_steps": 200, "loss": 6.12, "samples_per_second": 1140.2, "tokens_per_second": 583782.4,
           "elapsed_s": 62, "eta_s": 247}
    assert format_record(rec) == ("step 40/200 (20%) | loss 6.1200 | 1140.2 samples/s, 584 k tokens/s | "
                                  "elapsed 1m02s | ETA 4m07s")


def test_format_count():
    from train.controller.progress import format_count

    assert [format_count(v) for v in (950.4, 4492.8, 583782.4, 1.23e6, 12.6e6)] == \
        ["950", "4.5 k", "584 k", "1.2 M", "13 M"]


def test_format_record_missing_fields():
    assert format_record({"step": 3}) == "step 3 | loss ? | ? samples/s | elapsed ? | ETA ?"


def test_parse_records_leaves_partial_line_for_next_read():
    text = '{"step": 1}\nnot json\n{"step": 2}\n{"step": 3, "lo'
    records, consumed = parse_records(text)
    assert [r["step"] for r in records] == [1, 2]
    assert text[consumed:] == '{"step": 3, "lo'
    rest = text[consumed:] + 'ss": 1.5}\n'
    more, used = parse_records(rest)
    assert more == [{"step": 3, "loss": 1.5}] and used == len(rest)


def test_main_prints_each_record_with_the_last_checkpoint(tmp_path, capsys):
    f = tmp_path / "progress.jsonl"
    f.write_text('{"step": 5, "max_steps": 10, "loss": 2.0}\n'
                 '{"event": "save", "step": 5, "checkpoint": "checkpoint-5", "elapsed_s": 3.0}\n'
                 '{"step": 10, "max_steps": 10, "loss": 1.0}\n{"event": "warning", "message": "no TensorBoard"}\n'
                 '{"event": "save", "step": 10, "checkpoint": "checkpoint-10", "elapsed_s": 9.0, "save_s": 2.46, '
                 '"size_bytes": 1234567890}\n')
    assert main([str(f)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "step 5/10 (50%) | loss 2.0000 | ? samples/s | elapsed ? | ETA ? | last checkpoint: none yet",
        "saved checkpoint-5 (step 5)",
        "step 10/10 (100%) | loss 1.0000 | ? samples/s | elapsed ? | ETA ? | last checkpoint: step 5",
        "warning: no TensorBoard",
        "saved checkpoint-10 (step 10; 1.23 GB on the head, in 2.5 s)",
    ]
    assert main([str(tmp_path / "missing.jsonl")]) == 2


def test_the_op_builds_planned_ops_and_each_op_start_are_read_from_its_log():
    """Lines as a real DS_BUILD_OPS=1 build on this machine logged them (pip --log); deepspeed_build_watch prints
    `compiling cpu_adam (3 of 6)` from them instead of Ansible's FAILED - RETRYING."""
    from train.controller.progress import op_started, ops_planned

    line = ("2026-12-01T10:20:27,597   Install Ops={'deepspeed_not_implemented': False, 'async_io': False, "
            "'deepspeed_ccl_comm': False, 'deepspeed_shm_comm': 1, 'cpu_adagrad': 1, 'cpu_adam': 1, 'cpu_lion': 1, "
            "'fused_adam': 1, 'pin_memory': 1}")
    assert ops_planned(line) == 6
    assert op_started("2026-12-01T10:21:55,629   building 'deepspeed.ops.adam.cpu_adam_op' extension") == "cpu_adam"
    assert op_started("2026-12-01T10:20:28,309   building 'deepspeed.ops.comm.deepspeed_shm_comm_op' extension") \
        == "deepspeed_shm_comm"
    assert ops_planned("Building wheel for deepspeed (setup.py): started") is None
    assert op_started("gcc -pthread -c csrc/adam/cpu_adam.cpp") is None


def test_the_summary_table_reads_what_came_back(tmp_path):
    """A results directory as collect.yml leaves it: the table's rows come from its files, aligned."""
    out = tmp_path / "run1"
    (out / "model").mkdir(parents=True)
    (out / "metrics.json").write_text(json.dumps({
        "run_name": "run1", "steps": 30, "max_steps": 30, "world_size": 3, "first_loss": 8.61234, "last_loss": 5.1,
        "train_samples_per_second": 41.27, "wall_time_s": 75.0,
        "ranks": [{"rank": 0, "hostname": "head-1"}, {"rank": 1, "hostname": "worker-1"},
                  {"rank": 2, "hostname": "worker-1"}]}))
    for name in ("checkpoint-20", "checkpoint-30", "checkpoint-5"):
        (out / name).mkdir()
    (out / "checkpoint-9.tmp").write_text("a file, not a checkpoint")
    (out / "runs" / "Dec01_head-1").mkdir(parents=True)
    (out / "runs" / "Dec01_head-1" / "events.out.tfevents.1.head-1").write_bytes(b"x")
    (out / "logs").mkdir()
    for name in ("head-1.rank0.log", "worker-1.rank1.log", "worker-1.rank2.log"):
        (out / "logs" / name).write_text("x\n")
    (out / "loss_curve.png").write_bytes(b"png")
    (out / "train.log").write_text("x\n")
    lines = summary_lines(out, "run1")
    assert lines[0] == "run run1: finished"
    assert lines[1] == "steps        30 of 30 (world size 3; head-1: rank 0, worker-1: ranks 1,2)"
    assert lines[2] == "loss         8.6123 -> 5.1000 (first -> last logged step)"
    assert lines[3:6] == ["samples/s    41.3 whole-run average (the Trainer's; start-up and compilation included)",
                          "wall time    1m15s", "checkpoints  3 kept: checkpoint-5, checkpoint-20, checkpoint-30"]
    assert lines[6] == f"results      {out}/"
    files = {line.split()[0]: line for line in lines[7:]}
    assert list(files) == ["model/", "metrics.json", "loss_curve.png", "runs/", "logs/", "train.log"]
    assert files["runs/"].endswith(f"runs/           TensorBoard events (1 file): tensorboard --logdir {out / 'runs'}")
    assert files["logs/"].endswith("logs/           one log per rank: head-1.rank0.log, worker-1.rank1.log, "
                                   "worker-1.rank2.log")
    assert len({line.index(line.split()[1], 17) for line in lines[7:]}) == 1  # the file column is aligned


def test_the_summary_times_the_end_of_the_run_when_it_is_known(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"steps": 30, "max_steps": 30, "wall_time_s": 75.0}))
    lines = summary_lines(tmp_path, "r", end={"ranks_s": 125.4, "results_s": "3.2"})
    assert lines[5] == ("end of run   the ranks ended 2m05s after the last step (final checkpoint and model written); "
                        "results brought back in 3s"), lines
    assert lines[4] == "wall time    1m15s"
    only = summary_lines(tmp_path, "r", end={"ranks_s": "", "results_s": 61})
    assert "end of run   results brought back in 1m01s" in only
    assert not any(line.startswith("end of run") for line in summary_lines(tmp_path, "r", end={}))
    assert not any(line.startswith("end of run") for line in summary_lines(tmp_path, "r"))


def test_the_summary_names_the_steady_rate_and_the_whole_run_average(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({
        "steps": 60, "max_steps": 60, "train_samples_per_second": 478.04, "steady_samples_per_second": 1140.21,
        "steady_tokens_per_second": 583787.5, "steady_steps": [10, 60], "steady_mfu": 0.5271, "wall_time_s": 90,
        "mfu_peak": {"gpu": "NVIDIA H200", "flops": 790e12, "source": "measured: a large bf16 matmul"}}))
    rate = [line for line in summary_lines(tmp_path, "r") if line.startswith("samples/s")]
    assert rate == ["samples/s    1140.2 steady (steps 10-60, 584 k tokens/s, MFU 52.7 % of 790.0 TFLOP/s, measured); "
                    "478.0 whole-run average (the Trainer's; start-up and compilation included)"]


def test_the_summary_of_a_failed_run_without_metrics_uses_its_progress(tmp_path):
    (tmp_path / "progress.jsonl").write_text('{"step": 5, "max_steps": 50, "loss": 7.0, "elapsed_s": 9.0}\n'
                                             '{"step": 10, "max_steps": 50, "loss": 6.5, "elapsed_s": 12.0, '
                                             '"samples_per_second": 26.7}\n{"st')
    lines = summary_lines(tmp_path, "r", failed=True)
    assert lines[:5] == ["run r: FAILED, what came back", "steps        10 of 50",
                         "loss         7.0000 -> 6.5000 (first -> last logged step)",
                         "samples/s    26.7 at the last logged step", "wall time    12s"]
    assert "checkpoints  none kept" in lines
    assert summary_lines(tmp_path, "r")[0] == "run r: ended without a metrics.json (see train.log and logs/)"
    # stopped with -e stop= from another shell: said as such, not as a failure
    assert summary_lines(tmp_path, "r", failed=False, stopped="ansible-playbook train.yml -e stop=r")[:2] == [
        "run r: stopped (ansible-playbook train.yml -e stop=r), what came back", "steps        10 of 50"]


def test_a_slurm_job_is_shown_pending_with_its_reason_and_place_then_running():
    """squeue's lines (progress.SQUEUE_ARGS' format, most urgent first) -> the follower's line for the run's job."""
    from train.controller.progress import slurm_job_line

    queue = ("40|other-a|RUNNING|None|n1,n2\n"
             "41|other-b|PENDING|Priority|\n"
             "42|run-x|PENDING|Resources|\n"
             "43|other-c|PENDING|QOSMaxNodePerUserLimit|\n")
    assert slurm_job_line(queue, "run-x") == "Slurm job 42 (run-x) is PENDING: Resources; 2nd of 3 pending jobs"
    assert slurm_job_line("42|run-x|PENDING|Priority|\n", "run-x") == \
        "Slurm job 42 (run-x) is PENDING: Priority; 1st of 1 pending job"
    assert slurm_job_line("42|run-x|RUNNING|None|head-1,worker-[1-2]\n", "run-x") == \
        "Slurm job 42 (run-x) is RUNNING on head-1,worker-[1-2]"
    assert slurm_job_line("42|run-x|COMPLETING|None|(null)\n", "run-x") == "Slurm job 42 (run-x) is COMPLETING"
    assert slurm_job_line(queue, "run-y") is None and slurm_job_line("", "run-x") is None
    many = "".join(f"{i}|j{i}|PENDING|Priority|\n" for i in range(1, 23))
    assert slurm_job_line(many, "j11").endswith("11th of 22 pending jobs")
    assert slurm_job_line(many, "j22").endswith("22nd of 22 pending jobs")


def test_a_run_stopped_before_its_slurm_time_limit_says_so_and_how_to_go_on(tmp_path):
    from train.controller.progress import format_event

    event = {"event": "stop_request", "step": 40, "max_steps": 5000, "run": "r7", "requested_at": 1796420000}
    assert format_event(event) == ("stopping at step 40 of 5000 before the Slurm job's time limit: every rank saves "
                                   "checkpoint-40 first; go on with ansible-playbook train.yml -e resume=r7")
    (tmp_path / "progress.jsonl").write_text('{"step": 40, "max_steps": 5000, "loss": 6.5, "elapsed_s": 12.0}\n'
                                             + json.dumps(event) + "\n")
    (tmp_path / "metrics.json").write_text(json.dumps({"steps": 40, "max_steps": 5000}))
    lines = summary_lines(tmp_path, "r7")
    assert lines[0] == ("run r7: stopped at step 40 before the Slurm job's time limit, its checkpoint saved; go on "
                        "with ansible-playbook train.yml -e resume=r7"), lines
    assert lines[1] == "steps        40 of 5000"
    (tmp_path / "progress.jsonl").write_text('{"step": 40, "max_steps": 5000, "loss": 6.5, "elapsed_s": 12.0}\n')
    assert summary_lines(tmp_path, "r7")[0] == "run r7: finished"


def test_the_job_id_squeue_lists_and_slurms_record_of_how_the_newest_job_of_a_name_ended():
    """The follower's view of a Slurm job (-e launcher=slurm): the id squeue lists for the run's name; once it no
    longer lists it, Slurm's record of the newest job of that name (scontrol's, else sacct's) and the exit status
    it stands for, as sbatch --wait would give it."""
    from train.controller.progress import (SLURM_ENDED, sacct_args, slurm_exit_status, slurm_job_id,
                                           slurm_record)

    queue = "41|other|RUNNING|None|worker-1\n42|run-x|PENDING|Resources|\n"
    assert slurm_job_id(queue, "run-x") == "42" and slurm_job_id(queue, "run-y") is None
    assert slurm_job_id("", "run-x") is None
    scontrol = ("JobId=7 JobName=run-x JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=head-1\n"
                "JobId=9 JobName=run-x JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 NodeList=head-1,worker-1\n"
                "JobId=8 JobName=other JobState=RUNNING Reason=None ExitCode=0:0 NodeList=worker-2\n")
    newest = slurm_record(scontrol, "", "run-x")
    assert newest["JobId"] == "9" and newest["JobState"] == "FAILED" and slurm_exit_status(newest) == 3
    assert slurm_record(scontrol, "", "nope") is None
    # scontrol no longer holds it (MinJobAge): sacct's line, "CANCELLED by 0" read as CANCELLED
    acct = "12|run-z|CANCELLED by 0|0:15|None|head-1,worker-[1-2]\n"
    old = slurm_record("", acct, "run-z")
    assert old["JobState"] == "CANCELLED" and old["JobState"] in SLURM_ENDED and slurm_exit_status(old) == 1
    assert slurm_exit_status({"JobState": "COMPLETED", "ExitCode": "0:0"}) == 0
    assert slurm_exit_status({"JobState": "TIMEOUT", "ExitCode": "0:0"}) == 1
    assert "--name=run-z" in sacct_args("run-z") and "--format=JobID,JobName,State,ExitCode,Reason,NodeList" in \
        sacct_args("run-z")


def test_slurms_nodes_out_of_service_and_its_requeue_are_said_from_its_own_output():
    from train.controller.progress import slurm_nodes_in_trouble, slurm_nodes_text, slurm_requeue_text
    nodes = slurm_nodes_in_trouble("head-1|allocated|none|Unknown\nworker-2|down|test|2026-12-07T17:50:01\n"
                                   "worker-3|draining|bad gpu|Unknown\nworker-4|idle*|none|Unknown\n")
    assert slurm_nodes_text(nodes) == ("worker-2 is down (reason: test, since 2026-12-07T17:50:01); worker-3 is "
                                       "draining (reason: bad gpu); worker-4 is idle*")
    assert slurm_nodes_in_trouble("") == [] and slurm_nodes_text([]) == ""
    assert slurm_requeue_text({"Requeue": "0", "Restarts": "0"}) == "not requeued (submitted with --no-requeue)"
    assert slurm_requeue_text({"Requeue": "1", "Restarts": "2"}) == "requeued 2 times before"
    assert slurm_requeue_text({"JobState": "NODE_FAIL"}) == ""  # sacct's columns say nothing of it


def test_a_node_slurm_took_back_at_once_is_found_in_the_jobs_output_and_slurmctlds_log():
    """The scenario's Slurm (ReturnToService=2) takes a node an admin set down back 0.2 s later: sinfo no longer
    holds it; srun's line in slurm.out names it, and slurmctld's log its reason and time (lines as Slurm 22.05 wrote
    them there)."""
    from train.controller.progress import slurm_failed_nodes, slurm_nodes_text, slurmctld_node_down
    out = ("Slurm job 2 on head-1 worker-1 worker-2: srun starts deepspeed on every node (2 CPUs each)\n"
           "srun: error: Node failure on worker-2\nsrun: error: worker-2: task 2: Terminated\n"
           "srun: error: Node failure on worker-2\n")
    assert slurm_failed_nodes(out) == ["worker-2"] and slurm_failed_nodes("") == []
    log = ("[2026-12-07T18:22:11.545] update_node: node worker-2 reason set to: dsc-test-667638\n"
           "[2026-12-07T18:22:11.546] update_node: node worker-2 state set to DOWN\n"
           "[2026-12-07T18:22:11.711] node_did_resp: node worker-2 returned to service\n"
           "[2026-12-07T18:22:59.774] Invalid node state transition requested for node worker-2 from=IDLE to=RESUME\n")
    found = slurmctld_node_down(log, "worker-2")
    assert found == {"node": "worker-2", "state": "down", "reason": "dsc-test-667638", "since": "2026-12-07T18:22:11",
                     "returned": True}, found
    assert slurm_nodes_text([found]) == ("worker-2 was down (reason: dsc-test-667638, since 2026-12-07T18:22:11), "
                                         "then returned to service")
    assert slurmctld_node_down(log, "worker-1") is None

"""Checkpoints and resume on the multi-node scenario (molecule/cluster/run.sh verify, after verify_faults.py): a
real run on the 3 nodes saves checkpoints on each node's own disk, the head gathers every node's part while it
runs, one of worker-2's ranks is SIGKILLed (the run stops on every node within a minute, naming that rank and
leaving no process), and ``-e resume=`` goes on from the newest complete checkpoint with the
step counter and the loss continuing; that train.yml is interrupted (SIGINT, as Ctrl-C) and ``-e attach=`` follows
the run to its end. One short tiny-BERT run (save every 10 steps)."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
import verify as cluster  # pytest puts this directory on sys.path (no __init__.py), pytest.ini the repository
import verify_faults as faults

from train.node import checkpoints

RUNS = cluster.RUNS


def progress(path):
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]


def head_complete_steps(run):
    """The steps of ``run``'s checkpoints the head has marked complete (every node's part gathered there)."""
    res = cluster.podman_exec("head-1", "sh", "-c", f"ls -d {RUNS}/{run}/output/checkpoint-*/{checkpoints.MARKER}",
                              check=False)
    return sorted(checkpoints.step_of(Path(ln).parent) for ln in res.stdout.split())


def head_log(run):
    """The tail of the head's train.log of ``run`` (the supervisor's [checkpoints] lines are there), for messages."""
    return cluster.podman_exec("head-1", "tail", "-n", "40", f"{RUNS}/{run}/train.log", check=False).stdout


def test_a_run_killed_on_a_worker_resumes_from_its_newest_complete_checkpoint(tmp_path):
    nodes, slots = cluster.inventory()
    world = sum(slots.values())
    node = "worker-2"
    rank = sum(slots[n] for n in nodes[: nodes.index(node)])
    run = f"resume-{int(time.time())}"
    proc, log = faults.start_run(run, tmp_path, "-e", "save_steps=10", "-e", "logging_steps=5",
                                 "-e", "warmup_steps=2", "-e", "max_restarts=0")  # today's way: a person resumes
    try:
        # the head gathered every node's part of a checkpoint (step 20 or later) while the run went on; the run
        # saves every ~5 s and keeps 2 checkpoints, so each lives ~10 s on its nodes
        try:
            faults.wait_for(lambda: any(s >= 20 for s in head_complete_steps(run)) or proc.poll() is not None, 300,
                            "a complete checkpoint of step 20 or later on the head")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{log.read_text()[-1500:]}\nhead's train.log:\n{head_log(run)}") from None
        assert proc.poll() is None, log.read_text()[-3000:]
        status = json.loads(cluster.podman_exec(node, "cat", f"{RUNS}/{run}/ranks/rank-{rank}.json").stdout)
        assert status["end"] is None and status["host"] == node, status
        cluster.podman_exec(node, "kill", "-KILL", str(status["pid"]))
        took = faults.seconds_to_exit(proc, 180)  # from the kill
    finally:
        if proc.poll() is None:
            proc.kill()
    # the rank's death stops the run on every node within a minute, naming it; what the run wrote is kept
    text = " ".join(log.read_text().split())
    assert proc.returncode != 0 and took < 60, (took, text[-3000:])
    assert f"Failed node: {node}, rank {rank} (killed: no exit recorded, pid {status['pid']})" in text, text[-3000:]
    assert f"Every process of the run was stopped on {', '.join(nodes)} (none is left)" in text, text[-3000:]
    assert "restarts are off (max_restarts=0)" in text, text[-3000:]
    for n in nodes:
        assert cluster.processes_of(n, run) == [], (n, cluster.processes_of(n, run))
    out = tmp_path / run
    assert (out / "train.log").stat().st_size > 0 and (out / "job.json").is_file()
    kept = checkpoints.checkpoints(out)
    assert kept and all(checkpoints.verify(d) == [] for d in kept), [(d.name, checkpoints.verify(d)) for d in kept]
    newest = kept[-1]
    assert checkpoints.step_of(newest) >= 20 and checkpoints.marker(newest)["world_size"] == world
    shards = sorted(p.name for p in (newest / f"global_step{checkpoints.step_of(newest)}").glob("*optim_states.pt"))
    assert len(shards) == world, shards  # one per rank, from all three nodes
    before = progress(out / "progress.jsonl")
    step = checkpoints.step_of(newest)
    last_before = [r for r in before if r.get("step") == step and "loss" in r]

    # the resumed run's train.yml is interrupted like Ctrl-C (SIGINT to its process group) once it logs a step:
    # the run goes on on all three nodes, and -e attach= follows it to the end and brings the results back
    until = step + 40
    log2 = tmp_path / "resume.playbook.log"
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_ROLES_PATH=str(cluster.REPO / "roles"))
    proc = subprocess.Popen(["ansible-playbook", "-i", str(cluster.INVENTORY), "train.yml", "-e", f"resume={run}",
                             "-e", f"max_steps={until}", "-e", f"train_output_dir={tmp_path}",
                             "-e", "train_poll_seconds=2"], cwd=cluster.REPO, env=env, stdout=open(log2, "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        faults.wait_for(lambda: f"step {step + 5}/" in log2.read_text() or proc.poll() is not None, 400,
                        "the resumed run's first logged step")
        assert proc.poll() is None, log2.read_text()[-3000:]
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    said = " ".join(log2.read_text().split())
    assert f"resuming run {run} from step {step}" in said, said[-3000:]
    # until it saves a new one, the progress lines name the checkpoint the run resumed from
    assert re.search(rf"step {step + 5}/{until} \(\d+%\) \| loss [\d.]+ \| [^|]* \| elapsed [^|]* \| ETA [^|]* \| "
                     rf"last checkpoint: step {step}\b", said), said[-3000:]
    assert "User interrupted execution" in said and f"ansible-playbook train.yml -e attach={run}" in said, said[-3000:]
    # the checkpoint went from the controller to the head only, then on as a tree (roles/train_stage tree.yml):
    # worker-2's copy came from worker-1 (the rsync's log is on worker-1, none on the head), and every node's copy
    # verified against the head's MANIFEST (each node's stamp of its passed check names the same MANIFEST)
    shown = said.split(f"Show the copies round by round (source -> destination) - {newest.name}", 1)[1]
    shown = shown.split("TASK [", 1)[0]
    assert "round 1 of 2: head-1 -> worker-1" in shown and "round 2 of 2: worker-1 -> worker-2 (else head-1)" in \
        shown, shown
    assert re.search(r"worker-2: copied \d+ files, [\d.]+ MB in \d+s from worker-1", said), said[-3000:]
    sent = cluster.podman_exec("worker-1", "cat", f"{RUNS}/{run}/copy-checkpoint-worker-2.log").stdout
    assert re.search(rf"\|\d+\|global_step{step}/", sent), sent  # rsync --log-file lines: itemized|length|name
    assert cluster.podman_exec("head-1", "test", "-e", f"{RUNS}/{run}/copy-checkpoint-worker-2.log",
                               check=False).returncode != 0
    stamps = {n: json.loads(cluster.podman_exec(n, "cat", f"{RUNS}/{run}/output/.{newest.name}.verified.json").stdout)
              for n in nodes}
    assert len({v["manifest_sha256"] for v in stamps.values()}) == 1, stamps
    assert all("MANIFEST" not in v["files"] and checkpoints.MARKER in v["files"]
               and sum(k.startswith(f"global_step{step}/") for k in v["files"]) >= world for v in stamps.values()), \
        stamps
    going = {n: cluster.processes_of(n, run) for n in nodes}
    assert all(going.values()), going  # the run goes on without its playbook, on every node
    res = cluster.playbook("train.yml", "-e", f"attach={run}", "-e", f"train_output_dir={tmp_path}",
                           "-e", "train_poll_seconds=2")
    said = " ".join(res.stdout.split())
    assert res.returncode == 0, said[-3000:]
    assert f"re-attached to run {run} on head-1, worker-1, worker-2" in said, said[-3000:]
    assert json.loads((out / "metrics.json").read_text())["steps"] == until
    after = [r for r in progress(out / "progress.jsonl") if "loss" in r]
    assert after[0]["step"] == step + 5 and after[-1]["step"] == until, [r["step"] for r in after]
    if last_before:  # the loss goes on where it was (tiny batches: within 0.6), not from the start (~8.7)
        assert abs(after[0]["loss"] - last_before[-1]["loss"]) < 0.6, (last_before[-1], after[0])
    assert after[0]["loss"] < before[0]["loss"] - 1.0, (before[0], after[0])
    final = out / f"checkpoint-{until}"
    assert checkpoints.verify(final) == [] and checkpoints.marker(final)["world_size"] == world
    assert [d.name for d in checkpoints.checkpoints(out)][-1] == final.name
    assert (out / "attempt-1" / "train.log").is_file() and (out / "attempt-1" / "hostfile").is_file()
    for n in nodes:
        assert cluster.processes_of(n, run) == [], n
    # an ended run has nothing to attach to; a resume must be the same model
    again = cluster.playbook("train.yml", "-e", f"attach={run}", "-e", f"train_output_dir={tmp_path}")
    assert again.returncode != 0 and "has no launcher job" in again.stdout, again.stdout[-2000:]
    refused = cluster.playbook("train.yml", "-e", f"resume={run}", "-e", "model=gpt2",
                               "-e", f"train_output_dir={tmp_path}")
    assert refused.returncode != 0 and f"model gpt2 is not run {run}'s model bert" in refused.stdout, \
        refused.stdout[-2000:]


def test_a_worker_stopped_mid_run_is_left_out_and_the_run_goes_on_by_itself_on_the_others(tmp_path):
    """The restart policy's defaults: worker-2's container stopped (`podman stop -t 0`: its processes killed, its
    address gone) once the head holds a complete checkpoint of step 20 or later. The same train.yml ends with exit
    0: the liveness check took worker-2 for dead, the run was stopped on the others, and it went on by itself from
    its newest complete checkpoint on head-1 and worker-1 (world size 3 -> 2, the global batch 48 kept through
    DeepSpeed's universal checkpoint), the loss going on where it was; the fault, the seconds to notice it and to
    train again, and the steps lost are in the summary, metrics.json and progress.jsonl."""
    nodes, slots = cluster.inventory()
    node = "worker-2"
    others = [n for n in nodes if n != node]
    world, fewer = sum(slots.values()), sum(slots[n] for n in others)
    run = f"restart-{int(time.time())}"
    until = 90
    proc, log = faults.start_run(run, tmp_path, "-e", f"max_steps={until}", "-e", "save_steps=10",
                                 "-e", "logging_steps=5", "-e", "warmup_steps=2",
                                 "-e", "gradient_accumulation_steps=2")  # global batch 8 x 2 x 3: kept on 2 ranks
    stopped = False
    try:
        try:
            faults.wait_for(lambda: any(s >= 20 for s in head_complete_steps(run)) or proc.poll() is not None, 300,
                            "a complete checkpoint of step 20 or later on the head")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{log.read_text()[-1500:]}\nhead's train.log:\n{head_log(run)}") from None
        assert proc.poll() is None, log.read_text()[-3000:]
        subprocess.run(["podman", "stop", "-t", "0", f"dsc-{node}"], check=True, capture_output=True, text=True)
        stopped = True
        t0 = time.monotonic()
        faults.wait_for(lambda: "restart 1 of 3" in log.read_text() or proc.poll() is not None, 120,
                        "the restart's progress line")
        noticed = time.monotonic() - t0
        took = faults.seconds_to_exit(proc, 900)
    finally:
        if proc.poll() is None:
            proc.kill()
        if stopped:
            faults.bring_back(node, "stop")
    text = " ".join(log.read_text().split())
    print(f"restart line {noticed:.0f} s after {node} was stopped; train.yml ended {took:.0f} s after that")
    assert proc.returncode == 0, text[-4000:]
    # the liveness check's numbers when it took worker-2 for dead; none when pdsh's ssh to it ended the launcher first
    said = re.search(rf"fault: {node} did not answer(?: \(\d+ checks in \d+ s\))? — restart 1 of 3 from "
                     rf"checkpoint-(\d+) on {', '.join(others)} \(world size {world} -> {fewer}\); {node} left out",
                     text)
    assert said, text[-4000:]
    step = int(said.group(1))
    assert step >= 20 and f"resuming run {run} from step {step}" in text, text[-4000:]
    assert f"world size {world} -> {fewer}: the global batch 48 is kept (accumulation 2 -> 3)" in text, text[-4000:]
    out = tmp_path / run
    m = json.loads((out / "metrics.json").read_text())
    assert m["steps"] == until and m["world_size"] == fewer and m["global_batch_size"] == 48, m
    [a] = m["attempts"]
    assert (a["fault"]["kind"], a["fault"]["node"], a["checkpoint_step"]) == ("node_lost", node, step), a
    assert a["next_nodes"] == others and 0 < a["recover_s"] < 600, a
    assert a["detect_s"] is None or 0 < a["detect_s"] < 60, a
    assert a["steps_lost"] == a["fault"]["step"] - step >= 0, a
    print(f"fault -> noticed {a['detect_s']} s, noticed -> training again {a['recover_s']:.0f} s, "
          f"{a['steps_lost']} steps lost")
    assert re.search(rf"fault 1 node_lost of {node} at step \d+(; noticed in \d+ s)?, training again \d+ s later; "
                     rf"from checkpoint-{step}", text), text[-4000:]
    events = [r for r in progress(out / "progress.jsonl") if "event" in r]
    assert [e["event"] for e in events if e["event"] in ("restart", "recovered")] == ["restart", "recovered"], events
    # the ranks loaded the universal checkpoint the head converted, and the loss went on where it was
    assert "load_hp_checkpoint_state_from_checkpoint_dir" in (out / "train.log").read_text()
    before = [r for r in progress(out / "attempt-1" / "progress.jsonl") if "loss" in r]
    after = [r for r in progress(out / "progress.jsonl") if "loss" in r]
    at = [r for r in before if r["step"] == step]
    assert after[0]["step"] == step + 5 and after[-1]["step"] == until, [r["step"] for r in after]
    if at:
        assert abs(after[0]["loss"] - at[-1]["loss"]) < 0.6, (at[-1], after[0])
    assert after[0]["loss"] < before[0]["loss"] - 1.0, (before[0], after[0])
    final = out / f"checkpoint-{until}"
    assert checkpoints.verify(final) == [] and checkpoints.marker(final)["world_size"] == fewer
    for n in others:
        assert cluster.processes_of(n, run) == [], n


def test_checkpoints_the_head_cannot_gather_fail_the_run_and_attach_brings_them_back(tmp_path):
    """-e launcher=ansible (the nodes start their own ranks: no ssh from the head is needed to train) with another
    ssh host key for worker-1 in the head's known_hosts: the run trains to its end, but the head cannot pull
    worker-1's part of the checkpoints.
    train.yml does not end with exit 0 and "finished": it says what is missing, where it still is and how to fetch
    it. With the key restored, -e attach= gathers it and brings it back whole, owned by the user who ran the playbook
    (worker-1's files were written by another uid)."""
    nodes, slots = cluster.inventory()
    world = sum(slots.values())
    node = "worker-1"
    rank = sum(slots[n] for n in nodes[: nodes.index(node)])
    run = f"ungathered-{int(time.time())}"
    with cluster.head_trusts_another_key(node):
        res = cluster.playbook("train.yml", "-e", "launcher=ansible", "-e", "model=bert", "-e", "model_size=tiny",
                               "-e", "max_steps=10", "-e", "save_steps=10", "-e", "warmup_steps=2",
                               "-e", f"run_name={run}", "-e", f"train_output_dir={tmp_path}",
                               "-e", "train_poll_seconds=2")
        said = " ".join(res.stdout.split())
        assert res.returncode != 0, said[-3000:]
        assert f"run {run} trained to its end, but the head head-1 could not gather every node's part of " \
               f"checkpoint-10, so it did not come back to {tmp_path / run}" in said, said[-3000:]
        assert f"no optimizer shard of rank {rank} in global_step10/" in said, said[-3000:]
        assert f"{node}: {node}'s ssh host key is not the one the head trusts" in said, said[-3000:]
        assert f"each node still holds its part in {RUNS}/{run}/output/checkpoint-10/ (head-1 (rank 0), " \
               f"{node} (rank {rank})" in said, said[-3000:]
        assert f"ansible-playbook train.yml -e attach={run} gathers it on the head" in said, said[-3000:]
        assert "run failed" not in said, said[-3000:]
        out = tmp_path / run
        assert json.loads((out / "metrics.json").read_text())["steps"] == 10  # the rest came back
        assert not (out / "checkpoint-10").exists()
        assert json.loads((out / "ungathered.json").read_text())["incomplete"]["checkpoint-10"]
        # worker-1's part as a non-root node user would have left it: files of another uid
        cluster.podman_exec(node, "chown", "-R", "4242:4242", f"{RUNS}/{run}/output/checkpoint-10")
    again = cluster.playbook("train.yml", "-e", f"attach={run}", "-e", f"train_output_dir={tmp_path}")
    said = " ".join(again.stdout.split())
    assert again.returncode == 0, said[-3000:]
    assert f"run {run} has ended; its train.yml could not gather checkpoint-10 on head-1: gathering again" in said, \
        said[-3000:]
    ckpt = out / "checkpoint-10"
    assert checkpoints.verify(ckpt) == [] and checkpoints.marker(ckpt)["world_size"] == world, checkpoints.verify(ckpt)
    assert not (out / "ungathered.json").exists()
    mine = {os.getuid()}
    uids = {p.name: p.stat().st_uid for p in ckpt.rglob("*")}
    assert set(uids.values()) == mine, uids
    owners = cluster.podman_exec("head-1", "sh", "-c", f"find {RUNS}/{run}/output -printf '%u\\n' | sort -u").stdout
    assert owners.split() == ["root"], owners  # the head's user (the inventory's ansible_user)
    assert re.search(r"checkpoints\s+1 kept: checkpoint-10", again.stdout), again.stdout[-2000:]


def test_a_slurm_job_near_its_time_limit_saves_and_stops_and_resume_goes_on(tmp_path):
    """-e launcher=slurm with a 3-minute time limit and Slurm's signal 150 s before it (sbatch --signal=USR1@150:
    Slurm sends it 30-60 s into the job): every rank saves a checkpoint at the same step and the run stops, long
    before its 5000 steps and before Slurm would kill it; Slurm records the job COMPLETED, not TIMEOUT; train.yml
    says how to go on, and -e resume= (a new job, without the signal) continues from that checkpoint to the end."""
    nodes, slots = cluster.inventory()
    world = sum(slots.values())
    run = f"timelimit-{int(time.time())}"
    res = cluster.playbook("train.yml", "-e", "launcher=slurm", "-e", "model=bert", "-e", "model_size=tiny",
                           "-e", "max_steps=5000", "-e", "logging_steps=5", "-e", "save_steps=5000",
                           "-e", "warmup_steps=2", "-e", "train_slurm_time_limit=3", "-e", "train_slurm_signal_s=150",
                           "-e", f"run_name={run}", "-e", f"train_output_dir={tmp_path}", "-e", "train_poll_seconds=2")
    said = " ".join(res.stdout.split())
    assert res.returncode == 0, said[-3000:]
    m = re.search(r"stopping at step (\d+) of 5000 before the Slurm job's time limit: every rank saves "
                  rf"checkpoint-\1 first; go on with ansible-playbook train.yml -e resume={run}", said)
    assert m, said[-3000:]
    step = int(m.group(1))
    assert f"run {run}: stopped at step {step} before the Slurm job's time limit, its checkpoint saved; go on with " \
           f"ansible-playbook train.yml -e resume={run}" in said, said[-3000:]
    out = tmp_path / run
    assert json.loads((out / "metrics.json").read_text())["steps"] == step
    ckpt = out / f"checkpoint-{step}"
    assert checkpoints.verify(ckpt) == [] and checkpoints.marker(ckpt)["world_size"] == world, checkpoints.verify(ckpt)
    record = [line for line in cluster.podman_exec("head-1", "cat", "/var/log/slurm/jobcomp.log").stdout.splitlines()
              if f" Name={run} " in line]
    assert len(record) == 1 and "JobState=COMPLETED" in record[0], record
    # the signal reached every node's slurm-node.sh, which wrote the request on its own disk
    for n in nodes:
        assert cluster.podman_exec(n, "test", "-s", f"{RUNS}/{run}/stop-requested", check=False).returncode == 0, n
    until = step + 10
    res = cluster.playbook("train.yml", "-e", f"resume={run}", "-e", f"max_steps={until}", "-e", "launcher=slurm",
                           "-e", "train_slurm_signal_s=0", "-e", f"train_output_dir={tmp_path}",
                           "-e", "train_poll_seconds=2")
    said = " ".join(res.stdout.split())
    assert res.returncode == 0, said[-3000:]
    assert f"resuming run {run} from step {step}" in said and "stopping at step" not in said, said[-3000:]
    assert json.loads((out / "metrics.json").read_text())["steps"] == until
    assert checkpoints.verify(out / f"checkpoint-{until}") == []


def test_a_slurm_job_whose_heads_sbatch_was_killed_is_re_attached_through_slurm(tmp_path):
    """-e launcher=slurm: the head's `sbatch --wait` (what train.yml's async launch task runs) is SIGKILLed while the
    job trains, as a restarted head or an ended login session loses it, and train.yml is interrupted (Ctrl-C): the job
    goes on in Slurm, and -e attach= follows it through squeue to its end and Slurm's record of it (COMPLETED), then
    brings the results back -- it does not take the killed sbatch's status for the run's."""
    nodes, _ = cluster.inventory()
    run = f"reattach-{int(time.time())}"
    proc, log = faults.start_run(run, tmp_path, "-e", "launcher=slurm", "-e", "max_steps=60", "-e", "logging_steps=5",
                                 "-e", "save_steps=30", "-e", "warmup_steps=2")
    try:
        faults.wait_for(lambda: "step 5/60" in log.read_text() or proc.poll() is not None, 300,
                        "the run's first logged step")
        assert proc.poll() is None, log.read_text()[-3000:]
        killed = cluster.podman_exec("head-1", "pkill", "-KILL", "-f", f"sbatch --wait --job-name={run} ", check=False)
        assert killed.returncode == 0, "no sbatch --wait of the run on head-1"
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    listed = cluster.podman_exec("head-1", "squeue", "--noheader", f"--name={run}", "--format=%T").stdout.split()
    assert listed in (["RUNNING"], ["COMPLETING"], []), listed  # Slurm's job outlived the head's sbatch
    res = cluster.playbook("train.yml", "-e", f"attach={run}", "-e", f"train_output_dir={tmp_path}",
                           "-e", "train_poll_seconds=2")
    said = " ".join(res.stdout.split())
    assert res.returncode == 0, said[-3000:]
    assert f"re-attached to run {run} on {', '.join(nodes)} (its Slurm job is followed through squeue" in said, \
        said[-3000:]
    assert re.search(r"Slurm's record of job \d+: COMPLETED \(exit code 0:0\)", said), said[-3000:]
    out = tmp_path / run
    assert json.loads((out / "metrics.json").read_text())["steps"] == 60
    assert checkpoints.verify(out / "checkpoint-60") == []
    record = [line for line in cluster.podman_exec("head-1", "cat", "/var/log/slurm/jobcomp.log").stdout.splitlines()
              if f" Name={run} " in line]
    assert len(record) == 1 and "JobState=COMPLETED" in record[0], record
    for n in nodes:
        assert cluster.processes_of(n, run) == [], n

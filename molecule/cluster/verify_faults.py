"""Faults on the multi-node scenario (molecule/cluster/run.sh verify, after verify.py): real processes killed on
real nodes while train.yml follows the run. Shares the cluster and the prepared data with verify.py; short runs.
"""
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
import verify as cluster  # the scenario's helpers (pytest puts this directory on sys.path: no __init__.py)

RUNS = cluster.RUNS


def start_playbook(name, out_dir, *args):
    """ansible-playbook train.yml ARGS in the background, its output in <out_dir>/<name>.playbook.log."""
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_ROLES_PATH=str(cluster.REPO / "roles"))
    log = out_dir / f"{name}.playbook.log"
    proc = subprocess.Popen(["ansible-playbook", "-i", str(cluster.INVENTORY), "train.yml", *args], cwd=cluster.REPO,
                            env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group: os.killpg(proc.pid, SIGINT) is Ctrl-C
    return proc, log


def start_run(run, out_dir, *extra):
    """A tiny bert run long enough to be interrupted (5000 steps), polled every 2 s."""
    return start_playbook(run, out_dir, "-e", "model=bert", "-e", "model_size=tiny", "-e", "max_steps=5000", "-e",
                          f"run_name={run}", "-e", f"train_output_dir={out_dir}", "-e", "train_poll_seconds=2", *extra)


def seconds_to_exit(proc, timeout):
    """Wait for ``proc`` to end (at most ``timeout`` s, else subprocess.TimeoutExpired); the seconds it took."""
    t0 = time.monotonic()
    proc.wait(timeout=timeout)
    return time.monotonic() - t0


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def sshd_answers(address, port):
    """True when an ssh server at ``address``:``port`` sends its banner within 3 s (from this machine)."""
    try:
        with socket.create_connection((address, port), timeout=3) as s:
            s.settimeout(3)
            return s.recv(4) == b"SSH-"
    except OSError:
        return False


def bring_back(node, how):
    """Undo ``podman stop`` (start the container again: its command starts sshd) or ``podman pause`` (unpause);
    wait until the head logs in to the node again and the controller reaches its sshd (a restarted container has a
    new MAC address: this machine's stale neighbour entry takes a while to go)."""
    subprocess.run(["podman", "start" if how == "stop" else "unpause", f"dsc-{node}"], check=True,
                   capture_output=True, text=True)
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", node, "true"]
    wait_for(lambda: cluster.podman_exec("head-1", *ssh, check=False).returncode == 0, 120, f"ssh to {node} again")
    if how == "stop":
        # a container has no init: start what a node's boot starts (the slurm role's services, enabled there),
        # and wait until Slurm takes the node back (ReturnToService=2)
        cluster.podman_exec(node, "sh", "-c", "service munge start && service slurmd start")
        wait_for(lambda: re.search(r"State=IDLE\s", cluster.podman_exec("head-1", "scontrol", "show", "node", node,
                                                                        check=False).stdout), 120,
                 f"Slurm to take {node} back")
    hosts = yaml.safe_load((cluster.INVENTORY / "hosts.yml").read_text())["all"]["children"]
    me = {**hosts["head"]["hosts"], **hosts["workers"]["hosts"]}[node]
    wait_for(lambda: sshd_answers(me["ansible_host"], int(me.get("ansible_port", 22))), 120,
             f"{node}'s sshd from the controller")


@pytest.mark.parametrize("how", ["pause"])
def test_a_worker_lost_mid_run_is_named_unreachable_and_the_run_stops_on_the_others(tmp_path, how):
    """worker-2's container paused (`podman pause`: its processes frozen, its kernel still takes TCP, nothing says
    it is gone: the others' next collective would wait for torch's 30-minute timeout) after the first logged step,
    before any checkpoint (so no restart: verify_resume.py has a worker stopped after one): train.yml fails within 60 s naming
    worker-2 as unreachable and the rank it held, no process of the run is left on head-1 and worker-1 (ps), the
    partial run is kept. worker-2 is brought back after; a paused one's ranks are then stopped with -e stop=."""
    nodes, slots = cluster.inventory()
    node = "worker-2"
    first = sum(slots[n] for n in nodes[: nodes.index(node)])
    held = ", ".join(str(r) for r in range(first, first + slots[node]))
    others = [n for n in nodes if n != node]
    run = f"lost-{how}-{int(time.time())}"
    proc, log = start_run(run, tmp_path)
    lost = False
    try:
        wait_for(lambda: "step 1/" in log.read_text() or proc.poll() is not None, 300, "the first logged step")
        assert proc.poll() is None, log.read_text()[-3000:]
        cmd = ["podman", "stop", "-t", "0", f"dsc-{node}"] if how == "stop" else ["podman", "pause", f"dsc-{node}"]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        lost = True
        took = seconds_to_exit(proc, 300)
        left = {n: cluster.processes_of(n, run) for n in others}
        if how == "pause":  # -e stop while the node is still away: the others are looked at, the node is named
            t1 = time.monotonic()
            away = cluster.playbook("train.yml", "-e", f"stop={run}")
            away_took = time.monotonic() - t1
    finally:
        if proc.poll() is None:
            proc.kill()
        if lost:
            bring_back(node, how)
    text = " ".join(log.read_text().split())
    print(f"train.yml ended {took:.1f} s after {node} was lost ({how})")
    assert proc.returncode != 0, text[-3000:]
    assert took < 60, (took, text[-3000:])
    assert f"Failed node: {node} (unreachable: it held rank{'s' if slots[node] > 1 else ''} {held})" in text, \
        text[-3000:]
    assert f"Every process of the run was stopped on {', '.join(others)} (none is left)" in text, text[-3000:]
    assert f"{node} did not answer from {nodes[0]}" in text and f"-e stop={run}" in text, text[-3000:]
    assert "not retried: " in text and "has no complete checkpoint yet" in text, text[-3000:]
    assert left == {n: [] for n in others}, left
    kept = tmp_path / run
    assert (kept / "train.log").stat().st_size > 0 and (kept / "job.json").is_file()
    # the failure's message ends with what came back to go on from: the complete checkpoints and the command
    saved = sorted((d.name for d in kept.glob("checkpoint-*") if d.is_dir()), key=lambda n: int(n.split("-")[1]))
    if saved:
        assert (f", with its complete checkpoints ({', '.join(saved)}); to go on from the newest: ansible-playbook "
                f"train.yml -e resume={run}") in text, (saved, text[-3000:])
    else:
        assert "; it had saved no complete checkpoint, so it can only start again" in text, text[-3000:]
    if how == "pause":
        assert "liveness check: worker-2 did not answer" in text, text[-3000:]  # no error line said it: the check
        said = " ".join(away.stdout.split())
        print(f"-e stop with {node} paused took {away_took:.1f} s")
        assert away.returncode != 0 and away_took < 90, (away_took, said[-3000:])
        assert f"no process of it is left on {', '.join(others)}" in said, said[-3000:]
        assert f"run {run}: {node} could not be reached over ssh" in said, said[-3000:]
        back = cluster.playbook("train.yml", "-e", f"stop={run}")  # back: what the paused node still ran is ended
        assert back.returncode == 0, back.stdout[-3000:]
    assert cluster.processes_of(node, run) == []


def test_of_two_runs_started_together_one_trains_a_later_one_is_refused_and_stop_ends_it_everywhere(tmp_path):
    """Runs A and B (Slurm jobs: -e launcher=slurm) started in the same second by two train.yml, each with its own
    output directory (two controllers, two users' shells): exactly one trains, the other is refused before anything
    is staged, naming it (its claim on the cluster: with -e attach= and -e stop=), not blaming a firewall. While the
    winner trains, run C is refused naming it too. `train.yml -e stop=<winner>` prints no warning, names every node
    the run was on, cancels its job (Slurm records it CANCELLED, none is left in the queue) and stops it on every node
    (no process of it left); the winner's own train.yml ends with the one line that says it was stopped (no
    'training exited', no FAILED summary before it), its run kept."""
    nodes, _ = cluster.inventory()
    stamp = int(time.time())
    runs = {f"pair-a-{stamp}": tmp_path / "ctl-a", f"pair-b-{stamp}": tmp_path / "ctl-b"}
    for out in runs.values():
        out.mkdir()
    started = {run: start_run(run, out, "-e", "launcher=slurm") for run, out in runs.items()}
    try:
        wait_for(lambda: any(p.poll() is not None for p, _ in started.values()), 300, "one of the two to end")
        ended = [run for run, (p, _) in started.items() if p.poll() is not None]
        assert len(ended) == 1, {run: log.read_text()[-3000:] for run, (_, log) in started.items()}
        loser = ended[0]
        winner = next(run for run in runs if run != loser)
        proc, log = started[winner]
        refused = " ".join(started[loser][1].read_text().split())
        assert started[loser][0].returncode != 0, refused[-3000:]
        assert f"host {nodes[0]} (head): run {winner} claimed this cluster at 20" in refused, refused[-3000:]
        assert f"ansible-playbook train.yml -e attach={winner} follows it" in refused, refused[-3000:]
        assert f"ansible-playbook train.yml -e stop={winner}" in refused, refused[-3000:]
        assert f"Nothing was staged or launched for run {loser}" in refused and "firewall" not in refused
        assert "Launch deepspeed" not in refused and "Stage the code" not in refused
        assert not (runs[loser] / loser).exists()
        wait_for(lambda: "step 1/" in log.read_text() or proc.poll() is not None, 300, "the winner's first step")
        assert proc.poll() is None, log.read_text()[-3000:]

        run_c = f"pair-c-{stamp}"
        # refused at the preflight, before anything is staged (asserted below); no time bound: under CI's load the
        # refusal took 80 s once, 23 s on a quiet machine
        c = cluster.playbook("train.yml", "-e", "model=bert", "-e", "model_size=tiny", "-e", "max_steps=30", "-e",
                             f"run_name={run_c}", "-e", f"train_output_dir={tmp_path}")
        text = " ".join(c.stdout.split())
        assert c.returncode != 0, text[-3000:]
        for n in nodes:
            assert f"host {n}: run {winner} is still running there" in text, (n, text[-3000:])
        assert f"ansible-playbook train.yml -e stop={winner}" in text
        assert f"ansible-playbook train.yml -e attach={winner} follows it" in text, text[-3000:]
        assert "Launch deepspeed" not in c.stdout and "Stage the code" not in c.stdout
        assert not (tmp_path / run_c).exists()

        s = cluster.playbook("train.yml", "-e", f"stop={winner}")
        text = " ".join(s.stdout.split())
        assert s.returncode == 0, text[-3000:]
        assert "[WARNING]" not in s.stdout, s.stdout[-5000:]
        # every node held ranks of the run when the stop read them (before scancel): the same list every time
        assert f"run {winner}: stopped on {', '.join(nodes)}; no process of it is left on {', '.join(nodes)}" in text, \
            text[-3000:]
        proc.wait(timeout=120)
    finally:
        for p, _ in started.values():
            if p.poll() is None:
                p.kill()
        # a failure above must not leave its Slurm job training: every later test would be refused "one run at a time"
        for run in runs:
            cluster.playbook("train.yml", "-e", f"stop={run}")
    assert proc.returncode != 0
    # the winner's own train.yml says once that it was stopped on request (when and by what), and how to go on
    said = " ".join(log.read_text().split())
    assert f"run {winner} was stopped (ansible-playbook train.yml -e stop={winner}, at 20" in said, said[-3000:]
    assert f"run {winner}: stopped (ansible-playbook train.yml -e stop={winner}), what came back" in said, said[-3000:]
    assert f"run {winner} failed" not in said and "Failed node" not in said, said[-3000:]
    assert "training exited with status" not in said and "FAILED, what came back" not in said, said[-3000:]
    for n in nodes:
        assert cluster.processes_of(n, winner) == [], (n, cluster.processes_of(n, winner))
    assert cluster.podman_exec(nodes[0], "squeue", "--noheader", f"--name={winner}").stdout.strip() == ""
    record = [line for line in cluster.podman_exec(nodes[0], "cat", "/var/log/slurm/jobcomp.log").stdout.splitlines()
              if f" Name={winner} " in line]
    assert len(record) == 1 and "JobState=CANCELLED" in record[0], record
    kept = runs[winner] / winner / "train.log"
    assert kept.is_file() and kept.stat().st_size > 0, said[-4000:]
    unknown = cluster.playbook("train.yml", "-e", "stop=no-such-run")
    assert unknown.returncode != 0
    assert "there is no run no-such-run on head-1" in " ".join(unknown.stdout.split())


def test_ranks_that_die_at_start_on_one_node_stop_the_run_within_a_minute(tmp_path):
    """A user script whose ranks on worker-2 die at start (a file they need is missing there): the other ranks would
    wait in the rendezvous for torch's 30-minute timeout; train.yml stops the run everywhere within 60 s of the
    death and shows worker-2's error. The minute counts from the moment the rank died (it writes the time first, on
    the node's clock, which is this machine's: containers share it), not from the launch: how long Python and
    ``import deepspeed`` take to start on a loaded 2-core machine is not train.yml's reaction."""
    nodes, _ = cluster.inventory()
    script = tmp_path / "dies_on_worker2.py"
    run = f"dies-{int(time.time())}"
    died = f"/tmp/{run}.died"
    script.write_text(
        "import socket, time\n"
        "import deepspeed\n"
        "if socket.gethostname() == 'worker-2':\n"
        f"    open({died!r}, 'a').write('%f\\n' % time.time())\n"
        "    open('/srv/dataset-only-on-the-others/part-0.txt')\n"
        "deepspeed.init_distributed()\n"
        "time.sleep(600)\n")
    proc, log = start_playbook(run, tmp_path, "-e", f"script={script}", "-e", f"run_name={run}", "-e",
                               f"train_output_dir={tmp_path}", "-e", "train_poll_seconds=2")
    try:
        wait_for(lambda: "Follow the training" in log.read_text() or proc.poll() is not None, 300, "the launch")
        seconds_to_exit(proc, 300)
        ended = time.time()
    finally:
        if proc.poll() is None:
            proc.kill()
    text = " ".join(log.read_text().split())
    assert proc.returncode != 0, text[-3000:]
    deaths = cluster.podman_exec("worker-2", "cat", died).stdout.split()
    assert deaths, text[-3000:]  # the first rank there to die wrote its time (the launcher may kill the others first)
    took = ended - min(float(t) for t in deaths)
    assert 0 < took < 60, (took, text[-3000:])
    assert "Failed node: worker-2, rank" in text, text[-3000:]
    assert "FileNotFoundError" in text and "/srv/dataset-only-on-the-others/part-0.txt" in text, text[-3000:]
    for n in nodes:
        assert cluster.processes_of(n, run) == [], (n, cluster.processes_of(n, run))


def test_a_slurm_job_whose_rank_fails_names_the_node_the_rank_and_slurms_record(tmp_path):
    """-e launcher=slurm with a user script whose rank on worker-2 ends with an error at start: srun ends the job
    (--kill-on-bad-exit), and train.yml's error names worker-2 and its rank with the rank's error, and Slurm's own
    record of the job (FAILED, its reason and exit code, read with scontrol before train.yml's stop could make it
    CANCELLED); nothing of the run is left on any node; the job-completion log says FAILED."""
    nodes, _ = cluster.inventory()
    script = tmp_path / "fails_on_worker2.py"
    run = f"slurm-fails-{int(time.time())}"
    script.write_text(
        "import socket\n"
        "if socket.gethostname() == 'worker-2':\n"
        "    raise ValueError('this rank cannot start on worker-2')\n"
        "import deepspeed\n"
        "deepspeed.init_distributed()\n"
        "import time\n"
        "time.sleep(600)\n")
    res = cluster.playbook("train.yml", "-e", "launcher=slurm", "-e", f"script={script}", "-e", f"run_name={run}",
                           "-e", f"train_output_dir={tmp_path}", "-e", "train_poll_seconds=2")
    text = " ".join(res.stdout.split())
    assert res.returncode != 0, text[-3000:]
    assert f"run {run} failed: " in text and "Failed node: worker-2, rank" in text, text[-3000:]
    assert "ValueError: this rank cannot start on worker-2" in text, text[-3000:]
    job = re.search(rf"Slurm's record of job (\d+) \({re.escape(run)}\): FAILED \(NonZeroExitCode; exit code "
                    r"[1-9]\d*:0\) on head-1,worker-\[1-2\]: a task of the job ended with an error", text)
    assert job, text[-3000:]
    for n in nodes:
        assert cluster.processes_of(n, run) == [], (n, cluster.processes_of(n, run))
        # nor the variables passed from the admin's shell (run.sh's HF_TOKEN): the failed run's nodes drop them too
        left = cluster.podman_exec(n, "ls", f"/opt/deepspeed-cluster/runs/{run}/passthrough.env", check=False)
        assert left.returncode != 0, (n, left.stdout)
    record = [line for line in cluster.podman_exec(nodes[0], "cat", "/var/log/slurm/jobcomp.log").stdout.splitlines()
              if f" Name={run} " in line]
    assert len(record) == 1 and f"JobId={job.group(1)} " in record[0] and "JobState=FAILED" in record[0], record


def test_a_slurm_node_set_down_mid_run_is_not_requeued_and_the_run_goes_on_from_its_checkpoint(tmp_path):
    """-e launcher=slurm; after the run's first checkpoint an admin sets worker-2 down (`scontrol update
    nodename=worker-2 state=down reason=...`). Slurm ends the job NODE_FAIL and does not requeue it (the job is
    submitted with --no-requeue: a requeued batch script trained from step 1 over the run's checkpoints, rotating them
    away); the shell names Slurm's action (NODE_FAIL, not requeued), the node and the reason; the restart policy
    (defaults) goes on in a new job from the newest complete checkpoint on head-1 and worker-1 (world size 3 -> 2),
    and the same train.yml ends with exit 0. The checkpoints made before are kept, and no attempt logged a step from
    1 again. worker-2 is given back to Slurm after."""
    nodes, _ = cluster.inventory()
    node, head = "worker-2", nodes[0]
    others = [n for n in nodes if n != node]
    run = f"slurm-down-{int(time.time())}"
    reason = f"dsc-test-{run[-6:]}"
    until = 60
    proc, log = start_playbook(run, tmp_path, "-e", "model=bert", "-e", "model_size=tiny", "-e", f"max_steps={until}",
                               "-e", f"run_name={run}", "-e", f"train_output_dir={tmp_path}", "-e",
                               "train_poll_seconds=2", "-e", "launcher=slurm", "-e", "save_steps=10", "-e",
                               "save_total_limit=100", "-e", "logging_steps=5", "-e", "warmup_steps=2",
                               "-e", "gradient_accumulation_steps=2")  # global batch 8 x 2 x 3: kept on 2 ranks
    output = f"{RUNS}/{run}/output"
    down = False
    try:
        wait_for(lambda: "saved checkpoint-" in log.read_text() or proc.poll() is not None, 420,
                 "the run's first checkpoint")
        assert proc.poll() is None, log.read_text()[-3000:]
        before = set(cluster.podman_exec(head, "sh", "-c", f"ls -d {output}/checkpoint-* 2>/dev/null | xargs -n1 "
                                                           "basename", check=False).stdout.split())
        assert before, log.read_text()[-3000:]
        job = cluster.podman_exec(head, "squeue", "--noheader", f"--name={run}", "--format=%i").stdout.strip()
        cluster.podman_exec(head, "scontrol", "update", f"nodename={node}", "state=down", f"reason={reason}")
        down = True
        t0 = time.monotonic()
        wait_for(lambda: "restart 1 of 3" in log.read_text() or proc.poll() is not None, 240,
                 "the restart's progress line")
        noticed = time.monotonic() - t0
        took = seconds_to_exit(proc, 600)
        record = cluster.podman_exec(head, "scontrol", "--oneliner", "show", "job", job, check=False).stdout
    finally:
        if proc.poll() is None:
            proc.kill()
        if down:
            cluster.podman_exec(head, "scontrol", "update", f"nodename={node}", "state=resume", check=False)
            wait_for(lambda: re.search(r"State=IDLE\s", cluster.podman_exec(head, "scontrol", "show", "node", node,
                                                                            check=False).stdout), 120,
                     f"Slurm to take {node} back")
    text = " ".join(log.read_text().split())
    print(f"restart line {noticed:.0f} s after {node} was set down in Slurm; train.yml ended {took:.0f} s after that")
    # Slurm's action, the node and the reason, read from Slurm
    # (the scenario's Slurm takes a node back as soon as its slurmd answers: ReturnToService=2)
    assert re.search(rf"Slurm's record of job {job}: NODE_FAIL \(NodeDown; exit code [\d:]+\); {node} (is|was) down "
                     rf"\(reason: {reason}, since 20[\d-]+T[\d:]+\)(, then returned to service)?; not requeued "
                     rf"\(submitted with --no-requeue\)", text), text[-4000:]
    assert "JobState=NODE_FAIL" in record and " Restarts=0 " in record, record  # never requeued
    said = re.search(rf"fault: Slurm took {node} for dead \(Slurm: NODE_FAIL, reason NodeDown; {node} down: "
                     rf"{reason}\) — restart 1 of 3 from checkpoint-(\d+) on {', '.join(others)} \(world size 3 -> "
                     rf"2\); {node} left out", text)
    assert said, text[-4000:]
    step = int(said.group(1))
    completions = [line for line in cluster.podman_exec(head, "cat", "/var/log/slurm/jobcomp.log").stdout.splitlines()
                   if f" Name={run} " in line]
    assert len(completions) == 2 and "JobState=NODE_FAIL" in completions[0] and \
        "JobState=COMPLETED" in completions[1], completions
    # the checkpoints made before are kept, on the head and in what came back
    on_head = set(cluster.podman_exec(head, "sh", "-c", f"ls -d {output}/checkpoint-* | xargs -n1 basename").stdout.split())
    assert before <= on_head, (before, on_head)
    out = tmp_path / run
    back = {p.name for p in [*out.glob("checkpoint-*"), *out.glob("attempt-*/checkpoint-*")]}
    assert before <= back, (before, back)
    # never trained from step 1 again: each attempt's logged steps go up, the second from the checkpoint on
    first = [r["step"] for r in map(json.loads, (out / "attempt-1" / "progress.jsonl").read_text().splitlines())
             if "loss" in r]
    second = [r["step"] for r in map(json.loads, (out / "progress.jsonl").read_text().splitlines()) if "loss" in r]
    assert first == sorted(set(first)) and second == sorted(set(second)), (first, second)
    assert second[0] > step >= 10 and second[-1] == until, (step, second)
    for n in nodes:
        assert cluster.processes_of(n, run) == [], (n, cluster.processes_of(n, run))
    assert proc.returncode == 0, text[-4000:]  # went on by itself to its end: the same train.yml succeeds


def test_a_worker_whose_cpu_is_throttled_is_named_as_the_straggler_while_the_run_goes_on(tmp_path):
    """worker-2's container gets 0.3 of a CPU (podman update --cpus) once the run logs its first steps: its ranks'
    own step times grow, the follower names worker-2 as the straggler while the run goes on, and the summary and
    metrics.json carry each node's median step time. The CPU is given back after the run."""
    run = f"straggler-{int(time.time())}"
    proc, log = start_playbook(run, tmp_path, "-e", "model=bert", "-e", "model_size=tiny", "-e", "max_steps=60", "-e",
                               "logging_steps=4", "-e", f"run_name={run}", "-e", f"train_output_dir={tmp_path}",
                               "-e", "train_poll_seconds=2", "-e", "save_steps=1000")
    try:
        wait_for(lambda: re.search(r"step \d+/60", log.read_text()), 600, "the first logged step")
        subprocess.run(["podman", "update", "--cpus", "0.3", "dsc-worker-2"], check=True, capture_output=True)
        proc.wait(timeout=900)
    finally:
        subprocess.run(["podman", "update", "--cpus", str(os.cpu_count()), "dsc-worker-2"], capture_output=True)
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    said = re.search(r"straggler: worker-2's ranks take ([\d.]+)x the median step time \(last 3 intervals", text)
    assert said and float(said.group(1)) > 1.2, text[-4000:]
    assert not re.search(r"straggler: worker-1's", text)  # (the head, which also runs the launcher, may be slow)
    # while the run went on: logged steps follow the line
    assert re.search(r"step \d+/60", text[said.end():].split("Summarise the run")[0]), text[-4000:]
    metrics = json.loads((tmp_path / run / "metrics.json").read_text())
    medians = metrics["node_step_s"]
    assert set(medians) == {"head-1", "worker-1", "worker-2"}, medians
    assert medians["worker-2"] > 1.2 * max(medians["head-1"], medians["worker-1"]), medians
    # the summary (Ansible may print it as a block or as one quoted string with \n in it)
    flat = " ".join(text.replace("\\n", "\n").replace("''", "'").split())
    row = re.search(r"step time head-1 [\d.]+ s, worker-1 [\d.]+ s, worker-2 [\d.]+ s \(each node's median of its "
                    r"ranks' own compute per step\); straggler: (.*?) end of run", flat)
    assert row and re.search(r"\bworker-2 \([\d.]+x the median\)", row.group(1)) and "worker-1" not in row.group(1), \
        flat[-3000:]
    records = [json.loads(line) for line in (tmp_path / run / "progress.jsonl").read_text().splitlines()]
    steps = [r for r in records if "step_s" in r]
    assert steps and all(sorted(r["step_s"]) == ["head-1", "worker-1", "worker-2"] for r in steps)


def test_a_rank_stopped_on_a_node_that_answers_is_caught_by_the_hang_watchdog_and_the_run_recovers(tmp_path):
    """worker-2's rank SIGSTOPped after the run's first checkpoint: its node answers ssh and its process lives, so
    the liveness check sees nothing and the others wait in their collective for gloo's 30 minutes. The hang watchdog
    (train_hang_floor_s=20, factor 3) fires within its bound: every rank's Python stack is captured first (the
    others' in their logs, which come back), the stopped rank is named with its state; the run is stopped and goes on
    by itself from its newest checkpoint without worker-2 (the restart policy's defaults), the same train.yml ending
    with exit 0."""
    nodes, slots = cluster.inventory()
    node = "worker-2"
    others = [n for n in nodes if n != node]
    rank = sum(slots[n] for n in nodes[: nodes.index(node)])
    run = f"hang-{int(time.time())}"
    until = 60
    proc, log = start_playbook(run, tmp_path, "-e", "model=bert", "-e", "model_size=tiny", "-e", f"max_steps={until}",
                               "-e", f"run_name={run}", "-e", f"train_output_dir={tmp_path}", "-e",
                               "train_poll_seconds=2", "-e", "save_steps=10", "-e", "logging_steps=5", "-e",
                               "warmup_steps=2", "-e", "gradient_accumulation_steps=2", "-e", "train_hang_floor_s=20",
                               "-e", "train_hang_factor=3")
    try:
        wait_for(lambda: "saved checkpoint-" in log.read_text() or proc.poll() is not None, 300,
                 "the run's first checkpoint")
        assert proc.poll() is None, log.read_text()[-3000:]
        status = json.loads(cluster.podman_exec(node, "cat", f"{RUNS}/{run}/ranks/rank-{rank}.json").stdout)
        cluster.podman_exec(node, "kill", "-STOP", str(status["pid"]))
        t0 = time.monotonic()
        wait_for(lambda: "capturing every rank's Python stack" in log.read_text() or proc.poll() is not None, 200,
                 "the hang watchdog")
        detected = time.monotonic() - t0
        wait_for(lambda: "restart 1 of 3" in log.read_text() or proc.poll() is not None, 200, "the restart line")
        restarted = time.monotonic() - t0
        took = seconds_to_exit(proc, 600)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = " ".join(log.read_text().split())
    print(f"the hang watchdog fired {detected:.1f} s and the restart line came {restarted:.1f} s after rank {rank} on "
          f"{node} was stopped; train.yml ended {took:.0f} s after that")
    caught = re.search(r"no new logged step for (\S+) \(the hang watchdog's bound: max\(train_hang_floor_s 20s, "
                       r"3 x the slowest logging interval seen \S+\) = (\S+)\): capturing every rank's Python stack",
                       text)
    assert caught, text[-4000:]
    assert f"rank {rank} on {node} wrote no stack: its process is stopped (state T)" in text, text[-4000:]
    assert "liveness check:" not in text.split("restart 1 of 3")[0], text[-4000:]  # the node answered throughout
    assert detected < 90, (detected, text[-3000:])  # the bound (20 s here) + a poll + the capture
    assert re.search(rf"fault: rank {rank} on {node} hung \(wrote no stack: its process is stopped \(state T\)\) — "
                     rf"restart 1 of 3 from checkpoint-\d+ on {', '.join(others)} \(world size 3 -> 2\); {node} left "
                     rf"out", text), text[-4000:]
    # every other rank's stack is in its log, brought back with the (first attempt of the) run
    out = tmp_path / run
    for n in others:
        first = sum(slots[m] for m in nodes[: nodes.index(n)])
        for r in range(first, first + slots[n]):
            logs = [*out.glob(f"attempt-1/logs/{n}.rank{r}.log"), *out.glob(f"logs/{n}.rank{r}.log")]
            assert any("most recent call first" in p.read_text() for p in logs), (n, r, logs)
    assert re.search(rf"run {run}: finished(\\n| )steps {until} of {until} \(world size 2;", text), text[-4000:]
    for n in nodes:
        assert cluster.processes_of(n, run) == [], (n, cluster.processes_of(n, run))
    assert proc.returncode == 0, text[-4000:]  # went on by itself to its end: the same train.yml succeeds

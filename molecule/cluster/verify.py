"""Verify of the multi-node scenario (molecule/cluster/run.sh): asserts on what the converge step really produced.

Run by `run.sh verify` (pytest) after `run.sh converge`, against the same containers and state directory.
"""
import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
from train.node.rank_status import run_of  # pytest.ini puts the repository on sys.path; one rule for a run's processes

_spec = importlib.util.spec_from_file_location(
    "slurm_allocation", REPO / "roles" / "train_launch" / "filter_plugins" / "slurm_allocation.py")
_slurm_allocation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_slurm_allocation)
slurm_min_node_cpus = _slurm_allocation.slurm_min_node_cpus
STATE = Path(os.environ.get("DSC_CLUSTER_STATE", "/var/tmp/dsc-cluster"))
INVENTORY = HERE / "inventory"
MODES = ["pdsh", "ansible"]
RUNS = "/opt/deepspeed-cluster/runs"  # <dsc_root>/runs on every node (inventory: dsc_root)


# the task of roles/train_stage tree.yml that shows the staging schedule of the prepared data
SHOW_DATA_COPIES = "TASK [train_stage : Show the copies round by round (source -> destination) - the prepared data"

def inventory():
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]
    groups = {g: list((hosts[g].get("hosts") or {}).keys()) for g in ("head", "workers")}
    default_slots = yaml.safe_load((INVENTORY / "group_vars" / "all.yml").read_text())["slots"]
    nodes = list(dict.fromkeys(groups["head"] + groups["workers"]))
    allhosts = {**(hosts["head"]["hosts"]), **(hosts["workers"]["hosts"])}
    slots = {n: int((allhosts[n] or {}).get("slots", default_slots)) for n in nodes}
    return nodes, slots


def run_dir(mode):
    runs = sorted((STATE / "outputs" / mode).glob("cluster-*"))
    assert runs, f"no run came back for launcher={mode} under {STATE / 'outputs' / mode}"
    return runs[-1]


def recap(text):
    """PLAY RECAP lines -> {host: {ok: n, changed: n, ...}} summed over every recap in the text."""
    out = {}
    for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", text, re.M):
        counts = out.setdefault(host, {})
        for k, v in re.findall(r"(\w+)=(\d+)", fields):
            counts[k] = counts.get(k, 0) + int(v)
    return out


def playbook(*args):
    """ansible-playbook -i the scenario's inventory ARGS from the repository; its output is also appended to
    STATE/verify-playbooks.log with the time each took and its slowest tasks (where the scenario's time goes)."""
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_ROLES_PATH=str(REPO / "roles"),
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks")
    t0 = time.monotonic()
    res = subprocess.run(["ansible-playbook", "-i", str(INVENTORY), *args], cwd=REPO, env=env,
                         capture_output=True, text=True)
    with open(STATE / "verify-playbooks.log", "a", encoding="utf-8") as log:
        log.write(f"== ansible-playbook {' '.join(args)}: rc {res.returncode}, {time.monotonic() - t0:.0f} s\n"
                  f"{res.stdout}{res.stderr}\n")
    return res


@pytest.mark.parametrize("mode", MODES)
def test_every_ranks_log_came_back_in_its_own_file(mode):
    """One log per rank on the controller (train.rank.bootstrap's tee on its node, collect.yml), named by its host and
    rank, holding that rank's own lines: worker-2's ranks' lines in worker-2's files."""
    out = run_dir(mode)
    m = json.loads((out / "metrics.json").read_text())
    expected = {f"{r['hostname']}.rank{r['rank']}.log": r for r in m["ranks"]}
    assert sorted(p.name for p in (out / "logs").iterdir()) == sorted(expected)
    assert {r["hostname"] for r in m["ranks"]} == set(inventory()[0])
    for name, r in expected.items():
        text = (out / "logs" / name).read_text()
        assert f"[rank {r['rank']}/{m['world_size']}] host={r['hostname']} " in text, (name, text[-2000:])
        assert not re.search(rf"\[rank (?!{r['rank']}/)\d+/\d+\] host=", text), name


@pytest.mark.parametrize("mode", MODES)
def test_world_size_is_sum_of_slots_and_ranks_on_every_node(mode):
    nodes, slots = inventory()
    m = json.loads((run_dir(mode) / "metrics.json").read_text())
    assert m["world_size"] == sum(slots.values()) == m["trainer_world_size"]
    hosts = [r["hostname"] for r in m["ranks"]]
    assert len(hosts) == m["world_size"]
    # each node ran exactly its slots' worth of ranks (container host names are the inventory names)
    assert {h: hosts.count(h) for h in set(hosts)} == slots
    # and the ranks saw different data
    assert len({tuple(r["first_batches_sha256"]) for r in m["ranks"]}) == m["world_size"]


@pytest.mark.parametrize("mode", MODES)
def test_loss_fell(mode):
    m = json.loads((run_dir(mode) / "metrics.json").read_text())
    assert m["steps"] > 0
    assert m["last_loss"] < m["first_loss"], m


@pytest.mark.parametrize("mode", MODES)
def test_model_came_back(mode):
    d = run_dir(mode)
    model = d / "model"
    config = json.loads((model / "config.json").read_text())
    assert config["model_type"] == "bert"
    weights = list(model.glob("*.safetensors")) + list(model.glob("pytorch_model*.bin"))
    assert weights and all(w.stat().st_size > 100_000 for w in weights)
    assert (d / "loss_curve.png").stat().st_size > 0
    lines = [ln for ln in (d / "hostfile").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines == [f"{node} slots={slots}" for node, slots in inventory()[1].items()]


def test_pdsh_launch_went_over_ssh_to_every_node():
    log = (run_dir("pdsh") / "train.log").read_text()
    assert "pdsh" in log
    for node in inventory()[0]:
        assert f"host={node}" in log


def test_ansible_launch_started_every_node_rank():
    d = run_dir("ansible")
    nodes, _ = inventory()
    logs = (d / "train.log").read_text() + "".join((d / f"train-{n}.log").read_text() for n in nodes[1:])
    for rank, node in enumerate(nodes):
        assert f"--node_rank={rank}" in logs or f"node_rank={rank}" in logs
    assert "pdsh" not in (d / "train.log").read_text()


def script_run():
    """The converge's user-script run (a Slurm job): its results directory on the controller."""
    runs = sorted((STATE / "outputs" / "script").glob("my_run_mlm-*"))
    assert runs, (STATE / "train-script.log").read_text()[-3000:]
    return runs[-1]


def test_slurm_registered_every_node_and_ran_the_job_on_all_of_them():
    """site.yml's slurm role (slurm_enabled in the scenario's inventory): every node is a Slurm node, idle after the
    run (scontrol show node); the user-script run, submitted with -e launcher=slurm, had its batch script given
    exactly the plan's nodes, srun started each node's launcher (node ranks 0..2), and Slurm recorded the job, named
    after the run, as COMPLETED on all three nodes (its job-completion log: no accounting database). What it
    trained is test_user_script_ran_on_every_node's."""
    nodes, _ = inventory()
    for node in nodes:
        shown = podman_exec(nodes[0], "scontrol", "show", "node", node).stdout
        assert f"NodeName={node} " in shown and re.search(r"State=IDLE\s", shown), shown
    d = script_run()
    log = " ".join((STATE / "train-script.log").read_text().split())
    assert "Submit the job (sbatch --wait" in log
    # run.sh's blocker job held worker-2: the follower said so, then that the job ran
    assert re.search(rf"Slurm job \d+ \({d.name}\) is PENDING: \w+; 1st of 1 pending job", log), log[-4000:]
    assert re.search(rf"Slurm job \d+ \({d.name}\) is RUNNING on \S+", log), log[-4000:]
    batch = (d / "slurm.out").read_text()
    assert re.search(rf"Slurm job (\d+) on {' '.join(sorted(nodes))}: srun starts deepspeed on every node", batch), batch
    logs = (d / "train.log").read_text() + "".join((d / f"train-{n}.log").read_text() for n in nodes[1:])
    for rank in range(len(nodes)):
        assert f"node_rank={rank}" in logs or f"--node_rank={rank}" in logs
    record = [line for line in podman_exec(nodes[0], "cat", "/var/log/slurm/jobcomp.log").stdout.splitlines()
              if f" Name={d.name} " in line]
    assert len(record) == 1 and "JobState=COMPLETED" in record[0], record
    assert f"NodeCnt={len(nodes)} " in record[0], record


def test_second_run_staged_nothing():
    """The ansible-mode run came second with the same data: every worker held it verified, so the staging schedule
    had no copy and no worker copied anything."""
    log = (STATE / "train-ansible.log").read_text()
    task = log.split(SHOW_DATA_COPIES, 1)[1].split("TASK [", 1)[0]
    assert "every worker holds the prepared data already" in task, task
    assert "TASK [train_stage : Copy from the head or from a worker that holds it verified - the prepared data" not in log
    assert not re.search(r"worker-\d: copied \d+ files", log)


def test_data_preparation_and_staging_showed_progress_and_no_failed():
    """The first run prepared the data and staged it: the head's preparation lines (what it tokenizes, how far) and
    each worker's copy (files, MB, elapsed) were relayed while they ran, and no line said FAILED."""
    log = (STATE / "train-pdsh.log").read_text()
    follow = log.split("TASK [train_stage : Follow the data preparation", 1)[1].split("TASK [", 1)[0]
    assert re.search(r"head-1: prepare \[ *[\d.]+s\] tokenizing: \d+ of \d+ documents \(100%\)", follow), follow
    for worker in inventory()[0][1:]:
        assert re.search(rf"{worker}: copied \d+ files, [\d.]+ MB in \d+s", log), worker
    assert "FAILED" not in log


def test_a_worker_received_its_data_from_another_worker_not_from_the_head():
    """The first run staged the prepared data as a tree (roles/train_stage, filter_plugins/staging_tree.py): round 1
    head-1 -> worker-1, round 2 worker-1 -> worker-2. The rsync that filled worker-2 ran on worker-1 (its log of the
    files it sent is on worker-1, none on the head), and worker-2's MANIFEST is the head's."""
    log = (STATE / "train-pdsh.log").read_text()
    shown = log.split(SHOW_DATA_COPIES, 1)[1].split("TASK [", 1)[0]
    assert "round 1 of 2: head-1 -> worker-1" in shown and "round 2 of 2: worker-1 -> worker-2 (else head-1)" in \
        shown, shown
    assert re.search(r"worker-1: copied \d+ files, [\d.]+ MB in \d+s from head-1", log), log[-3000:]
    assert re.search(r"worker-2: copied \d+ files, [\d.]+ MB in \d+s from worker-1", log), log[-3000:]
    runs = f"{RUNS}/{run_dir('pdsh').name}"
    sent = podman_exec("worker-1", "cat", f"{runs}/copy-data-worker-2.log").stdout
    assert re.search(r"\|\d+\|dataset/", sent), sent  # rsync --log-file lines: itemized|length|name
    assert podman_exec("head-1", "test", "-e", f"{runs}/copy-data-worker-2.log", check=False).returncode != 0
    assert podman_exec("head-1", "test", "-s", f"{runs}/copy-data-worker-1.log", check=False).returncode == 0
    job = json.loads((run_dir("pdsh") / "job.json").read_text())
    art = f"/opt/deepspeed-cluster/local/data/{job['data_key']}"
    sums = {n: podman_exec(n, "sha256sum", f"{art}/MANIFEST").stdout.split()[0] for n in inventory()[0]}
    assert len(set(sums.values())) == 1, sums


def test_site_again_changes_nothing():
    r = playbook("site.yml")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    text = r.stdout
    if "playbooks/ssh_mesh.yml" not in (REPO / "site.yml").read_text():
        r2 = playbook("playbooks/ssh_mesh.yml")
        assert r2.returncode == 0, r2.stdout[-3000:]
        text += r2.stdout
    counts = recap(text)
    counts.pop("localhost", None)  # playbooks/check.yml's inventory play runs on the controller
    assert set(counts) == set(inventory()[0])
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts


def test_head_reaches_every_node_by_name_with_strict_host_keys():
    nodes, _ = inventory()
    for node in nodes:
        r = subprocess.run(["podman", "exec", f"dsc-{nodes[0]}", "ssh", "-o", "BatchMode=yes", "-o",
                            "StrictHostKeyChecking=yes", node, "hostname"], capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.strip() == node, r.stderr


def test_node_names_resolve_to_cluster_addresses_everywhere():
    nodes, _ = inventory()
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]
    addr = {**{n: v["cluster_address"] for n, v in hosts["head"]["hosts"].items()},
            **{n: v["cluster_address"] for n, v in hosts["workers"]["hosts"].items()}}
    for on in nodes:
        for node in nodes:
            r = subprocess.run(["podman", "exec", f"dsc-{on}", "getent", "ahostsv4", node],
                               capture_output=True, text=True, check=True)
            assert r.stdout.split()[0] == addr[node], (on, node, r.stdout)


def test_check_printed_the_parity_table_and_the_allreduce_table():
    log = (STATE / "check.log").read_text()
    nodes, slots = inventory()
    assert re.search(r"failed=0", log) and not re.search(r"failed=[1-9]", log), log[-3000:]
    table = log.split("node", 1)[1]
    for node in nodes:
        assert re.search(rf"{re.escape(node)}\s+/opt/deepspeed-cluster/venv\s+3\.\d+\.\d+\s+2\.13\.0\+cpu", table), node
        # the lock column: every package site.yml installed there (its dsc-lock.txt) found at its version
        row = next(line for line in table.splitlines()
                   if line.split()[:1] == [node] and "/opt/deepspeed-cluster/venv" in line)
        found, locked = (int(n) for n in row.split()[-1].split("/"))
        assert found == locked == len(lock_of(node)), (row, lock_of(node))
    # all ranks, then each pair of the three nodes, with gloo and the stated formula
    assert "test (gloo)" in log and "busbw = algbw x 2(n-1)/n" in log
    assert re.search(rf"all ranks\s+{sum(slots.values())}\s", log)
    for a, b in (("head-1", "worker-1"), ("head-1", "worker-2"), ("worker-1", "worker-2")):
        assert re.search(rf"{a} \+ {b}\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.e+-]+\s+[\d.e+-]+\s+ok", log), (a, b)


def lock_of(node):
    """{name: version} of the lock python_env recorded in the node's venv (<venv_dir>/dsc-lock.txt)."""
    text = podman_exec(node, "cat", "/opt/deepspeed-cluster/venv/dsc-lock.txt").stdout
    return dict(line.split("==", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_user_script_ran_on_every_node():
    runs = [script_run()]
    m = json.loads((runs[-1] / "metrics.json").read_text())
    nodes, slots = inventory()
    assert m["world_size"] == sum(slots.values()) == m["trainer_world_size"]
    assert sorted({r["hostname"] for r in m["ranks"]}) == sorted(nodes)
    assert m["steps"] == 10 and m["last_loss"] < m["first_loss"]
    assert (runs[-1] / "model.safetensors").is_file()  # the script's own trainer.save_model(output_dir)
    assert re.search(r"step 10/10 \(100%\) \| loss \d", (STATE / "train-script.log").read_text())
    job = json.loads((runs[-1] / "job.json").read_text())  # what applies to the script, not the preset's keys
    assert job["max_steps"] == 10 and job["per_device_train_batch_size"] == 8 and "model_size" not in job, job
    ds = json.loads((runs[-1] / "ds_config.json").read_text())
    assert ds["train_micro_batch_size_per_gpu"] == "auto"  # the Trainer fills it


def test_the_admins_shell_variables_reach_every_rank_and_no_log_shows_them():
    """run.sh's converge runs every train.yml with HF_TOKEN set in its shell (node_env_passthrough). Every rank of the
    Slurm job (srun starts each node's launcher) printed the token's digest (the probe line run.sh put first in the
    script); after the runs with -e launcher=pdsh and ansible no node keeps passthrough.env (the file the ranks read
    it from), nor .deepspeed_env a copy of it; and neither the playbooks' output nor anything the runs brought back
    holds the token (DeepSpeed's pdsh runner logs the exports of .deepspeed_env in train.log)."""
    import hashlib

    token = (STATE / "passed-token").read_text().strip()
    assert token.startswith("hf_cluster")
    digest = hashlib.sha256(token.encode()).hexdigest()[:16]
    nodes, _ = inventory()
    logs = script_run() / "logs"
    for rank, node in enumerate(nodes):
        text = (logs / f"{node}.rank{rank}.log").read_text()
        assert f"[passed] {node} HF_TOKEN sha256:{digest}" in text, text[:2000]
    for run in (run_dir("pdsh").name, run_dir("ansible").name):
        for node in nodes:
            left = podman_exec(node, "ls", f"/opt/deepspeed-cluster/runs/{run}/passthrough.env", check=False)
            assert left.returncode != 0, (run, node, left.stdout)
    ds_env = podman_exec(nodes[0], "cat", "/opt/deepspeed-cluster/code/.deepspeed_env").stdout
    assert "HF_TOKEN" not in ds_env and token not in ds_env
    leaked = [str(f) for f in [*STATE.glob("*.log"), *(STATE / "outputs").rglob("*")]
              if f.is_file() and token.encode() in f.read_bytes()]
    assert not leaked, leaked


def test_the_scripts_data_was_staged_as_a_tree_with_its_manifest_beside_it():
    """The user script's data (script_data, a directory on the head) went out as the prepared data does: round 1
    head-1 -> worker-1, round 2 worker-1 -> worker-2, each copy checked against the head's MANIFEST, which lies
    beside the directory (user-data/corpus.MANIFEST): the directory the script reads holds only the user's file."""
    log = " ".join((STATE / "train-script.log").read_text().split())
    shown = log.split("Show the copies round by round (source -> destination) - the script's data", 1)[1]
    shown = shown.split("TASK [", 1)[0]
    assert "round 1 of 2: head-1 -> worker-1" in shown and "round 2 of 2: worker-1 -> worker-2 (else head-1)" in \
        shown, shown
    assert re.search(r"worker-2: copied \d+ files, [\d.]+ MB in \d+s from worker-1", log), log[-3000:]
    data = "/opt/deepspeed-cluster/local/user-data/corpus"
    sums = set()
    for node in inventory()[0]:
        assert podman_exec(node, "ls", "-A", data).stdout.split() == ["train.txt"], node
        sums.add(podman_exec(node, "sha256sum", f"{data}.MANIFEST").stdout.split()[0])
    assert len(sums) == 1, sums


def podman_exec(node, *cmd, check=True):
    return subprocess.run(["podman", "exec", f"dsc-{node}", *cmd], capture_output=True, text=True, check=check)


@contextlib.contextmanager
def new_host_keys(node):
    """``node`` gets new ssh host keys (as a reinstalled node, or another machine at its address, would) for the
    ``with`` block; its own keys are restored after it, and the head logs in to it again."""
    saved = "/root/dsc-saved-host-keys"
    podman_exec(node, "sh", "-c", f"rm -rf {saved} && mkdir {saved} && cp -a /etc/ssh/ssh_host_* {saved}/ && "
                f"rm /etc/ssh/ssh_host_* && ssh-keygen -A >/dev/null && kill -HUP 1")
    try:
        time.sleep(1)
        yield
    finally:
        podman_exec(node, "sh", "-c", f"rm -f /etc/ssh/ssh_host_* && cp -a {saved}/. /etc/ssh/ && kill -HUP 1")
        time.sleep(1)
    r = podman_exec("head-1", "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", node, "hostname",
                    check=False)
    assert r.returncode == 0 and r.stdout.strip() == node, r.stderr


@contextlib.contextmanager
def head_trusts_another_key(node):
    """The head's known_hosts holds another ssh host key for ``node`` (by its name and its cluster address) during
    the ``with`` block, as after the node was reinstalled and the head not told: the head's ssh to it is refused
    ("REMOTE HOST IDENTIFICATION HAS CHANGED"), the controller's still works. Restored after the block."""
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]
    address = {**hosts["head"]["hosts"], **hosts["workers"]["hosts"]}[node]["cluster_address"]
    kh, saved = "/root/.ssh/known_hosts", "/root/.ssh/known_hosts.dsc-test"
    podman_exec("head-1", "sh", "-c", f"cp -a {kh} {saved} && ssh-keygen -q -R {node} -f {kh} >/dev/null 2>&1; "
                f"ssh-keygen -q -R {address} -f {kh} >/dev/null 2>&1; rm -f /tmp/dsc-other-key* && "
                f"ssh-keygen -q -t ed25519 -N '' -f /tmp/dsc-other-key && "
                f"echo \"{node},{address} $(cut -d' ' -f1,2 /tmp/dsc-other-key.pub)\" >> {kh}")
    try:
        yield
    finally:
        podman_exec("head-1", "sh", "-c", f"mv {saved} {kh}")
    r = podman_exec("head-1", "ssh", "-o", "BatchMode=yes", node, "hostname", check=False)
    assert r.returncode == 0 and r.stdout.strip() == node, r.stderr


def processes_of(node, run):
    """Command lines of the node's processes that belong to ``run``, from ``ps`` on the node (procps, installed by
    the base role); which ones are the run's is train/node/rank_status.py's run_of (its run directory in the command
    line), the rule the stop and the preflight use."""
    out = podman_exec(node, "ps", "-eo", "args=").stdout
    return [line.strip()[:200] for line in out.splitlines() if run_of("\0".join(line.split()).encode(), RUNS) == run]


@pytest.mark.parametrize("mode", MODES)
def test_master_address_is_the_heads_address_in_every_nodes_etc_hosts(mode):
    """The head's ansible_host (management network) differs from its cluster_address: the launcher got the address
    that every node's /etc/hosts gives the head (one cluster shape), never the ansible_host."""
    d = run_dir(mode)
    logs = "".join(p.read_text() for p in d.glob("train*.log"))
    given = set(re.findall(r"--master_addr[= ](\S+?)[\s'\"]", logs))
    nodes, _ = inventory()
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]["head"]["hosts"]
    assert hosts[nodes[0]]["ansible_host"] != hosts[nodes[0]]["cluster_address"]
    in_etc_hosts = {podman_exec(n, "getent", "hosts", nodes[0]).stdout.split()[0] for n in nodes}
    assert given == in_etc_hosts == {hosts[nodes[0]]["cluster_address"]}, (given, in_etc_hosts)


def test_a_node_whose_dev_shm_or_disk_is_too_small_or_whose_gloo_interface_is_wrong_or_down_is_refused(tmp_path):
    """One train.yml, refused by the preflight's node health check before anything is staged or launched, naming each
    node with its numbers: worker-1 runs two ranks (slots 2) with its /dev/shm filled to leave less than they need;
    worker-2's local_ssd_dir is on its 1 GB /dev/shm (under cluster_check_min_free_gb); GLOO_SOCKET_IFNAME names dsc0,
    a real interface (one end of a veth pair) that is up on the head, down on worker-1 and missing on worker-2.
    Everything is undone afterwards."""
    nodes, _ = inventory()
    head, worker1, worker2 = nodes[:3]
    bad = tmp_path / "inventory"
    shutil.copytree(INVENTORY, bad)
    hosts = yaml.safe_load((bad / "hosts.yml").read_text())
    workers = hosts["all"]["children"]["workers"]["hosts"]
    workers[worker1]["slots"] = 2
    small_ssd = "/dev/shm/dsc-small-ssd"
    workers[worker2]["local_ssd_dir"] = small_ssd
    (bad / "hosts.yml").write_text(yaml.safe_dump(hosts))
    group = yaml.safe_load((bad / "group_vars" / "all.yml").read_text())
    group["node_env_extra"] = dict(group.get("node_env_extra") or {}, GLOO_SOCKET_IFNAME="dsc0")
    (bad / "group_vars" / "all.yml").write_text(yaml.safe_dump(group))
    privileged = lambda node, *cmd: subprocess.run(["podman", "exec", "--privileged", f"dsc-{node}", *cmd],  # noqa: E731
                                                   capture_output=True, text=True, check=True)
    try:
        for node in (head, worker1):
            privileged(node, "ip", "link", "add", "dsc0", "type", "veth", "peer", "name", "dsc0p")
        privileged(head, "ip", "link", "set", "dsc0p", "up")
        privileged(head, "ip", "link", "set", "dsc0", "up")
        free = int(podman_exec(worker1, "df", "-B1", "--output=avail", "/dev/shm").stdout.split()[-1])
        podman_exec(worker1, "fallocate", "-l", str(free - 200 * 10 ** 6), "/dev/shm/dsc-fill")
        podman_exec(worker2, "mkdir", "-p", small_ssd)
        env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_ROLES_PATH=str(REPO / "roles"))
        train = subprocess.run(["ansible-playbook", "-i", str(bad), "train.yml", "-e", "model=bert", "-e",
                                "model_size=tiny", "-e", f"train_output_dir={tmp_path / 'out'}"], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=600)
    finally:
        for node in (head, worker1):
            privileged(node, "ip", "link", "del", "dsc0") if "dsc0" in podman_exec(
                node, "ip", "-o", "link", check=False).stdout else None
        podman_exec(worker1, "rm", "-f", "/dev/shm/dsc-fill", check=False)
        podman_exec(worker2, "rm", "-rf", small_ssd, check=False)
    said = " ".join(train.stdout.split())
    assert train.returncode != 0, said[-3000:]
    assert re.search(rf"host {worker1}: /dev/shm has 2\d\d MB free of 1\.1 GB and its 2 ranks need about 512 MB "
                     r"\(256 MB a rank: cluster_check_shm_per_rank_mb\) -- make it larger", said), said[-3000:]
    assert f"host {worker1}: GLOO_SOCKET_IFNAME=dsc0: dsc0 DOWN (down) -- bring it up (ip link set dsc0 up)" in said
    assert (f"host {worker2}: GLOO_SOCKET_IFNAME=dsc0 names no interface here (missing: dsc0) -- set "
            f"GLOO_SOCKET_IFNAME to this node's cluster network interface (eth0, which holds 10.89.77.12)") in said
    assert re.search(rf"host {worker2}: local_ssd_dir {small_ssd} has 1\.\d GB free, the check wants at least "
                     r"5\.0 GB", said), said[-3000:]
    assert f"host {head}: GLOO_SOCKET_IFNAME" not in said and f"host {head}: /dev/shm" not in said
    assert "-e cluster_check_network_health=warn only warns" in said
    assert "Launch deepspeed" not in train.stdout and "Copy what runs on a node" not in train.stdout


def test_a_master_address_the_workers_cannot_reach_is_refused_before_anything_changes(tmp_path):
    """The inventory without the head's cluster_address: its ansible_host (the management network, which the workers
    cannot reach) becomes its address. The ssh mesh stops before any node's /etc/hosts or keys change, and train.yml
    before anything is staged, each naming the address, where it came from and the fix (set cluster_address)."""
    nodes, _ = inventory()
    head = nodes[0]
    bad = tmp_path / "inventory"
    shutil.copytree(INVENTORY, bad)
    hosts = yaml.safe_load((bad / "hosts.yml").read_text())
    head_vars = hosts["all"]["children"]["head"]["hosts"][head]
    del head_vars["cluster_address"]
    mgmt = head_vars["ansible_host"]
    (bad / "hosts.yml").write_text(yaml.safe_dump(hosts))
    before = {n: podman_exec(n, "cat", "/etc/hosts").stdout for n in nodes}
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_ROLES_PATH=str(REPO / "roles"))
    mesh = subprocess.run(["ansible-playbook", "-i", str(bad), "playbooks/ssh_mesh.yml"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    said = " ".join(mesh.stdout.split())
    assert mesh.returncode != 0, said[-3000:]
    for worker in nodes[1:]:
        assert (f"{worker} cannot open a TCP connection to {head} at {mgmt} port 22 (its sshd; Timeout when waiting "
                f"for {mgmt}:22). {mgmt} is {head}'s ansible_host (cluster_address is not set for it).") in said, \
            said[-3000:]
    assert f"set cluster_address: <{head}'s address on the network the nodes share> for {head}" in said
    assert "Nothing was changed on the nodes" in said
    assert {n: podman_exec(n, "cat", "/etc/hosts").stdout for n in nodes} == before
    train = subprocess.run(["ansible-playbook", "-i", str(bad), "train.yml", "-e", "model=bert", "-e",
                            "model_size=tiny", "-e", f"train_output_dir={tmp_path / 'out'}", "-e",
                            "cluster_check_master_timeout_s=5"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=300)
    said = " ".join(train.stdout.split())
    assert train.returncode != 0, said[-3000:]
    assert (f"cannot open a TCP connection to {head} at {mgmt} port 29500 (the master port, where torch's rendezvous "
            f"will listen; Timeout when waiting for {mgmt}:29500). {mgmt} is {head}'s ansible_host") in said, \
        said[-3000:]
    assert "Nothing was staged or launched" in said and "Launch deepspeed" not in train.stdout
    assert "Copy what runs on a node" not in train.stdout


def test_site_yml_limited_to_one_node_stops_at_once_saying_what_to_run():
    t0 = time.monotonic()
    r = playbook("site.yml", "--limit", "worker-2")
    took = time.monotonic() - t0
    text = " ".join(r.stdout.split())
    assert r.returncode != 0 and took < 60, (took, r.stdout[-3000:])
    assert "--limit leaves out head-1, worker-1 of the cluster" in text, r.stdout[-3000:]
    assert "ansible-playbook playbooks/provision.yml --limit worker-2" in text
    assert "HostVarsVars" not in r.stdout and "Traceback" not in r.stdout
    assert all(c["changed"] == 0 for c in recap(r.stdout).values())


def test_a_worker_whose_staged_data_is_corrupt_stops_the_run_before_any_rank_starts(tmp_path):
    """worker-2's copy of the prepared data is damaged but keeps the head's MANIFEST, so staging skips the copy and
    its MANIFEST check fails: the run stops there with worker-2 named, on every node, before any rank starts, and
    the run's claim on the cluster is released (no claim file left on the head)."""
    nodes, _ = inventory()
    job = json.loads((run_dir("pdsh") / "job.json").read_text())
    art = f"/opt/deepspeed-cluster/local/data/{job['data_key']}"
    arrow = podman_exec("worker-2", "sh", "-c", f"ls {art}/dataset/*.arrow | head -1").stdout.strip()
    assert arrow, f"no prepared data on worker-2 under {art}"
    podman_exec("worker-2", "sh", "-c", f"printf x >> {arrow}")
    run = f"stage-fail-{int(time.time())}"
    r = playbook("train.yml", "-e", "model=bert", "-e", "model_size=tiny", "-e", "max_steps=30", "-e",
                 f"run_name={run}", "-e", f"train_output_dir={tmp_path}", "-e", "train_poll_seconds=5")
    text = " ".join(r.stdout.split())
    assert r.returncode != 0, r.stdout[-3000:]
    assert f"host worker-2: the prepared data in {art} does not match the head's MANIFEST" in text, r.stdout[-3000:]
    assert "sha256 mismatch" in text
    assert "Launch deepspeed" not in r.stdout and "Start deepspeed" not in r.stdout
    assert not (tmp_path / run).exists(), "a run that never launched must leave nothing in train_output_dir"
    for node in nodes:
        ls = podman_exec(node, "ls", "-A", f"/opt/deepspeed-cluster/runs/{run}", check=False).stdout.split()
        assert "train.log" not in ls and "output" not in ls, (node, ls)
        assert processes_of(node, run) == [], node
    # the damaged copy lost its MANIFEST: the next run copies the data again
    assert podman_exec("worker-2", "test", "-e", f"{art}/MANIFEST", check=False).returncode == 1
    # the failed staging released the run's claim on the cluster (the release ends its holder, then removes the
    # file): the next train.yml goes on
    assert podman_exec(nodes[0], "test", "-e", f"{RUNS}/.claim.json", check=False).returncode == 1


def test_a_local_ssd_dir_the_nodes_share_is_read_in_place_and_shared_run_directories_are_refused(tmp_path):
    """/shared is one directory of this machine in every container (run.sh create), as an NFS export would be. With
    dsc_root there every node's run directories would be one: the preflight refuses it, naming the nodes, before
    anything is staged. With local_ssd_dir there, the preflight finds the workers share the head's: the head
    prepares the data there once, nothing is copied or verified on the workers, and the run trains on every node."""
    nodes, slots = inventory()
    head, workers = nodes[0], nodes[1:]
    shared = STATE / "shared"
    (shared / "root" / "runs").mkdir(parents=True, exist_ok=True)  # what site.yml makes under a dsc_root
    (shared / "ssd").mkdir(parents=True, exist_ok=True)
    run = f"shared-root-{int(time.time())}"
    r = playbook("train.yml", "-e", "model=bert", "-e", "model_size=tiny", "-e", f"run_name={run}",
                 "-e", "dsc_root=/shared/root", "-e", f"train_output_dir={tmp_path}")
    text = " ".join(r.stdout.split())
    assert r.returncode != 0, r.stdout[-3000:]
    assert f"host {head}: its run directories' disk (<dsc_root>/runs) is also {', '.join(workers)}'s" in text, \
        r.stdout[-3000:]
    assert "set dsc_root to a node-local path on every node" in text
    assert "TASK [train_stage" not in r.stdout and not (shared / "root" / "runs" / run).exists()
    assert not list((shared / "root" / "runs").glob(".dsc-share-*")), "the preflight's markers must be removed"

    run = f"shared-ssd-{int(time.time())}"
    r = playbook("train.yml", "-e", "model=bert", "-e", "model_size=tiny", "-e", "max_steps=20", "-e",
                 "warmup_steps=2", "-e", f"run_name={run}", "-e", "local_ssd_dir=/shared/ssd",
                 "-e", "launcher=ansible", "-e", f"train_output_dir={tmp_path}", "-e", "train_poll_seconds=2")
    text = " ".join(r.stdout.split())
    assert r.returncode == 0, r.stdout[-4000:]
    assert (f"local_ssd_dir is one shared storage for {', '.join(nodes)}: the data is prepared there once by {head} "
            f"and read in place; nothing is copied to {', '.join(workers)}") in text, r.stdout[-4000:]
    job = json.loads((tmp_path / run / "job.json").read_text())
    art = f"/shared/ssd/data/{job['data_key']}"
    for worker in workers:
        assert f"{worker} reads the prepared data in place: {art} is on the storage it shares with {head}" in text
        assert podman_exec(worker, "test", "-e", f"{RUNS}/{run}/copy-data-{worker}.log", check=False).returncode != 0
    shown = r.stdout.split(SHOW_DATA_COPIES, 1)[1].split("TASK [", 1)[0]
    assert "every worker holds the prepared data already" in shown, shown
    assert (shared / "ssd" / "data" / job["data_key"] / "MANIFEST").is_file()
    assert not list((shared / "ssd").glob(".dsc-share-*")), "the preflight's markers must be removed"
    m = json.loads((tmp_path / run / "metrics.json").read_text())
    assert m["world_size"] == sum(slots.values()) and {r["hostname"] for r in m["ranks"]} == set(nodes)
    assert m["steps"] == 20 and m["last_loss"] < m["first_loss"], m


def test_a_run_inside_a_slurm_allocation_goes_to_the_nodes_slurm_chose(tmp_path, monkeypatch):
    """An allocation of two whole nodes, head-1 excluded (salloc --no-shell on the head, as a user does before
    `salloc ... ansible-playbook`; its job id in SLURM_JOB_ID, as salloc gives its command): train.yml -e
    launcher=slurm runs on the nodes Slurm chose, the first of them its head (rank 0, the data prepared there, the
    results from there), srun starting each node's launcher in that job; head-1 takes no part. The allocation
    outlives the run (it is the user's); scancel ends it after."""
    nodes, slots = inventory()
    head = nodes[0]
    got = podman_exec(head, "salloc", "--no-shell", "--nodes=2", f"--exclude={head}", "--exclusive",
                      "--time=10", f"--job-name=alloc-{int(time.time())}", check=False)
    granted = re.search(r"Granted job allocation (\d+)", got.stderr + got.stdout)
    assert got.returncode == 0 and granted, got.stderr
    jobid = granted.group(1)
    try:
        chosen = podman_exec(head, "squeue", "--noheader", f"--jobs={jobid}", "--format=%N").stdout.strip()
        allocated = podman_exec(head, "scontrol", "show", "hostnames", chosen).stdout.split()
        assert len(allocated) == 2 and head not in allocated, allocated
        run_head = [n for n in nodes if n in allocated][0]
        run = f"alloc-{int(time.time())}"
        monkeypatch.setenv("SLURM_JOB_ID", jobid)
        r = playbook("train.yml", "-e", "model=bert", "-e", "model_size=tiny", "-e", "max_steps=20", "-e",
                     "warmup_steps=2", "-e", f"run_name={run}", "-e", "launcher=slurm",
                     "-e", f"train_output_dir={tmp_path}", "-e", "train_poll_seconds=2")
        text = " ".join(r.stdout.split())
        assert r.returncode == 0, r.stdout[-4000:]
        assert (f"Slurm job {jobid} (the SLURM_JOB_ID of this ansible-playbook) holds {', '.join(allocated)}: the run "
                f"goes there, srun starts it in the job, {run_head} is its head") in text, r.stdout[-4000:]
        assert "Start slurm-node.sh once on every node of the allocation (srun --jobid" in r.stdout
        m = json.loads((tmp_path / run / "metrics.json").read_text())
        assert m["world_size"] == sum(slots[n] for n in allocated)
        assert sorted({x["hostname"] for x in m["ranks"]}) == sorted(allocated)
        assert m["steps"] == 20 and m["last_loss"] < m["first_loss"], m
        lines = [ln for ln in (tmp_path / run / "hostfile").read_text().splitlines() if ln and not ln.startswith("#")]
        assert lines == [f"{n} slots={slots[n]}" for n in nodes if n in allocated]
        assert (tmp_path / run / "model" / "config.json").is_file()
        assert podman_exec(head, "test", "-e", f"{RUNS}/{run}", check=False).returncode != 0, "head-1 took part"
        # no job of its own was submitted (Slurm's job-completion log records every job, not a job's steps)
        jobcomp = podman_exec(head, "cat", "/var/log/slurm/jobcomp.log").stdout
        assert f" Name={run} " not in jobcomp
        assert (tmp_path / run / "slurm.out").is_file()  # srun's own lines, brought back
        # srun gave each node's task the CPUs the job holds there: what the filter reads from Slurm's own details
        details = podman_exec(head, "scontrol", "--oneliner", "--details", "show", "job", jobid).stdout
        cpus = {int(podman_exec(head, "sinfo", "--noheader", "--Node", f"--nodes={n}", "--format=%c").stdout.split()[0])
                for n in allocated}
        assert slurm_min_node_cpus(details) == min(cpus), details
        # -e attach= cannot follow a step: it says so and stops nothing
        r = playbook("train.yml", "-e", f"attach={run}", "-e", f"train_output_dir={tmp_path}")
        text = " ".join(r.stdout.split())
        assert r.returncode != 0 and f"run {run} ran inside Slurm allocation {jobid}" in text, r.stdout[-3000:]
        assert "Nothing was stopped." in text
        # the allocation is the user's: still running after the run
        assert podman_exec(head, "squeue", "--noheader", f"--jobs={jobid}", "--format=%T").stdout.split() == ["RUNNING"]
        for node in allocated:
            assert processes_of(node, run) == [], node
    finally:
        podman_exec(head, "scancel", jobid, check=False)

    # a job id that is no running allocation: one line, nothing planned
    monkeypatch.setenv("SLURM_JOB_ID", jobid)
    r = playbook("train.yml", "-e", "model=bert", "-e", "launcher=slurm", "-e", f"train_output_dir={tmp_path}")
    text = " ".join(r.stdout.split())
    assert r.returncode != 0 and f"-e launcher=slurm: Slurm job {jobid} (the SLURM_JOB_ID of this ansible-playbook) " \
        "is not a running allocation of yours" in text, r.stdout[-3000:]
    assert "TASK [train_plan" not in r.stdout


def test_a_copy_to_a_node_whose_host_key_changed_is_refused(tmp_path):
    """worker-1 gets new ssh host keys (as a reinstalled node, or another machine at its address, would): the
    playbooks' rsync copies from the head (train_stage's stage_copy and a plain ansible.posix.synchronize, both with
    verify_host) refuse it with a message naming the node and the fix; nothing is copied; the ssh mesh (site.yml's)
    refuses to trust the new key, naming both fingerprints and how to accept it. The keys are restored afterwards,
    so the head reaches worker-1 again."""
    nodes, _ = inventory()
    head, node = nodes[0], "worker-1"
    book = tmp_path / "copy.yml"
    copy = {"src": "/opt/deepspeed-cluster/code/train/", "dest": "/tmp/dsc-hostkey-test/", "verify_host": True}
    book.write_text(yaml.safe_dump([{"hosts": node, "gather_facts": False, "tasks": [
        {"name": "Copy with stage_copy", "stage_copy": {**copy, "log_file": "/tmp/dsc-hostkey-copy.log"},
         "delegate_to": head, "register": "a", "ignore_errors": True},
        {"name": "Copy with synchronize", "ansible.posix.synchronize": copy, "delegate_to": head, "register": "b",
         "ignore_errors": True},
        {"name": "Show", "ansible.builtin.debug": {
            "msg": "A={{ a.failed | default(false) }} {{ a.msg | default('') }} B={{ b.failed | default(false) }} "
                   "{{ b.msg | default('') }} CMD={{ a.cmd | default('') }} END"}}]}]))
    podman_exec(node, "rm", "-rf", "/tmp/dsc-hostkey-test")
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_ROLES_PATH=str(REPO / "roles"),
               ANSIBLE_ACTION_PLUGINS=str(REPO / "roles" / "train_stage" / "action_plugins"))
    with new_host_keys(node):
        r = subprocess.run(["ansible-playbook", "-i", str(INVENTORY), str(book)], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=120)
        text = " ".join(r.stdout.split())
        assert r.returncode == 0, r.stdout[-3000:]
        assert "A=True host worker-1: the copy from head-1 was refused: worker-1's ssh host key is not the one in " \
               "head-1's known_hosts (changed)" in text, r.stdout[-3000:]
        assert "playbooks/ssh_mesh.yml" in text
        assert re.search(r"B=True .*Host key verification failed", text), r.stdout[-3000:]
        assert podman_exec(node, "test", "-e", "/tmp/dsc-hostkey-test/common/job.py", check=False).returncode != 0
        # site.yml's ssh mesh does not trust the new key silently: it names both fingerprints and the command that
        # accepts it on purpose (the head's known_hosts is left as it was)
        fp = podman_exec(node, "ssh-keygen", "-l", "-E", "sha256", "-f", "/etc/ssh/ssh_host_ed25519_key.pub").stdout
        mesh = playbook("playbooks/ssh_mesh.yml")
        said = " ".join(mesh.stdout.split())
        assert mesh.returncode != 0, said[-3000:]
        assert f"The ssh host key of {node} changed since the head last trusted it: {node} ssh-ed25519 SHA256:" in \
            said and f" -> {fp.split()[1]}" in said, said[-3000:]
        assert f"""ansible-playbook site.yml -e '{{"ssh_mesh_accept_new_host_keys": ["{node}"]}}'""" in said, said[-3000:]
    # with its own keys back, stage_copy's rsync on the head copies, with the head's own ssh keys: not with the
    # controller's key file, a path the head does not have (ssh: "Warning: Identity file ... not accessible")
    r = subprocess.run(["ansible-playbook", "-i", str(INVENTORY), str(book)], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0 and "A=False" in text, r.stdout[-3000:]
    assert podman_exec(node, "test", "-e", "/tmp/dsc-hostkey-test/common/job.py", check=False).returncode == 0
    cmd = re.search(r"CMD=(.*?) END", text).group(1)
    assert "rsync" in cmd and "--rsh" in cmd and " -i " not in cmd and "id_ed25519" not in cmd, cmd


def test_a_copy_from_a_worker_that_fails_is_retried_from_the_head(tmp_path):
    """worker-2 lacks the data (no MANIFEST, a file gone) and worker-1 holds it, so worker-2 is scheduled to copy from worker-1;
    worker-1's cluster key is gone, so that rsync fails: the copy is said to have failed and is retried from the
    head, which fills worker-2, verified. The plan and staging steps of train.yml only (nothing launched)."""
    job = json.loads((run_dir("pdsh") / "job.json").read_text())
    art = f"/opt/deepspeed-cluster/local/data/{job['data_key']}"
    key = "/root/.ssh/id_ed25519_deepspeed_cluster"
    podman_exec("worker-2", "rm", "-f", f"{art}/MANIFEST", f"{art}/prepare.json")  # a file to copy, whatever ran before
    book = tmp_path / "stage.yml"
    book.write_text(yaml.safe_dump([
        {"ansible.builtin.import_playbook": str(REPO / "playbooks" / "boilerplate.yml")},
        {"name": "Plan", "hosts": "head:workers", "gather_facts": False, "any_errors_fatal": True,
         "roles": ["train_plan"]},
        {"name": "Stage", "hosts": "head:workers", "gather_facts": False, "any_errors_fatal": True,
         "strategy": "ansible.builtin.linear", "roles": ["train_stage"]}]))
    podman_exec("worker-1", "mv", key, f"{key}.off")
    try:
        r = playbook(str(book), "-e", "model=bert", "-e", "model_size=tiny", "-e", "max_steps=30", "-e",
                     f"run_name=stage-retry-{int(time.time())}", "-e", f"train_output_dir={tmp_path}")
    finally:
        podman_exec("worker-1", "mv", f"{key}.off", key)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0, r.stdout[-4000:]
    assert "round 1 of 1: worker-1 -> worker-2 (else head-1)" in text, r.stdout[-4000:]
    assert "host worker-2: copy 1 from worker-1: the copy failed: " in text and "trying head-1 next" in text, \
        r.stdout[-4000:]
    assert re.search(r"worker-2: copied \d+ files, [\d.]+ MB in \d+s from head-1", text), r.stdout[-4000:]
    sums = {n: podman_exec(n, "sha256sum", f"{art}/MANIFEST").stdout.split()[0] for n in ("head-1", "worker-2")}
    assert sums["head-1"] == sums["worker-2"], sums
    verified = podman_exec("worker-2", "sh", "-c", "cd /opt/deepspeed-cluster/code && /opt/deepspeed-cluster/venv/bin/"
                           f"python -m train.data.prepare_data --verify {art} --rehash", check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "FAILED" not in r.stdout


def test_workers_reach_each_other_over_ssh_but_not_the_head():
    """site.yml's ssh mesh (roles/ssh_mesh workers.yml): each worker logs in to the other workers with its own key
    and strict host keys (the data staging's copies between workers), and no worker key opens the head."""
    for node, other in (("worker-1", "worker-2"), ("worker-2", "worker-1")):
        r = podman_exec(node, "ssh", "-o", "BatchMode=yes", other, "hostname", check=False)
        assert r.returncode == 0 and r.stdout.strip() == other, (node, other, r.stderr)
    r = podman_exec("worker-1", "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o",
                    "UserKnownHostsFile=/dev/null", "-i", "/root/.ssh/id_ed25519_deepspeed_cluster", "head-1", "true",
                    check=False)
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr


def test_a_node_missing_packages_of_its_lock_is_refused_before_staging_and_provisioning_restores_them(tmp_path):
    """`pip uninstall -y tensorboard accelerate` in worker-1's venv (as an admin might): train.yml is refused by the
    preflight before anything is staged, naming worker-1, each package (expected, found) and the fix; that fix,
    provision.yml limited to worker-1, installs them again (worker-1 alone changed) and the preflight passes."""
    nodes, _ = inventory()
    lock = lock_of("worker-1")
    assert lock == lock_of("head-1") and {"tensorboard", "accelerate"} <= set(lock), lock
    n = len(lock)
    pip = "/opt/deepspeed-cluster/venv/bin/pip"
    podman_exec("worker-1", pip, "uninstall", "-y", "tensorboard", "accelerate")
    try:
        run = f"lock-{int(time.time())}"
        r = playbook("train.yml", "-e", "model=bert", "-e", "model_size=tiny", "-e", f"run_name={run}", "-e",
                     f"train_output_dir={tmp_path}")
        text = " ".join(r.stdout.split())
        assert r.returncode != 0, r.stdout[-3000:]
        assert ("host worker-1: 2 packages of its venv differ from the lock site.yml installed "
                "(/opt/deepspeed-cluster/venv/dsc-lock.txt): accelerate (expected %s, found missing); tensorboard "
                "(expected %s, found missing); run `ansible-playbook playbooks/provision.yml --limit worker-1` "
                "(python_env installs the lock again)" % (lock["accelerate"], lock["tensorboard"])) in text, \
            r.stdout[-3000:]
        assert not re.search(r"host (head-1|worker-2): \d+ packages? of its venv", text)
        n = len(lock)
        rows = {line.split()[0]: line.split()[-1] for line in r.stdout.splitlines()
                if line.strip() and line.split()[0] in nodes and "/opt/deepspeed-cluster/venv" in line}
        assert rows == {"head-1": f"{n}/{n}", "worker-1": f"{n - 2}/{n}", "worker-2": f"{n}/{n}"}, rows
        assert "Copy what runs on a node" not in r.stdout and "Launch deepspeed" not in r.stdout
        assert not (tmp_path / run).exists()
        for node in nodes:
            ls = podman_exec(node, "ls", "-A", f"{RUNS}/{run}", check=False).stdout.split()
            assert "train.log" not in ls, (node, ls)
    finally:
        fix = playbook("playbooks/provision.yml", "--limit", "worker-1")
    assert fix.returncode == 0, fix.stdout[-3000:]
    assert set(recap(fix.stdout)) == {"worker-1"} and recap(fix.stdout)["worker-1"]["changed"] >= 1
    installed = podman_exec("worker-1", pip, "list", "--format=freeze").stdout.lower()
    assert f"accelerate=={lock['accelerate']}" in installed and f"tensorboard=={lock['tensorboard']}" in installed
    # the preflight passes again (playbooks/check.yml's, the all-reduce left out), every row with its whole lock
    check = playbook("playbooks/check.yml", "-e", "cluster_check_health=false")
    assert check.returncode == 0 and "packages of its venv differ" not in check.stdout, check.stdout[-3000:]
    rows = {line.split()[0]: line.split()[-1] for line in check.stdout.splitlines()
            if line.strip() and line.split()[0] in nodes and "/opt/deepspeed-cluster/venv" in line}
    assert rows == {node: f"{n}/{n}" for node in nodes}, rows

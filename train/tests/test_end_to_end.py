"""End to end on this machine: the README's main-job command, then what a user gets back.

Runs the command between the ``<!-- main-job -->`` markers of README.md exactly as a user would (it provisions the
machine with site.yml and trains a tiny BERT with 2 ranks through the deepspeed launcher), then checks the run's
output directory, that site.yml run again changes nothing, and that bad ``-e`` values stop before anything runs.
Takes a few minutes; skipped unless ``DSC_E2E=1`` (``make test`` sets it; ``make unit`` alone does not).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
STALE_DEEPSPEED_ENV = Path(yaml.safe_load((REPO / "inventory" / "local" / "group_vars" / "all.yml").read_text())
                           ["dsc_root"]) / "code" / ".deepspeed_env"

pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.skipif(
    not os.environ.get("DSC_E2E"),
    reason="end-to-end test: set DSC_E2E=1 (make test does) to run it",
)]  # test tiers: pytest.ini


def readme_command(marker: str) -> str:
    """Return the shell command in the fenced block that follows ``<!-- marker -->`` in README.md."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"<!-- {marker} -->\s*```(?:sh|bash|console)?\n(.*?)```", text, re.S)
    assert match, f"README.md has no fenced block after <!-- {marker} -->"
    lines = [ln for ln in match.group(1).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return "\n".join(lines)


def run(cmd: str | list[str], log: Path, timeout: int) -> subprocess.CompletedProcess:
    """Run a command from the repo root, keep its whole output in ``log`` and return it."""
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(cmd, shell=isinstance(cmd, str), cwd=REPO, env=env, text=True, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log.write_text(proc.stdout, encoding="utf-8")
    return proc


def recap(output: str, host: str = "localhost") -> dict[str, int]:
    """Parse the last PLAY RECAP line of ``host`` into {"ok": n, "changed": n, ...}."""
    lines = [ln for ln in output.splitlines() if re.match(rf"^{re.escape(host)}\s+:\s+ok=", ln)]
    assert lines, "no PLAY RECAP line in the output"
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", lines[-1])}


@pytest.fixture(scope="module")
def main_job(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    log = tmp_path_factory.mktemp("e2e") / "main-job.log"
    # an earlier version's .deepspeed_env on this one node (it held the admin's tokens): the staging removes it
    STALE_DEEPSPEED_ENV.parent.mkdir(parents=True, exist_ok=True)
    STALE_DEEPSPEED_ENV.write_text("HF_TOKEN=from-an-earlier-version\n")
    proc = run(readme_command("main-job"), log, timeout=30 * 60)
    assert proc.returncode == 0, f"main-job command failed (rc {proc.returncode}); log: {log}\n{proc.stdout[-4000:]}"
    found = re.findall(r"results will come back to\s+([^\s'\",]+)", proc.stdout)
    assert found, "the playbook did not say where the results are"
    return proc, Path(found[-1])


def test_main_job_metrics(main_job):
    proc, out = main_job
    assert not STALE_DEEPSPEED_ENV.exists()  # one node: DeepSpeed's runner would not read it, tokens may be in it
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert metrics["trainer_world_size"] == 2
    assert len(metrics["ranks"]) == 2
    assert metrics["ranks"][0]["first_batches_sha256"] != metrics["ranks"][1]["first_batches_sha256"]
    job = json.loads((out / "job.json").read_text())
    assert metrics["steps"] == job["max_steps"]
    assert metrics["last_loss"] < metrics["first_loss"] - 0.5
    assert metrics["train_samples_per_second"] > 0 and metrics["wall_time_s"] > 0
    # progress was printed while the job ran, not only at the end
    assert re.search(r"step \d+/\d+ \(\d+%\) \| loss \d", proc.stdout)
    assert "[rank 1/2] host=" in proc.stdout


def test_main_job_files(main_job):
    _, out = main_job
    assert (out / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    hostfile = [ln for ln in (out / "hostfile").read_text().splitlines() if ln and not ln.startswith("#")]
    assert hostfile == ["localhost slots=2"]
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == 2
    # the checkpoints came back complete (train/node/checkpoints.py), the Trainer's save at the last step among them
    from train.node import checkpoints

    kept = checkpoints.checkpoints(out)
    assert kept and checkpoints.step_of(kept[-1]) == json.loads((out / "metrics.json").read_text())["steps"], kept
    assert all(checkpoints.verify(d) == [] and checkpoints.marker(d)["world_size"] == 2 for d in kept), kept


def test_main_job_shows_what_it_did(main_job):
    """TensorBoard events holding train/loss, one log per rank with its own lines, the save events in progress.jsonl
    and the last checkpoint in the status lines, and the summary table at the end."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    proc, out = main_job
    metrics = json.loads((out / "metrics.json").read_text())
    events = sorted(out.glob("runs/*/events.out.tfevents.*"))
    assert len(events) == 1, sorted(p.name for p in out.iterdir())
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    losses = [e.value for e in acc.Scalars("train/loss")]
    assert len(losses) >= 10 and losses[0] == pytest.approx(metrics["first_loss"], rel=1e-4)
    assert "train/learning_rate" in acc.Tags()["scalars"]
    for r in metrics["ranks"]:
        text = (out / "logs" / f"{r['hostname']}.rank{r['rank']}.log").read_text()
        assert f"[rank {r['rank']}/2] host={r['hostname']} " in text and f"[rank {1 - r['rank']}/2]" not in text
    assert len(list((out / "logs").iterdir())) == 2
    records = [json.loads(ln) for ln in (out / "progress.jsonl").read_text().splitlines()]
    saves = [r for r in records if r.get("event") == "save"]
    assert [(s["step"], s["checkpoint"]) for s in saves] == [(metrics["steps"], f"checkpoint-{metrics['steps']}")]
    assert re.search(r"step 10/\d+ \(\d+%\) \| loss [\d.]+ \| .* \| last checkpoint: none yet", proc.stdout)
    # the save line gives the size of the checkpoint on the head (one node: all of it) and the save's time
    said = re.search(rf"saved checkpoint-{metrics['steps']} \(step {metrics['steps']}; ([\d.]+) GB on the head, "
                     r"in ([\d.]+) s\)", proc.stdout)
    assert said and float(said.group(2)) > 0, proc.stdout[-3000:]
    returned = sum(p.stat().st_size for p in (out / f"checkpoint-{metrics['steps']}").rglob("*") if p.is_file())
    assert abs(float(said.group(1)) - returned / 1e9) <= 0.01, (said.group(0), returned)
    assert saves[0]["size_bytes"] > 0.9 * returned and saves[0]["save_s"] > 0, saves
    summary = proc.stdout.split("TASK [train_launch : Summarise the run]", 1)[1][:3000]
    assert f"\n        steps        {metrics['steps']} of {metrics['steps']} (world size 2; " in summary, summary
    assert f"\n        loss         {metrics['first_loss']:.4f} -> {metrics['last_loss']:.4f} (first -> last" in summary
    assert re.search(r"\n        checkpoints  (none kept|\d+ kept: checkpoint-)", summary)
    for row in ("model/  ", "metrics.json  ", "loss_curve.png  ", "runs/  ", "logs/  ", "train.log  "):
        assert f"\n                       {row}" in summary, (row, summary)


def test_main_job_model_reloads_and_predicts(main_job):
    """The model that came back loads with from_pretrained and fills masks far better than chance."""
    import torch
    from datasets import load_from_disk
    from transformers import AutoModelForMaskedLM, AutoTokenizer, DataCollatorForLanguageModeling

    _, out = main_job
    job = json.loads((out / "job.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    model = AutoModelForMaskedLM.from_pretrained(out / "model").eval()
    tok = AutoTokenizer.from_pretrained(out / "model")
    import yaml

    group_vars = yaml.safe_load((REPO / "inventory/local/group_vars/all.yml").read_text())
    data_dir = Path(group_vars["local_ssd_dir"]) / "data" / job["data_key"] / "dataset"
    ds = load_from_disk(str(data_dir))
    split = ds["train"] if hasattr(ds, "keys") and "train" in ds else ds
    torch.manual_seed(0)
    collator = DataCollatorForLanguageModeling(tok, mlm=True, mlm_probability=0.15)
    batch = collator([{"input_ids": split[i]["input_ids"]} for i in range(8)])
    with torch.no_grad():
        loss = model(**batch).loss.item()
    assert loss < metrics["first_loss"] - 0.5, (loss, metrics["first_loss"])

    text = f"the python {tok.mask_token} reference"
    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    pos = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0]
    top = tok.convert_ids_to_tokens(int(logits[0, pos].argmax()))
    assert top not in tok.all_special_tokens


def test_site_yml_again_changes_nothing(main_job):
    """The main-job command runs site.yml on a machine `make provision` provisioned (make test runs it first, and
    make unit needs it): that second site.yml, before train.yml, changes nothing."""
    proc, _ = main_job
    site = proc.stdout.split("ansible-playbook train.yml")[0]
    assert "ansible-playbook site.yml" in site, site[-2000:]
    counts = recap(site)
    # the tasks that changed something, named (CI keeps only the end of the log)
    changed = re.findall(r"^TASK \[(.+?)\] \**\n(?:(?!TASK \[).*\n)*?changed: ", site, flags=re.M)
    assert counts["changed"] == 0 and counts["failed"] == 0, (counts, changed)


def test_check_playbook_prints_the_parity_table_and_the_allreduce_table(main_job, tmp_path):
    proc = run([str(ANSIBLE_PLAYBOOK), "playbooks/check.yml"], tmp_path / "check.log", timeout=10 * 60)
    assert proc.returncode == 0, proc.stdout[-3000:]
    text = proc.stdout
    assert re.search(r"localhost\s+/opt/deepspeed-cluster/venv\s+3\.\d+\.\d+\s+2\.13\.0\+cpu\s+-\s+-\s+0\.\d+\.\d+\s+\d+ ops",
                     text), text[-3000:]
    assert "test (gloo)" in text and "busbw = algbw x 2(n-1)/n" in text
    row = re.search(r"all ranks\s+2\s+16\.0\s+([\d.]+)\s+([\d.e+-]+)\s+([\d.e+-]+)\s+ok", text)
    assert row, text[-3000:]
    assert float(row.group(3)) == pytest.approx(float(row.group(2)), rel=0.01)  # n = 2: busbw = algbw x 2(1)/2


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        (["-e", "model=nosuchmodel"], r"nosuchmodel.*bert"),
        (["-e", "model=bert", "-e", "max_steps=-5"], r"max_steps"),
        (["-e", "model=bert", "-e", "dataset_path=/no/such/corpus"], r"/no/such/corpus.*does not exist"),
        # data that cannot be prepared: the error line of train/data/prepare_data.py is the failure a user sees
        (["-e", "model=bert", "-e", "model_size=tiny", "-e", "dataset_path={tmp}/empty.txt"],
         r"\[ERROR\]: Task failed: Action failed: host localhost: the corpus \(.*/empty.txt\) holds no text"),
        (["-e", "model=bert", "-e", "model_size=tiny", "-e", "dataset_path=/usr/bin/true"],
         r"\[ERROR\]: Task failed: Action failed: host localhost: /usr/bin/true is not UTF-8 text \(bad byte at offset \d+\); "
         r"convert it"),
        (["-e", "model=bert", "-e", "launcher=ansible-pull"], r"launcher must be one of: pdsh, ansible"),
        # a hub name is loaded on the head with the network (HF_HUB_OFFLINE dropped for that task only): here there is
        # none, so the error says so and how to stage the data set instead
        (["-e", "model=bert", "-e", "model_size=tiny", "-e", "dataset_path=hub:Salesforce/wikitext:wikitext-2-raw-v1"],
         r"host localhost: cannot reach the Hugging Face hub to load Salesforce/wikitext .*save_to_disk"),
        # a knob of the launch step is checked with the plan (train/controller/knobs.py: roles/train_launch's spec),
        # before staging
        (["-e", "model=bert", "-e", "model_size=tiny", "-e", "train_end_timeout_s=abc"],
         r"error: train_end_timeout_s must be a number, got 'abc' \(-e train_end_timeout_s\); give "
         r"train_end_timeout_s a number in \[0, inf\), default 1800"),
        # a node-side preflight failure (cluster_check) also stops before anything is written
        (["-e", "model=bert", "-e", "cluster_check_min_free_gb=100000000"],
         r"host localhost: local_ssd_dir \S+ has [\d.]+ GB free, the check wants at least 100000000.0 GB"),
        # a node without the venv (not provisioned, or a wrong venv_dir): named with the fix, no interpreter error
        (["-e", "model=bert", "-e", "model_size=tiny", "-e", "venv_dir={tmp}/novenv"],
         r"Action failed: host localhost: \S+/novenv/bin/python is missing \(venv_dir\); provision the node first"),
    ],
)
def test_bad_input_stops_before_anything_runs(extra, expect, tmp_path):
    outputs = REPO / "outputs"
    before = set(outputs.iterdir()) if outputs.exists() else set()
    (tmp_path / "empty.txt").write_text("")
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    proc = run([str(ANSIBLE_PLAYBOOK), "train.yml", *extra], tmp_path / "bad.log", timeout=5 * 60)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout
    assert re.search(expect, " ".join(proc.stdout.split())), proc.stdout[-3000:]  # YAML output wraps long lines
    after = set(outputs.iterdir()) if outputs.exists() else set()
    assert after == before, "a bad job must not create a run directory"
    assert "Launch deepspeed" not in proc.stdout
    if "dataset_path" not in " ".join(extra):
        assert "Prepare data" not in proc.stdout and "Copy what runs on a node" not in proc.stdout


def test_a_run_that_launched_and_failed_keeps_its_log(tmp_path):
    """A script that dies at start: the run's directory keeps job.json, ds_config.json and train.log (with the
    script's error), and the failure says where they are. Its run name is then taken."""
    script = tmp_path / "dies.py"
    script.write_text("raise SystemExit('dies-at-start: the data it needs is missing')\n")
    out = tmp_path / "outputs"
    extra = {"script": str(script), "run_name": "dies", "train_output_dir": str(out), "train_poll_seconds": 2}
    proc = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", json.dumps(extra)], tmp_path / "dies.log", timeout=5 * 60)
    assert proc.returncode != 0
    text = " ".join(proc.stdout.split())
    assert f"run dies failed: training exited with status" in text and f"is kept in {out}/dies" in text, text[-3000:]
    assert "Every process of the run was stopped on" in text and "(none is left)" in text, text[-3000:]
    assert {p.name for p in (out / "dies").iterdir()} >= {"job.json", "ds_config.json", "train.log", "hostfile"}
    assert "dies-at-start: the data it needs is missing" in (out / "dies" / "train.log").read_text()
    # each rank's own log came back too, its error in it, and the summary says the run failed
    for rank, said in rank_logs(out / "dies").items():
        assert "dies-at-start: the data it needs is missing" in said, (rank, said[-2000:])
    assert "run dies: FAILED, what came back" in proc.stdout
    assert "not retried: " in text, text[-3000:]  # the restart policy's word: an error at start is not retried


def test_a_rank_killed_after_a_checkpoint_restarts_the_run_by_itself_in_the_same_train_yml(tmp_path):
    """The restart policy's defaults on this one-node cluster: rank 1 SIGKILLed once checkpoint-20 is saved. The same
    train.yml ends with exit 0, having gone on by itself from checkpoint-20 (restart 1 of 3, the same node and world
    size), and the summary, metrics.json and progress.jsonl say the fault and how long the run took to train again."""
    import signal

    out = tmp_path / "outputs"
    run_name = f"restarts-{int(time.time())}"
    extra = {"model": "bert", "model_size": "tiny", "max_steps": 40, "save_steps": 10, "logging_steps": 5,
             "warmup_steps": 2, "run_name": run_name, "train_output_dir": str(out), "train_poll_seconds": 2}
    log = tmp_path / "restart.log"
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    with open(log, "w") as sink:
        proc = subprocess.Popen([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", json.dumps(extra)], cwd=REPO, env=env,
                                stdout=sink, stderr=subprocess.STDOUT, text=True)
    status = STALE_DEEPSPEED_ENV.parent.parent / "runs" / run_name / "ranks" / "rank-1.json"
    try:
        deadline = time.monotonic() + 600
        while "saved checkpoint-20" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        assert proc.poll() is None and status.is_file(), log.read_text()[-3000:]
        os.kill(json.loads(status.read_text())["pid"], signal.SIGKILL)
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = " ".join(log.read_text().split())
    assert proc.returncode == 0, text[-4000:]
    # (Ansible's YAML output doubles the line's apostrophe)
    assert re.search(r"fault: rank 1 on \S+ was killed \(no exit recorded: SIGKILL or the kernel'{1,2}s OOM killer\) — "
                     r"restart 1 of 3 from checkpoint-(\d+) on \S+ \(world size 2 -> 2\)", text), text[-4000:]
    m = json.loads((out / run_name / "metrics.json").read_text())
    assert m["steps"] == 40 and m["world_size"] == 2, m
    [a] = m["attempts"]
    assert a["fault"]["kind"] == "rank_killed" and a["fault"]["rank"] == 1 and a["checkpoint_step"] >= 20, a
    assert 0 < a["recover_s"] < 600, a
    assert re.search(r"fault 1 rank_killed of rank 1 on \S+ at step \d+, training again \d+ s later; from "
                     r"checkpoint-\d+", text), text[-4000:]
    events = [json.loads(ln) for ln in (out / run_name / "progress.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events if e.get("event") in ("restart", "recovered")] == ["restart", "recovered"]
    assert (out / run_name / "attempt-1" / "train.log").is_file()


def rank_logs(run_dir, world_size=2):
    """The per-rank logs a run brought back, {rank: text}: ``run_dir/logs/<host>.rank<R>.log``, one per rank.

    Assertions about what several ranks printed read these, never the run's train.log, where the ranks' lines
    interleave (even mid-line). Raises AssertionError when a rank's log is missing."""
    import socket

    logs = {rank: run_dir / "logs" / f"{socket.gethostname()}.rank{rank}.log" for rank in range(world_size)}
    missing = [str(path) for path in logs.values() if not path.is_file()]
    assert not missing, f"no rank log {missing}; the run's files: {sorted(p.name for p in run_dir.iterdir())}"
    return {rank: path.read_text() for rank, path in logs.items()}


def test_a_plain_deepspeed_script_runs_with_concrete_config_values(tmp_path):
    """A script that builds no HF Trainer (deepspeed.initialize(config=args.deepspeed)) gets a ds_config without
    "auto" (only the Trainer fills those; DeepSpeed itself fails on them) and trains on both ranks."""
    from train.tests.test_plan import PLAIN_DS

    script = tmp_path / "plain_ds.py"
    script.write_text(PLAIN_DS)
    out = tmp_path / "outputs"
    extra = {"script": str(script), "run_name": "plain", "train_output_dir": str(out), "train_poll_seconds": 2,
             "script_args": ["--per_device_train_batch_size", "4", "--max_steps", "3", "--warmup_steps", "1"]}
    before = set(Path("/dev/shm").glob("deepspeed_allreduce_buffer_*"))
    proc = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", json.dumps(extra)], tmp_path / "plain.log", timeout=10 * 60)
    assert proc.returncode == 0, proc.stdout[-4000:]
    # the script calls deepspeed.init_distributed itself: each rank unlinks its CPU all-reduce buffer right after it
    # (train.rank.patches.release_after_deepspeed_init), or every such run would leave ~67 MB a rank in /dev/shm
    left = set(Path("/dev/shm").glob("deepspeed_allreduce_buffer_*")) - before
    assert not left, sorted(str(f) for f in left)
    ds = json.loads((out / "plain" / "ds_config.json").read_text())
    assert "auto" not in json.dumps(ds) and ds["train_batch_size"] == 4 * 2
    ranks = rank_logs(out / "plain")
    assert all("plain-ds-done" in text for text in ranks.values()), ranks
    log = (out / "plain" / "train.log").read_text()  # the launcher's own lines: one process, never interleaved
    assert log.count("exits successfully") == 2, log[-2000:]


def test_a_rank_that_never_gets_through_the_rendezvous_stops_the_run_within_the_bound(tmp_path):
    """Rank 1 of a plain DeepSpeed script never reaches init_distributed (it sleeps 10 min first), so rank 0 waits
    in torch's rendezvous, which would wait 30 min: with -e train_rendezvous_timeout_s=20 the run is stopped about
    20 s after the ranks started, naming the ranks that did not join, and no process of it is left."""
    from train.tests.test_plan import PLAIN_DS

    script = tmp_path / "late.py"
    script.write_text("import os, time\nif os.environ.get('RANK') == '1':\n    time.sleep(600)\n" + PLAIN_DS)
    out = tmp_path / "outputs"
    import yaml

    # an earlier run named "late" on this node (another train_output_dir: an earlier test session) left its rank
    # status files: this run must not read rank 0's as its own (it said "waiting 1h09m" once)
    dsc_root = Path(yaml.safe_load((REPO / "inventory/local/group_vars/all.yml").read_text())["dsc_root"])
    stale = dsc_root / "runs" / "late" / "ranks"
    stale.mkdir(parents=True, exist_ok=True)
    (stale / "rank-0.json").write_text(json.dumps({"rank": 0, "world_size": 2, "host": "vm", "local_rank": 0,
                                                   "pid": 1, "end": None, "started": time.time() - 4000,
                                                   "joined": None}))
    extra = {"script": str(script), "run_name": "late", "train_output_dir": str(out), "train_poll_seconds": 2,
             "train_rendezvous_timeout_s": 20,
             "script_args": ["--per_device_train_batch_size", "4", "--max_steps", "3", "--warmup_steps", "1"]}
    t0 = time.monotonic()
    proc = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", json.dumps(extra)], tmp_path / "late.log", timeout=10 * 60)
    took = time.monotonic() - t0
    text = " ".join(proc.stdout.split())
    assert proc.returncode != 0, text[-3000:]
    # rank 0 waits inside the rendezvous for rank 1, so it has not joined either (on gloo)
    assert re.search(r"run late failed: the ranks did not all get through torch.distributed's rendezvous at "
                     r"\S+:\d+ within 20s: (rank 0 on \S+ \(waiting \d+s\), )?rank 1 on \S+ \(waiting \d+s\)",
                     text), text[-3000:]
    assert "raise train_rendezvous_timeout_s" in text and "(none is left)" in text, text[-3000:]
    assert "plain-ds-done" not in (out / "late" / "train.log").read_text()
    assert took < 5 * 60, took  # torch alone would have waited 30 min


def test_a_scripts_own_deepspeed_file_is_the_runs_recorded_and_staged_config(tmp_path):
    """-e script_args='... --deepspeed my.json': the ranks run with that file, and outputs/<run>/ds_config.json and
    the staged copy on the node are its exact text; job.json holds only the job keys that apply to a script."""
    import yaml

    from train.controller.resolve import SCRIPT_KEYS
    from train.tests.test_plan import PLAIN_DS

    script = tmp_path / "plain_ds.py"
    script.write_text(PLAIN_DS + 'print("micro", engine.train_micro_batch_size_per_gpu(), flush=True)\n')
    mine = ('{\n  "train_micro_batch_size_per_gpu": 3,\n  "gradient_accumulation_steps": 1,\n'
            '  "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "torch_adam": true}},\n'
            '  "zero_optimization": {"stage": 0},   "steps_per_print": 1000\n}\n')
    (tmp_path / "my.json").write_text(mine)
    out = tmp_path / "outputs"
    extra = {"script": str(script), "run_name": "own-ds", "train_output_dir": str(out), "train_poll_seconds": 2,
             "script_args": "--max_steps 3 --deepspeed my.json"}
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(REPO / "inventory" / "local"), str(REPO / "train.yml"),
                           "-e", json.dumps(extra)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=10 * 60)
    (tmp_path / "own-ds.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert (out / "own-ds" / "ds_config.json").read_text() == mine
    dsc_root = Path(yaml.safe_load((REPO / "inventory/local/group_vars/all.yml").read_text())["dsc_root"])
    assert (dsc_root / "runs" / "own-ds" / "ds_config.json").read_text() == mine  # the staged copy the ranks read
    ranks = rank_logs(out / "own-ds")
    assert all("micro 3\n" in text and "plain-ds-done" in text for text in ranks.values()), ranks
    launched = json.loads((out / "own-ds" / "launch.json").read_text())
    assert launched["ds_config_source"] == str(tmp_path / "my.json")
    job = json.loads((out / "own-ds" / "job.json").read_text())
    assert set(job) <= set(SCRIPT_KEYS) and "model" not in job and "max_seq_length" not in job, job
    assert job["max_steps"] == 3 and job["run_name"] == "own-ds"


def test_a_script_importing_what_the_node_venv_lacks_is_refused_before_launch(tmp_path):
    script = tmp_path / "needs_more.py"
    script.write_text("import os\nimport dsc_surely_not_installed\nfrom transformers import Trainer\n")
    proc = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", json.dumps({"script": str(script)})], tmp_path / "imp.log",
               timeout=300)
    assert proc.returncode != 0
    text = " ".join(proc.stdout.split())
    assert "host localhost: needs_more.py imports dsc_surely_not_installed, which" in text, text[-3000:]
    assert "python_env_packages_extra" in text and "Launch deepspeed" not in proc.stdout


def test_script_args_as_a_mapping_or_broken_json_are_refused(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("print('never runs')\n")
    for value in ({"a": 1}, "{not json", "[--max_steps, 5"):
        extra = {"script": str(script), "script_args": value}
        proc = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", json.dumps(extra)], tmp_path / "bad.log", timeout=300)
        assert proc.returncode != 0 and "Traceback" not in proc.stdout
        errors = [ln for ln in proc.stdout.splitlines() if ln.startswith("[ERROR]")]
        assert len(errors) == 1 and "script_args" in errors[0], (value, errors)
        assert "Launch deepspeed" not in proc.stdout


def test_script_data_that_is_a_file_is_refused_before_anything_is_staged(tmp_path):
    """script_data must be a directory (it is staged as one, its MANIFEST beside it): a file is refused in the plan
    step, saying how to give it, before anything is copied to a node."""
    script = tmp_path / "s.py"
    script.write_text("print('never runs')\n")
    data = tmp_path / "train.txt"
    data.write_text("some text\n")
    extra = {"script": str(script), "script_data": str(data), "script_args": ["--train_file", "{data}/train.txt"]}
    proc = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", json.dumps(extra)], tmp_path / "file.log", timeout=300)
    text = " ".join(proc.stdout.split())
    assert proc.returncode != 0 and "Traceback" not in proc.stdout
    assert f"script_data {data} on the head node localhost is a file; give a directory" in text, text[-3000:]
    assert "{data}/train.txt in script_args" in text
    assert "Copy what runs on a node" not in proc.stdout and "Launch deepspeed" not in proc.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


def test_user_script_args_contradicting_the_cluster_are_refused(tmp_path):
    """--bf16 on a CPU inventory is refused before anything runs, with the same message as -e precision=bf16."""
    script = tmp_path / "s.py"
    script.write_text("print('never runs')\n")
    extra = {"script": str(script), "script_args": "--bf16 --max_steps 10"}
    proc = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", json.dumps(extra)], tmp_path / "bad.log", timeout=5 * 60)
    assert proc.returncode != 0
    assert re.search(r"error: .*bf16", " ".join(proc.stdout.split())), proc.stdout[-3000:]
    assert "Launch deepspeed" not in proc.stdout

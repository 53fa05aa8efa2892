"""End to end on this machine (DSC_E2E=1, after test_end_to_end's provisioning): a run whose ansible-playbook is
interrupted goes on, ``-e attach=`` follows it to the end and brings its complete checkpoints back, and
``-e resume=`` goes on from the newest one with the step counter and the loss continuing. One short tiny-BERT run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from train.node import checkpoints, rank_status
from train.tests.test_end_to_end import ANSIBLE_PLAYBOOK, REPO, pytestmark, run  # noqa: F401 (pytestmark: DSC_E2E)


def ranks_of(run_name: str) -> list[int]:
    """Pids of this machine's ranks of run ``run_name`` (train.node.rank_status's rule for a run's processes)."""
    pids = rank_status.run_processes("/opt/deepspeed-cluster/runs", run_name).get(run_name, [])
    return [p for p in pids if b"--local_rank=" in Path(f"/proc/{p}/cmdline").read_bytes()]


def progress(out: Path) -> list[dict]:
    """The logged steps of progress.jsonl (its save events left out)."""
    records = [json.loads(ln) for ln in (out / "progress.jsonl").read_text().splitlines() if ln.strip()]
    return [r for r in records if "event" not in r]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """train.yml started, interrupted like Ctrl-C (SIGINT to its process group) once the first step is logged."""
    root = tmp_path_factory.mktemp("long")
    name = f"long-{int(time.time())}"
    log = root / "interrupted.log"
    cmd = [str(ANSIBLE_PLAYBOOK), "train.yml", "-e", "model=bert", "-e", "model_size=tiny", "-e", "max_steps=40",
           "-e", "warmup_steps=2", "-e", "save_steps=10", "-e", "logging_steps=5", "-e", f"run_name={name}",
           "-e", f"train_output_dir={root}", "-e", "train_poll_seconds=2"]
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    while not re.search(r"step \d+/40", log.read_text()):
        assert proc.poll() is None, f"train.yml ended before its first step (rc {proc.returncode}): {log}"
        assert time.monotonic() < deadline, f"no step logged in 600 s: {log}"
        time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)
    rc = proc.wait(timeout=60)
    return name, root, rc, log.read_text()


def test_an_interrupted_playbook_leaves_the_run_going_and_says_how_to_re_attach(interrupted):
    name, _, rc, text = interrupted
    assert rc != 0 and "User interrupted execution" in text
    assert f"ansible-playbook train.yml -e attach={name}" in re.sub(r"\s+", " ", text)
    assert len(ranks_of(name)) == 2, "the run's 2 ranks should go on without the playbook"


def test_attach_follows_the_run_to_its_end_and_brings_back_complete_checkpoints(interrupted, tmp_path):
    name, root, _, _ = interrupted
    proc = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", f"attach={name}", "-e", f"train_output_dir={root}",
                "-e", "train_poll_seconds=2"], tmp_path / "attach.log", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"re-attached to run {name} on localhost" in re.sub(r"\s+", " ", proc.stdout)
    out = root / name
    assert json.loads((out / "metrics.json").read_text())["steps"] == 40
    kept = [d.name for d in checkpoints.checkpoints(out)]
    assert kept == ["checkpoint-30", "checkpoint-40"], kept  # save_total_limit 2 of the tiny preset
    for d in checkpoints.checkpoints(out):
        assert checkpoints.verify(d) == [], d
        assert checkpoints.marker(d)["world_size"] == 2
    assert not ranks_of(name)
    again = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", f"attach={name}", "-e", f"train_output_dir={root}"],
                tmp_path / "attach-again.log", timeout=300)
    assert again.returncode != 0 and "has no launcher job" in again.stdout, again.stdout[-2000:]


def test_resume_goes_on_from_the_newest_checkpoint_with_the_step_and_loss_continuing(interrupted, tmp_path):
    name, root, _, _ = interrupted
    out = root / name
    before = progress(out)
    assert before[-1]["step"] == 40
    proc = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", f"resume={name}", "-e", "max_steps=50",
                "-e", f"train_output_dir={root}", "-e", "train_poll_seconds=2"], tmp_path / "resume.log", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"resuming run {name} from step 40" in re.sub(r"\s+", " ", proc.stdout)
    after = progress(out)
    assert after[0]["step"] == 45 and after[-1]["step"] == 50, [r["step"] for r in after]
    # the loss goes on where it was (tiny batches: within 0.6), far below where training started
    assert abs(after[0]["loss"] - before[-1]["loss"]) < 0.6, (before[-1], after[0])
    assert after[0]["loss"] < before[0]["loss"] - 1.0
    assert (out / "attempt-1" / "train.log").is_file() and (out / "attempt-1" / "metrics.json").is_file()
    assert [d.name for d in checkpoints.checkpoints(out)] == ["checkpoint-40", "checkpoint-50"]
    assert checkpoints.verify(out / "checkpoint-50") == []
    refused = run([str(ANSIBLE_PLAYBOOK), "train.yml", "-e", f"resume={name}", "-e", "model=gpt2",
                   "-e", f"train_output_dir={root}"], tmp_path / "refused.log", timeout=300)
    assert refused.returncode != 0 and f"model gpt2 is not run {name}'s model bert" in refused.stdout

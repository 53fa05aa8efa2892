"""The end of a run in the follower (deepspeed_watch's end_within_s and end_s) through a real ansible-playbook on
this machine: after the progress record of the run's last step, a launcher job that does not end within the bound
(a rank stuck after its final save) fails the follower, saying where the run was; one that ends in time is timed
from that record to its end. Without liveness (none is asked for here)."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"  # the modules run with the system python


def follow(ansible_playbook, tmp_path, job_s, end_within_s):
    """A job sleeping ``job_s`` s whose progress.jsonl already holds the run's last step (20 of 20) after a save of
    checkpoint-20, followed with ``end_within_s``; (seconds, output, the follower's result)."""
    records = [{"step": 10, "max_steps": 20, "loss": 5.0, "elapsed_s": 5.0},
               {"event": "save", "step": 20, "checkpoint": "checkpoint-20", "elapsed_s": 9.0},
               {"step": 20, "max_steps": 20, "loss": 4.0, "elapsed_s": 10.0}]
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "train.log").write_text("[rank 0/1] host=h\nWriting model shards: 100%\n")
    book = tmp_path / "play.yml"
    book.write_text(f"""- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Start
      ansible.builtin.command: sleep {job_s}
      async: 120
      poll: 0
      register: job
    - name: Follow
      deepspeed_watch:
        jid: "{{{{ job.ansible_job_id }}}}"
        progress_file: {tmp_path}/progress.jsonl
        log_file: {tmp_path}/train.log
        poll_seconds: 1
        end_within_s: {end_within_s}
      register: res
      ignore_errors: true
    - name: Keep the result
      ansible.builtin.copy: {{content: "{{{{ res | to_json }}}}", dest: "{tmp_path}/result.json", mode: "0644"}}
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_FORCE_COLOR="0", ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_ACTION_PLUGINS=str(REPO / "roles" / "train_launch" / "action_plugins"),
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    t0 = time.monotonic()
    out = subprocess.run([ansible_playbook, "-i", "localhost,", "-e", f"ansible_python_interpreter={PYTHON}",
                          str(book)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    return time.monotonic() - t0, text, json.loads((tmp_path / "result.json").read_text())


def test_ranks_that_do_not_end_after_the_last_step_fail_the_run_within_the_bound(ansible_playbook, tmp_path):
    took, text, res = follow(ansible_playbook, tmp_path, 90, 3)
    assert res["failed"], text
    assert res["msg"].startswith("the ranks did not end within 3s of the run's last step (20 of 20; waited "), res
    assert "the launcher's last line: Writing model shards: 100%" in res["msg"], res["msg"]
    assert "its checkpoints up to step 20 are complete and come back" in res["msg"], res["msg"]
    assert "train_end_timeout_s" in res["msg"]
    assert took < 45, took  # not the job's 90 s


def test_ranks_that_end_in_time_are_timed_from_the_last_step(ansible_playbook, tmp_path):
    took, text, res = follow(ansible_playbook, tmp_path, 5, 60)
    assert not res.get("failed") and res["rc"] == 0, text
    # the last step's record was read at the first poll, at most a few seconds after the job started
    assert 1 <= res["end_s"] <= 6, res
    assert "the ranks ended " in text and " after the last step (the final checkpoint and model written)" in text

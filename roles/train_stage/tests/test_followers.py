"""The train_stage followers through a real ansible-playbook on this machine (connection local): the data
preparation's progress lines (prepare_data_watch) and a copy's per-file progress (stage_copy, synchronize run with
async) are printed while the job runs, not at its end, and nothing that is not a failure prints FAILED."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)


REPO = Path(__file__).resolve().parents[3]
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"  # the modules run with the system python


def play(ansible_playbook, tmp_path, tasks: str):
    """Run a one-play playbook on localhost; return [(seconds since start, line)] of its output and its rc."""
    book = tmp_path / "play.yml"
    book.write_text(f"- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n{tasks}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_FORCE_COLOR="0", ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_ACTION_PLUGINS=str(REPO / "roles" / "train_stage" / "action_plugins"),
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    t0 = time.monotonic()
    proc = subprocess.Popen([ansible_playbook, "-i", "localhost,", "-e", f"ansible_python_interpreter={PYTHON}", str(book)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [(time.monotonic() - t0, line.rstrip("\n")) for line in proc.stdout]
    return lines, proc.wait(timeout=300)


def first(lines, needle):
    found = [t for t, line in lines if needle in line]
    assert found, (needle, "\n".join(line for _, line in lines))
    return found[0]


def test_prepare_data_watch_relays_lines_while_the_job_runs_and_returns_its_result(ansible_playbook, tmp_path):
    log = tmp_path / "prepare.log"
    lines, rc = play(ansible_playbook, tmp_path, f"""
    - name: Start
      ansible.builtin.shell: "echo 'prepare [0s] one' >> {log}; sleep 4; echo 'prepare [4s] two' >> {log}; echo out; echo 'error: bad' >&2; exit 3"
      async: 60
      poll: 0
      register: job
    - name: Follow
      prepare_data_watch: {{jid: "{{{{ job.ansible_job_id }}}}", log_file: "{log}", poll_seconds: 1}}
      register: res
      failed_when: false
    - name: Show
      ansible.builtin.debug: {{msg: "rc={{{{ res.rc }}}} out={{{{ res.stdout_lines }}}} err={{{{ res.stderr_lines }}}}"}}
""")
    text = "\n".join(line for _, line in lines)
    assert rc == 0, text
    assert first(lines, "two") - first(lines, "localhost: prepare [0s] one") >= 2.5, text  # shown as it came
    assert "rc=3 out=['out'] err=['error: bad']" in text
    assert "FAILED" not in text and "RETRYING" not in text


def test_stage_copy_shows_each_file_while_copying_and_copies_like_synchronize(ansible_playbook, tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / "sub").mkdir(parents=True)
    for i, name in enumerate(["a.arrow", "b.arrow", "sub/c.json"]):
        (src / name).write_bytes(os.urandom(1_000_000 * (i + 1)))
    log = tmp_path / "copy.log"
    task = f"""
    - name: Copy
      stage_copy:
        src: "{src}/"
        dest: "{dest}/"
        delete: true
        verify_host: true
        log_file: "{log}"
        total_bytes: 6000000
        follow_min_bytes: 0
        poll_seconds: 1
        rsync_opts: ["--bwlimit=1500"]
      register: res
    - name: Show
      ansible.builtin.debug: {{msg: "changed={{{{ res.changed }}}}"}}
"""
    lines, rc = play(ansible_playbook, tmp_path, task)
    text = "\n".join(line for _, line in lines)
    assert rc == 0, text
    assert all((dest / n).read_bytes() == (src / n).read_bytes() for n in ("a.arrow", "b.arrow", "sub/c.json"))
    assert "changed=True" in text and "copied 3 files, 6.0 MB in" in text, text
    # the first file's line comes seconds before the copy's end (1.5 MB/s for 6 MB)
    assert first(lines, "copied 3 files") - first(lines, "localhost: copied a.arrow (1.0 MB); 1 files") >= 2, text
    assert "of 6.0 MB so far" in text and "FAILED" not in text and "RETRYING" not in text
    lines, rc = play(ansible_playbook, tmp_path, task)  # again: synchronize's own idempotence
    text = "\n".join(line for _, line in lines)
    assert rc == 0 and "changed=False" in text and "nothing to copy" in text, text


def test_stage_copy_of_a_small_copy_runs_in_the_foreground_and_says_what_it_copied(ansible_playbook, tmp_path):
    """A copy whose total_bytes is below follow_min_bytes runs synchronize itself (no background job, no polls): the
    files arrive, one last line says how many and how much, none says "so far", and its rsync gives up after a
    minute without data moving (--timeout=60)."""
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    for i, name in enumerate(["a.arrow", "b.arrow"]):
        (src / name).write_bytes(os.urandom(100_000 * (i + 1)))
    task = f"""
    - name: Copy
      stage_copy:
        src: "{src}/"
        dest: "{dest}/"
        verify_host: true
        log_file: "{tmp_path / 'copy.log'}"
        total_bytes: 300000
        follow_min_bytes: 1000000
      register: res
    - name: Show
      ansible.builtin.debug:
        msg: "changed={{{{ res.changed }}}} cmd={{{{ res.cmd }}}} job={{{{ res.ansible_job_id | default('none') }}}}"
"""
    lines, rc = play(ansible_playbook, tmp_path, task)
    text = "\n".join(line for _, line in lines)
    assert rc == 0, text
    assert all((dest / n).read_bytes() == (src / n).read_bytes() for n in ("a.arrow", "b.arrow"))
    assert "localhost: copied 2 files, 0.3 MB in" in text and "so far" not in text, text
    assert "changed=True" in text and "--timeout=60" in text and "job=none" in text, text

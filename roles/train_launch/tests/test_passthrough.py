"""The variables of the admin's shell (node_env_passthrough) reach every rank, whatever the launcher: train_launch
writes them into the run directory of every node (mode 0600, never in Ansible's output, -vvv and --diff included),
and each rank reads that file first thing (train.rank.bootstrap.load_passthrough). Run with the controller's
ansible-playbook on localhost; the rank side in a fresh Python, as a rank starts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow  # runs ansible-playbook (test tiers: pytest.ini)

SECRET = "hf_9d1c7e0b55-not-for-logs"
NAMES = ("HF_TOKEN", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_MODE", "MLFLOW_TRACKING_URI",
         "MLFLOW_TRACKING_TOKEN", "COMET_API_KEY", "NEPTUNE_API_TOKEN")


def write(run_playbook, run_dir, env):
    variables = {"train_plan": {"paths": {"run_dir": str(run_dir)}}, "ansible_connection": "local",
                 "ansible_python_interpreter": sys.executable}
    (run_dir / "vars.json").write_text(json.dumps(variables))
    clean = {k: "" for k in NAMES}  # the test's own shell may set some: empty ones are skipped
    return run_playbook("roles/train_launch/tests/passthrough.yml", "-vvv", "--diff", "-i", "localhost,",
                        "-e", f"@{run_dir / 'vars.json'}", env={**clean, **env})


def as_a_rank_sees_it(run_dir, inherited):
    """{name: value} of NAMES in a rank's environment after train.rank.bootstrap.load_passthrough, with
    ``inherited`` in the environment it was started with (what a local launcher passes down)."""
    code = ("import json, os, sys; from train.rank import bootstrap; "
            "bootstrap.load_passthrough(sys.argv[1]); "
            f"print(json.dumps({{k: os.environ[k] for k in {list(NAMES)!r} if k in os.environ}}))")
    env = {"PATH": "/usr/bin:/bin", **inherited}
    out = subprocess.run([sys.executable, "-c", code, str(run_dir / "job.json")], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_every_rank_gets_the_shells_variables_from_a_private_file_and_the_log_never_shows_them(run_playbook, tmp_path):
    given = {"HF_TOKEN": SECRET, "WANDB_PROJECT": "bert mlm (a=b) \"$HOME\""}
    proc = write(run_playbook, tmp_path, given)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert SECRET not in proc.stdout + proc.stderr
    assert "passed to every rank from your shell: HF_TOKEN, WANDB_PROJECT" in proc.stdout
    env_file = tmp_path / "passthrough.env"
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    # as given, over what the rank inherited (a local launcher passes the playbook's environment down)
    assert as_a_rank_sees_it(tmp_path, {"WANDB_PROJECT": "stale", "WANDB_MODE": "offline"}) == {**given,
                                                                                                  "WANDB_MODE": "offline"}

    # a later attempt (-e resume=) from a shell without them: the staging removes the file, nothing of the earlier
    # one is passed
    proc = write(run_playbook, tmp_path, {})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not env_file.exists() and "passed to every rank" not in proc.stdout
    assert as_a_rank_sees_it(tmp_path, {}) == {}


def test_a_value_with_a_line_break_is_refused_by_name(run_playbook, tmp_path):
    proc = write(run_playbook, tmp_path, {"WANDB_API_KEY": "key-line-one\nkey-line-two", "HF_TOKEN": SECRET})
    assert proc.returncode != 0
    text = " ".join(proc.stdout.split())
    assert "Environment variable(s) WANDB_API_KEY (node_env_passthrough" in text and "line break" in text
    assert SECRET not in proc.stdout + proc.stderr and "key-line-one" not in proc.stdout
    assert not (tmp_path / "passthrough.env").exists()

"""The variables of the admin's shell (node_env_passthrough) reach a launcher that Ansible or srun starts, or the one
launcher of a single node: train_launch writes them into the run directory (mode 0600, never in Ansible's output,
-vvv and --diff included) and the launch's shell line reads that file first (train.controller.launch.shell_line).
Run with the controller's ansible-playbook on localhost."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from train.controller.launch import shell_line  # noqa: E402

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


def test_the_launcher_gets_the_shells_variables_from_a_private_file_and_the_log_never_shows_them(run_playbook, tmp_path):
    proc = write(run_playbook, tmp_path, {"HF_TOKEN": SECRET, "WANDB_PROJECT": "bert mlm (a=b)"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert SECRET not in proc.stdout + proc.stderr
    assert "passed to every rank from your shell: HF_TOKEN, WANDB_PROJECT" in proc.stdout
    env_file = tmp_path / "passthrough.env"
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    log = tmp_path / "launcher.log"
    probe = [sys.executable, "-c", "import json, os; print(json.dumps([os.environ.get('HF_TOKEN'), "
             "os.environ.get('WANDB_PROJECT'), os.environ.get('WANDB_API_KEY')]))"]
    subprocess.run(["sh", "-c", shell_line(probe, str(log), str(env_file))], check=True, env={"PATH": "/usr/bin:/bin"})
    assert json.loads(log.read_text()) == [SECRET, "bert mlm (a=b)", None]

    # a later attempt (-e resume=) from a shell without them: the file goes, nothing of the earlier one is passed
    proc = write(run_playbook, tmp_path, {})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not env_file.exists() and "passed to every rank" not in proc.stdout


def test_a_value_the_shell_line_cannot_carry_is_refused_by_name(run_playbook, tmp_path):
    proc = write(run_playbook, tmp_path, {"WANDB_API_KEY": "abc$HOME", "HF_TOKEN": SECRET})
    assert proc.returncode != 0
    text = " ".join(proc.stdout.split())
    assert "Environment variable(s) WANDB_API_KEY (node_env_passthrough" in text and "double quote" in text
    assert SECRET not in proc.stdout + proc.stderr and "abc$HOME" not in proc.stdout
    assert not (tmp_path / "passthrough.env").exists()

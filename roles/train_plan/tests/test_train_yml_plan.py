"""train.yml's plan through Ansible, in check mode on a copy of the local inventory (needs `make provision`: the
preflight reads the node venv): where job overrides may come from, --check launching nothing, and the playbooks
working from any directory."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
LOCAL = REPO / "inventory" / "local"
VENV = Path(yaml.safe_load((LOCAL / "group_vars" / "all.yml").read_text())["venv_dir"])

pytestmark = [pytest.mark.slow,  # runs ansible-playbook train.yml and site.yml (test tiers: pytest.ini)
              pytest.mark.skipif(not (VENV / "bin" / "deepspeed").exists(),
                                 reason=f"needs a provisioned machine ({VENV}; make provision)")]


def ansible_playbook():
    for cand in (REPO / ".venv" / "bin" / "ansible-playbook", shutil.which("ansible-playbook")):
        if cand and os.path.exists(cand):
            return str(cand)
    pytest.skip("ansible-playbook not found (make setup)")


def inventory(tmp_path, **group_vars):
    inv = tmp_path / "inv"
    shutil.copytree(LOCAL, inv)
    gv = yaml.safe_load((inv / "group_vars" / "all.yml").read_text())
    gv.update(group_vars)
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(gv))
    return inv


def check(tmp_path, inv, *extra, cwd=None, playbook="train.yml", env_extra=None):
    """ansible-playbook -i inv <repo>/<playbook> --check, from cwd (default: a directory outside the repository,
    with no ANSIBLE_* settings: what a user who is not in the repository gets)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_FORCE_COLOR="0", ANSIBLE_STDOUT_CALLBACK="default", **(env_extra or {}))
    out = tmp_path / "outputs"
    proc = subprocess.run([ansible_playbook(), "-i", str(inv), str(REPO / playbook), "--check",
                           "-e", f"train_output_dir={out}", "-e", "model_size=tiny", *extra],
                          cwd=cwd or tmp_path, env=env, capture_output=True, text=True, timeout=600)
    return proc, " ".join(proc.stdout.split())


def planned_steps(text):
    found = re.findall(r"run \S+: bert \(tiny\), (\d+) steps", text)
    assert found, text[-3000:]
    return int(found[-1])


def test_inventory_variables_named_like_job_keys_do_not_change_the_job(tmp_path):
    proc, text = check(tmp_path, inventory(tmp_path, max_steps=7, seed=99))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert planned_steps(text) == 150  # the tiny preset's own max_steps
    assert "--seed 42" in text and "--seed 99" not in text


def test_extra_vars_and_train_defaults_do(tmp_path):
    inv = inventory(tmp_path, train_defaults={"max_steps": 90, "seed": 5})
    proc, text = check(tmp_path, inv)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert planned_steps(text) == 90 and "--seed 5" in text
    proc, text = check(tmp_path, inv, "-e", "max_steps=110")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert planned_steps(text) == 110


def test_a_bad_train_defaults_key_is_one_line(tmp_path):
    proc, text = check(tmp_path, inventory(tmp_path, train_defaults={"maxsteps": 9}))
    assert proc.returncode != 0 and "Traceback" not in proc.stdout
    assert "error: unknown job key 'maxsteps' in train_defaults (inventory train_defaults)" in text


def test_a_passed_variable_the_ranks_cannot_read_stops_the_run_at_the_plan(tmp_path):
    """node_env_passthrough's values are read and checked by the plan, before the GPUs are read or data staged."""
    secret = "wandb-key-line-one"
    proc, text = check(tmp_path, inventory(tmp_path), env_extra={"WANDB_API_KEY": f"{secret}\nline-two"})
    assert proc.returncode != 0 and "Traceback" not in proc.stdout
    assert "Environment variable(s) WANDB_API_KEY (node_env_passthrough" in text and "line break" in text
    assert secret not in proc.stdout + proc.stderr
    assert "Read the memory of every node's GPUs" not in text and "Prepare data" not in text


def test_check_mode_prints_the_plan_and_launches_nothing_from_another_directory(tmp_path):
    proc, text = check(tmp_path, inventory(tmp_path), "-e", "run_name=checkonly")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"launch on localhost: \S+/bin/deepspeed --hostfile \S+/runs/checkonly/hostfile "
                     r"--master_addr 127\.0\.0\.1 --master_port 29500 --no_ssh_check --module train\.rank\.pretrain ", text)
    assert "global batch 16" in text and "Show the nodes side by side" in text  # plan and preflight ran
    assert not (tmp_path / "outputs").exists()
    dsc_root = Path(yaml.safe_load((LOCAL / "group_vars" / "all.yml").read_text())["dsc_root"])
    assert not (dsc_root / "runs" / "checkonly").exists()
    assert "Launch deepspeed" not in text and "Prepare data" not in text


def test_site_yml_check_on_the_provisioned_machine_changes_nothing(tmp_path):
    """`ansible-playbook site.yml --check` on this provisioned machine predicts changed=0 (the python_env
    pip tasks were once counted as changed in check mode)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_FORCE_COLOR="0", ANSIBLE_STDOUT_CALLBACK="default")
    proc = subprocess.run([ansible_playbook(), "-i", str(LOCAL), str(REPO / "site.yml"), "--check"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:]
    recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", proc.stdout, re.M)
    assert recap and all(n == "0" for _, n in recap), (recap, re.findall(r"^changed: .*$|^TASK \[.*$", proc.stdout, re.M))

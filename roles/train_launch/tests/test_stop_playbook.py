"""train.yml -e stop=<run> through a real ansible-playbook on this machine (a one-node inventory, connection local,
its runs under tmp_path): a run that has only its claim on the cluster (its train.yml was checked, not launched yet:
train/node/rank_status.py's holder process) is stopped -- the holder ends, the claim is gone, the stop names the
node -- and the stop's output carries no template warning (the later plays' skipped tasks have no plan to name)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)

REPO = Path(__file__).resolve().parents[3]


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_stop_of_a_claimed_run_ends_its_claim_and_warns_of_nothing(run_playbook, tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "accelerator": "cpu",
                 "slots": 1, "venv_dir": sys.prefix, "local_ssd_dir": str(tmp_path / "ssd"),
                 "dsc_root": str(tmp_path / "dsc")},
        "children": {"head": {"hosts": {"head-1": None}}, "workers": {"hosts": {}}}}}))
    runs = tmp_path / "dsc" / "runs"
    claimed = subprocess.run([sys.executable, "-m", "train.node.rank_status", "claim", str(runs), "c1", "120",
                              "me@ctl"], cwd=REPO, capture_output=True, text=True, check=True)
    holder = json.loads(claimed.stdout)["pid"]
    try:
        proc = run_playbook("train.yml", "-i", str(inventory), "-e", "stop=c1")
        text = " ".join(proc.stdout.split())
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "run c1: stopped on head-1; no process of it is left on head-1." in text, text[-3000:]
        assert "[WARNING]" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        deadline = time.monotonic() + 10
        while _alive(holder) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(holder) and not (runs / ".claim.json").exists()
    finally:
        if _alive(holder):
            subprocess.run(["kill", str(holder)], check=False)

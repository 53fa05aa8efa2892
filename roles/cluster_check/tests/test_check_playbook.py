"""playbooks/check.yml (preflight) on a two-node inventory whose nodes are both this machine, reached with Ansible's
local connection: the parity table has a row per node (a node listed in two groups once), and the head's
`ssh -o BatchMode=yes <hostfile entry> true` -- the head's own entry included -- fails here because the
names resolve nowhere, so the preflight must stop with the message that names the head, the entry and the fix.
With -e cluster_check_launcher=ansible (no ssh between nodes) the same inventory passes."""

import re
import sys

import pytest
import yaml

pytest.importorskip("deepspeed")  # the preflight probes the venv: run with the node venv's Python (make unit)

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)


@pytest.fixture
def inventory(tmp_path):
    hosts = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "accelerator": "cpu",
                 "slots": 1, "venv_dir": sys.prefix, "local_ssd_dir": str(tmp_path / "ssd"),
                 "dsc_root": str(tmp_path / "dsc")},
        "children": {"head": {"hosts": {"head-1": {"cluster_address": "10.9.0.10"}}},
                     "workers": {"hosts": {"head-1": None, "worker-9": {"cluster_address": "10.9.0.19"}}}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(hosts))
    return str(path)


def test_preflight_stops_when_the_head_cannot_ssh_to_an_entry(run_playbook, inventory):
    proc = run_playbook("playbooks/check.yml", "-i", inventory, "-e", "cluster_check_health=false")
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    table = re.findall(r"^\s+(head-1|worker-9)\s+%s\s" % re.escape(sys.prefix), out, re.M)
    assert table == ["head-1", "worker-9"], out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("[ERROR]")]
    assert errors and "host head-1 (head): `ssh -o BatchMode=yes head-1 true` failed" in errors[0], errors
    assert "ansible-playbook site.yml" in errors[0] and "-e launcher=ansible" in errors[0]
    assert "worker-9" in out.split("Stop when the head cannot reach a hostfile entry over ssh", 1)[1]


def test_preflight_passes_the_same_nodes_without_ssh_launch(run_playbook, inventory):
    proc = run_playbook("playbooks/check.yml", "-i", inventory, "-e", "cluster_check_health=false",
                        "-e", "cluster_check_launcher=ansible")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Show the nodes side by side" in proc.stdout


def test_preflight_names_an_unreachable_node(run_playbook, inventory):
    hosts = yaml.safe_load(open(inventory))
    hosts["all"]["children"]["workers"]["hosts"]["worker-9"] = {
        "ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,  # nothing listens on port 1
        "cluster_address": "10.9.0.19"}
    with open(inventory, "w") as handle:
        yaml.safe_dump(hosts, handle)
    proc = run_playbook("playbooks/check.yml", "-i", inventory, "-e", "cluster_check_health=false",
                        "-e", "cluster_check_launcher=ansible")
    # the play is any_errors_fatal: the first task on the node stops every node, with Ansible's own line naming it
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "fatal: [worker-9]: UNREACHABLE!" in proc.stdout
    assert "ssh: connect to host 127.0.0.1 port 1: Connection refused" in proc.stdout
    assert "Compare the nodes" not in proc.stdout
    assert "Traceback" not in proc.stdout and "HostVarsVars" not in proc.stdout

"""NCCL_*/GLOO_* settings. A name NCCL or gloo does not know is refused with the closest known one (they
would ignore it without a word); NCCL_IB_DISABLE also disables the HPC-X/IB plugin (NCCL_IBEXT_DISABLE); per-node
NCCL settings go into nccl.conf (node_env_nccl_conf), since .deepspeed_env gives every rank the head's values."""

import json
import sys

import pytest
import yaml

from test_deepspeed_env import as_ranks_see_it, render

pytestmark = pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)


def errors(proc):
    return [" ".join(line.split()) for line in proc.stdout.splitlines() if line.startswith("[ERROR]")]


@pytest.mark.parametrize("name,closest", [
    ("NCCL_SOCKETIFNAME", "NCCL_SOCKET_IFNAME"),
    ("NCCL_IB_HCAS", "NCCL_IB_HCA"),
    ("nccl_debug", "NCCL_DEBUG"),
    ("GLOO_SOCKET_IFNAM", "GLOO_SOCKET_IFNAME"),
])
def test_a_misspelled_nccl_or_gloo_name_is_refused_with_the_closest_known_one(run_playbook, tmp_path, name, closest):
    proc, out = render(run_playbook, tmp_path, {"NCCL_DEBUG": "WARN", name: "eth0"})
    assert proc.returncode != 0
    (error,) = errors(proc)
    assert 'Environment variable "%s"' % name in error
    assert "NCCL and gloo ignore a name they do not know" in error
    assert "the closest known name is %s " % closest in error
    assert "add it to node_env_known_env_names" in error
    assert not out.exists()


def test_a_name_with_a_trailing_blank_is_refused_with_the_name_it_resembles(run_playbook, tmp_path):
    proc, out = render(run_playbook, tmp_path, {"NCCL_IB_DISABLE ": "1"})
    assert proc.returncode != 0
    (error,) = errors(proc)
    assert 'Environment variable "NCCL_IB_DISABLE "' in error and "(did you mean NCCL_IB_DISABLE?)" in error
    assert not out.exists()


def test_the_job_file_extra_is_checked_too(run_playbook, tmp_path):
    proc, out = render(run_playbook, tmp_path, {}, node_env_deepspeed_env_extra={"NCCL_ALGOS": "Ring"})
    assert proc.returncode != 0
    assert "the closest known name is NCCL_ALGO " in errors(proc)[0]


def test_known_names_and_names_the_inventory_declares_reach_the_ranks(run_playbook, tmp_path):
    extra = {"NCCL_SOCKET_IFNAME": "^lo,docker", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "=mlx5_0:1",
             "NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_SHARP_DISABLE": "1", "OTHER_SETTING": "x"}
    proc, out = render(run_playbook, tmp_path, extra, node_env_known_env_names=["NCCL_SHARP_DISABLE"])
    assert proc.returncode == 0, proc.stdout[-3000:]
    seen = as_ranks_see_it(out)
    for key, value in extra.items():
        assert seen[key] == value
    # and without the declaration the plugin's name is refused
    proc, out = render(run_playbook, tmp_path, extra)
    assert proc.returncode != 0 and 'Environment variable "NCCL_SHARP_DISABLE"' in errors(proc)[0]


@pytest.mark.parametrize("extra,job,expected", [
    ({"NCCL_IB_DISABLE": "1"}, {}, "1"),
    ({"NCCL_IB_DISABLE": 1}, {}, "1"),
    ({"NCCL_IB_DISABLE": "1", "NCCL_IBEXT_DISABLE": "0"}, {}, "0"),  # the user's own value stands
    ({"NCCL_IB_DISABLE": "0"}, {}, None),
    ({}, {}, None),
    ({}, {"NCCL_IB_DISABLE": "1"}, "1"),  # set for one job (node_env_deepspeed_env_extra)
])
def test_disabling_ib_disables_the_hpcx_ib_plugin_too(run_playbook, tmp_path, extra, job, expected):
    proc, out = render(run_playbook, tmp_path, extra, node_env_deepspeed_env_extra=job)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert as_ranks_see_it(out).get("NCCL_IBEXT_DISABLE") == expected


def nodes(tmp_path, hosts, common=None):
    """An inventory of fake nodes (local connection), each with its own profile, caches and nccl.conf."""
    inventory = {}
    for name, hostvars in hosts.items():
        home = tmp_path / name
        home.mkdir(exist_ok=True)
        inventory[name] = dict({"venv_dir": str(home / "venv"), "local_ssd_dir": str(home / "ssd"),
                                "accelerator": "cpu", "node_env_profile_path": str(home / "profile"),
                                "node_env_nccl_conf_path": str(home / "nccl.conf"),
                                "ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                               **(common or {}), **hostvars)
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"head": {"hosts": {n: inventory[n] for n in list(hosts)[:1]}},
                                                         "workers": {"hosts": {n: inventory[n] for n in list(hosts)[1:]}}}}}))
    return str(path)


def test_per_node_nccl_settings_go_into_nccl_conf_above_the_admins_lines(run_playbook, tmp_path):
    hosts = {"head-1": {"node_env_nccl_conf": {"NCCL_SOCKET_IFNAME": "=eth0"}},
             "worker-1": {"node_env_nccl_conf": {"NCCL_SOCKET_IFNAME": "=eno1", "NCCL_IB_DISABLE": "1"}}}
    inventory = nodes(tmp_path, hosts, common={"node_env_extra": {"NCCL_DEBUG": "WARN"}})
    (tmp_path / "worker-1" / "nccl.conf").write_text("# the admin's\nNCCL_SOCKET_IFNAME=ib0\nNCCL_IB_TIMEOUT=22\n")
    proc = run_playbook("roles/node_env/tests/nodes.yml", "-i", inventory)
    assert proc.returncode == 0, proc.stdout[-3000:]
    head = (tmp_path / "head-1" / "nccl.conf").read_text().splitlines()
    assert [line for line in head if not line.startswith("#")] == ["NCCL_SOCKET_IFNAME==eth0"]
    worker = (tmp_path / "worker-1" / "nccl.conf").read_text().splitlines()
    settings = [line for line in worker if not line.startswith("#")]
    # ours first (NCCL keeps the first value of a name), NCCL_IBEXT_DISABLE added, the admin's lines kept below
    assert settings == ["NCCL_IB_DISABLE=1", "NCCL_IBEXT_DISABLE=1", "NCCL_SOCKET_IFNAME==eno1",
                        "NCCL_SOCKET_IFNAME=ib0", "NCCL_IB_TIMEOUT=22"]
    assert "# the admin's" in worker
    # a second run changes nothing
    proc = run_playbook("roles/node_env/tests/nodes.yml", "-i", inventory)
    assert proc.returncode == 0 and proc.stdout.count("changed=0") == 2, proc.stdout[-3000:]
    # {} takes the block out again and leaves the admin's lines
    hosts["worker-1"]["node_env_nccl_conf"] = {}
    proc = run_playbook("roles/node_env/tests/nodes.yml", "-i", nodes(tmp_path, hosts))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "worker-1" / "nccl.conf").read_text() == (
        "# the admin's\nNCCL_SOCKET_IFNAME=ib0\nNCCL_IB_TIMEOUT=22\n")


@pytest.mark.parametrize("conf,extra,why", [
    ({"NCCL_SOCKET_IFNAME": "eno1"}, {"NCCL_SOCKET_IFNAME": "eth0"}, "it is in node_env_extra too"),
    ({"GLOO_SOCKET_IFNAME": "eno1"}, {}, "gloo reads no configuration file"),
    ({"NCCL_SOCKETIFNAME": "eno1"}, {}, "the closest known name is NCCL_SOCKET_IFNAME "),
    ({"NCCL_SOCKET_IFNAME": '"eno1"'}, {}, "the value contains a quote"),
    ({"NCCL_SOCKET_IFNAME": "eno1 "}, {}, "leading or trailing blanks"),
    ({"HF_HOME": "/x"}, {}, "only NCCL_* names belong in nccl.conf"),
])
def test_nccl_conf_entries_that_would_not_work_are_refused(run_playbook, tmp_path, conf, extra, why):
    inventory = nodes(tmp_path, {"head-1": {"node_env_nccl_conf": conf, "node_env_extra": extra}})
    proc = run_playbook("roles/node_env/tests/nodes.yml", "-i", inventory)
    assert proc.returncode != 0
    (error,) = errors(proc)
    assert "host head-1: node_env_nccl_conf entry %s is refused" % json.dumps(list(conf)[0]) in error and why in error
    assert not (tmp_path / "head-1" / "nccl.conf").exists()


def test_node_env_extra_that_differs_from_the_heads_is_refused(run_playbook, tmp_path):
    """.deepspeed_env and the launcher's environment carry the head's values to every rank: worker-1's eno1 would
    never be used."""
    inventory = nodes(tmp_path, {
        "head-1": {"node_env_extra": {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "RUN_LABEL": "a"}},
        "worker-1": {"node_env_extra": {"NCCL_SOCKET_IFNAME": "eno1", "RUN_LABEL": "b"}},
        "worker-2": {"node_env_extra": {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}}})
    proc = run_playbook("roles/node_env/tests/nodes.yml", "-i", inventory)
    assert proc.returncode != 0
    (error,) = errors(proc)
    assert error.startswith("[ERROR]: Task failed: Action failed: host worker-1: node_env_extra GLOO_SOCKET_IFNAME is "
                            "(unset) here and eth0 on head-1, NCCL_SOCKET_IFNAME is eno1 here and eth0 on head-1, but")
    assert "node_env_nccl_conf" in error and '"eno,eth"' in error

"""Every rsync the playbooks start (ansible.posix.synchronize, and train_stage's stage_copy: synchronize followed
while it runs) checks host keys: verify_host true, and the copies
between the controller and a node also pass the inventory's ssh arguments (use_ssh_args), which carry the
known_hosts Ansible's own connection uses. The module's default (verify_host false) runs rsync with
`-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null`, accepting any host key."""

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
ACTIONS = ("ansible.posix.synchronize", "stage_copy")


def tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        if any(action in node for action in ACTIONS):
            yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks"):
            yield from tasks(node.get(key))


def test_every_synchronize_verifies_host_keys():
    found = []
    for path in sorted(REPO.glob("roles/*/tasks/*.yml")) + sorted(REPO.glob("playbooks/*.yml")):
        for task in tasks(yaml.safe_load(path.read_text())):
            args = next(task[a] for a in ACTIONS if a in task)
            found.append((path.relative_to(REPO), task["name"]))
            assert args.get("verify_host") is True, f"{path}: {task['name']!r} does not set verify_host: true"
            if "delegate_to" not in task:
                assert args.get("use_ssh_args") is True, f"{path}: {task['name']!r} lacks use_ssh_args: true"
    assert len(found) >= 7, found

"""node_env's entry points validate their inputs with meta/argument_specs.yml when they are included the way the
playbooks include them. Ansible looks an entry point's spec up by the literal tasks_from name, so
`tasks_from: deepspeed_env.yml` silently skipped the spec; every include in the repository names the entry point."""

import re
from pathlib import Path

import pytest
from test_deepspeed_env import render

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow  # runs Ansible (test tiers: pytest.ini)
def test_a_bad_value_is_refused_by_the_deepspeed_env_spec(run_playbook, tmp_path):
    proc, out = render(run_playbook, tmp_path, {}, node_env_deepspeed_env_extra=["NCCL_DEBUG"])
    assert proc.returncode != 0
    text = " ".join(proc.stdout.split())
    assert "Validating arguments against arg spec 'deepspeed_env'" in text
    assert "node_env_deepspeed_env_extra" in text and "dict" in text
    assert not out.exists()


def test_every_tasks_from_names_an_entry_point_with_a_spec():
    specs = {}
    for spec in REPO.glob("roles/*/meta/argument_specs.yml"):
        import yaml

        specs[spec.parent.parent.name] = set(yaml.safe_load(spec.read_text())["argument_specs"])
    found = []
    for path in list(REPO.glob("roles/*/tasks/*.yml")) + list(REPO.glob("playbooks/*.yml")):
        text = path.read_text()
        for name, entry in re.findall(r"name: (\w+)\n\s+tasks_from: (\S+)", text):
            found.append((path.relative_to(REPO), name, entry))
            assert entry in specs.get(name, set()), f"{path}: tasks_from {entry} of role {name} has no argument spec"
    assert len(found) >= 5, found

"""The roles' molecule scenarios, as molecule sees them: .config/molecule/config.yml with each
roles/<role>/molecule/<scenario>/molecule.yml deep-merged onto it (molecule/roles.sh passes the base with
--base-config). Reads the YAML only: no container, no molecule run, so this is a fast-tier test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / ".config" / "molecule" / "config.yml"
SCENARIOS = sorted(REPO.glob("roles/*/molecule/*/molecule.yml"))


def merge(a: dict, b: dict) -> dict:
    """b merged onto a as molecule.util.merge_dicts does: mappings key by key, anything else (a list) replaced."""
    out = dict(a)
    for key, b_value in b.items():
        a_value = a.get(key)
        if isinstance(a_value, dict) and isinstance(b_value, dict):
            out[key] = merge(a_value, b_value)
        else:
            out[key] = b_value
    return out


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def merged(path: Path) -> dict:
    return merge(load(BASE), load(path))


def scenario_id(path: Path) -> str:
    return f"{path.parents[2].name}/{path.parent.name}"


def test_scenarios_found():
    assert len(SCENARIOS) >= 6, SCENARIOS


@pytest.mark.parametrize("path", SCENARIOS, ids=scenario_id)
def test_merged_scenario(path):
    config = merged(path)
    assert config["driver"]["name"] == "podman"
    assert config["dependency"] == {"name": "galaxy", "enabled": False}
    assert config["provisioner"]["name"] == "ansible"
    assert config["provisioner"]["env"]["ANSIBLE_ROLES_PATH"] == "${MOLECULE_PROJECT_DIRECTORY}/.."
    assert config["verifier"]["name"] == "ansible"
    assert "idempotence" in config["scenario"]["test_sequence"]
    assert config["provisioner"]["inventory"]["group_vars"]["all"]["dsc_root"] == "/opt/deepspeed-cluster"
    platforms = config["platforms"]
    assert len(platforms) == 1, "one container per scenario"
    platform = platforms[0]
    assert platform["image"] == "localhost/bookworm-node"
    assert platform["pre_build_image"] is True
    assert platform["command"] == "sleep infinity"
    assert {"--runtime=runc", "--stop-signal=SIGKILL"} <= set(platform["extra_opts"])
    assert platform["ulimits"]


@pytest.mark.parametrize("path", SCENARIOS, ids=scenario_id)
def test_scenario_does_not_repeat_the_base(path):
    """A value the base already sets is not written again in a scenario (a different value overrides it)."""
    def repeats(base, scenario, where=""):
        for key, value in scenario.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                yield from repeats(base[key], value, f"{where}{key}.")
            elif key in base and base[key] == value:
                yield f"{where}{key}"
    assert not list(repeats(load(BASE), load(path)))


def test_container_names_differ():
    """cuda/distro runs in the background next to the others (molecule/roles.sh): one name each."""
    names = [platform["name"] for path in SCENARIOS for platform in load(path)["platforms"]]
    assert len(names) == len(set(names)), names


def test_roles_sh_runs_every_scenario_with_the_base():
    text = (REPO / "molecule" / "roles.sh").read_text(encoding="utf-8")
    listed = re.search(r"^all=\(([^)]*)\)", text, re.MULTILINE).group(1).split()
    assert sorted(listed) == sorted(scenario_id(path) for path in SCENARIOS)
    assert '--base-config "$repo/.config/molecule/config.yml"' in text


def test_merge_is_molecules():
    """The merge above gives what molecule's own does, where molecule is installed (the controller's .venv)."""
    util = pytest.importorskip("molecule.util")
    for path in SCENARIOS:
        assert merged(path) == util.merge_dicts(load(BASE), load(path)), path

"""Tests for train/controller/knobs.py: the train_* knobs of train.yml's roles, declared once in each role's
meta/argument_specs.yml (type, default, choices, a description ending in its range), checked with the job's keys in
the plan by the same validator Ansible runs at the role's start."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ansible")

from train.controller import knobs as K  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def test_every_knob_of_the_roles_is_found_and_every_number_has_a_range():
    found = K.load()
    specs = {}
    for role in K.KNOB_ROLES:
        spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        for entry in spec.values():
            specs.update({n: o for n, o in (entry.get("options") or {}).items()
                          if n.startswith("train_") and n not in K.NOT_KNOBS})
    assert set(found) == set(specs) and {"train_end_timeout_s", "train_stage_poll_seconds", "train_master_port"} <= \
        set(found)
    for name, knob in found.items():
        assert knob.type == specs[name].get("type", "str") and knob.help, name
        if knob.type in ("int", "float"):
            assert knob.range_text(), f"{name}: a number knob's description must end in its range, e.g. Range [0, inf)"
    assert found["train_master_port"].range_text() == "[1, 65535]"
    assert found["train_poll_seconds"].range_text() == "(0, inf)"
    assert found["train_end_timeout_s"].range_text() == "[0, inf)"


def test_a_knob_of_the_wrong_type_is_refused_in_one_line():
    with pytest.raises(K.KnobError) as err:
        K.check({"train_end_timeout_s": "abc", "max_steps": "x"})
    text = str(err.value)
    assert text.startswith("train_end_timeout_s must be a number, got 'abc' (-e train_end_timeout_s); give "
                           "train_end_timeout_s a number in [0, inf), default 1800 (Seconds the ranks may take"), text
    with pytest.raises(K.KnobError, match=r"^train_stage_tree must be a boolean \(true or false\), got 'maybe' "
                                          r"\(inventory train_stage_tree\)"):
        K.check({"train_stage_tree": "maybe"}, where="inventory")


@pytest.mark.parametrize("name, value", [
    ("train_end_timeout_s", "-1"), ("train_poll_seconds", "0"), ("train_master_port", "70000"),
    ("train_liveness_failures", "-3"), ("train_stage_prepare_timeout_s", "0"), ("train_stage_space_factor", "nan"),
])
def test_a_knob_out_of_its_range_is_refused(name, value):
    with pytest.raises(K.KnobError, match=rf"^{name} must be in [\[(][0-9]+, [0-9inf]+[\])], got '{value}' "
                                          rf"\(-e {name}\); give {name} "):
        K.check({name: value})


def test_good_values_come_back_converted_and_other_variables_are_left_alone():
    got = K.check({"train_end_timeout_s": "0", "train_liveness_failures": "5", "train_stage_tree": "false",
                   "train_slurm_options": ["--qos=high"], "max_steps": "-5", "stop": "x", "train_output_dir": ""})
    assert got == {"train_end_timeout_s": 0.0, "train_liveness_failures": 5, "train_stage_tree": False,
                   "train_slurm_options": ["--qos=high"], "train_output_dir": ""}


def test_one_knob_declared_two_ways_is_refused(tmp_path):
    for role in K.KNOB_ROLES:
        (tmp_path / role / "meta").mkdir(parents=True)
        options = {"train_poll_seconds": {"type": "float" if role == "train_launch" else "int",
                                          "description": "Seconds. Range (0, inf)."}}
        (tmp_path / role / "meta" / "argument_specs.yml").write_text(
            yaml.safe_dump({"argument_specs": {"main": {"options": options}}}))
    with pytest.raises(K.KnobError, match="knob train_poll_seconds is declared differently in train_plan:main"):
        K.load(tmp_path)


def test_the_listing_prints_every_knob():
    out = subprocess.run([sys.executable, "-m", "train.controller.knobs"], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    rows = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()}
    assert set(rows) == set(K.load()) and rows["train_end_timeout_s"][1:3] == ["float", "[0, inf)"]


def test_the_docs_knob_table_is_the_generated_one(tmp_path):
    """docs/training.md holds exactly the table `python -m train.controller.knobs table` prints (regenerate it with
    `python -m train.controller.knobs table --write docs/training.md`); --write replaces only that block."""
    from train.common.keys import replace_between

    page = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    table = K.table()
    assert replace_between(page, K.TABLE_BEGIN, K.TABLE_END, table) == page, \
        "docs/training.md's knob table is stale: run `python -m train.controller.knobs table --write docs/training.md`"
    assert "| `train_end_timeout_s` | float in [0, inf) | `1800` | train_launch |" in page
    copy = tmp_path / "page.md"
    copy.write_text(f"before\n{K.TABLE_BEGIN}\nstale rows\n{K.TABLE_END}\nafter\n")
    done = subprocess.run([sys.executable, "-m", "train.controller.knobs", "table", "--write", str(copy)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert copy.read_text() == f"before\n{table}\nafter\n"

"""Tests for train/common/keys.py: every job key declared once, and what is derived from the declarations (the
validation's ranges and values, the resolver's defaults and auto keys, the rank's arguments, docs/training.md's table)."""

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from train.common import job as J
from train.common import keys as K
from train.controller import resolve as R

REPO = Path(__file__).resolve().parents[2]
NOW = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
TINY_CPU = {"model_size": "tiny", "accelerator": "cpu", "run_name": "t"}


def test_the_docs_table_is_the_generated_one():
    """docs/training.md holds exactly the table `python -m train.common.keys table` prints (regenerate it with
    `python -m train.common.keys table --write docs/training.md`)."""
    page = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    printed = subprocess.run([sys.executable, "-m", "train.common.keys", "table"], cwd=REPO, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert K.replace_table(page) == page, "docs/training.md's job keys table is stale: run " \
                                          "`python -m train.common.keys table --write docs/training.md`"
    assert printed.strip() in page
    for key in K.KEYS:
        assert f"| `{key.name}` |" in printed


def test_the_table_command_writes_a_page_and_refuses_one_without_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"intro\n{K.TABLE_BEGIN}\nstale rows\n{K.TABLE_END}\nafter\n")
    done = subprocess.run([sys.executable, "-m", "train.common.keys", "table", "--write", str(page)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert text.startswith("intro\n") and text.endswith("after\n") and "stale rows" not in text
    assert "| `float8` | `none` \\| `tensorwise`" in text
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    refused = subprocess.run([sys.executable, "-m", "train.common.keys", "table", "--write", str(bare)], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stderr.startswith("error: ") and bare.read_text() == "no markers\n"


def test_the_schema_defaults_and_auto_keys_are_the_declarations():
    assert list(J.SCHEMA) == [k.name for k in K.KEYS if not k.fixed]
    assert J.FIXED_KEYS == ("task", "model_type", "tokenizer_type")
    assert R.AUTO_KEYS == tuple(k.name for k in K.KEYS if k.auto)
    assert "float8" in R.AUTO_KEYS and "attention" not in R.AUTO_KEYS
    assert R.DEFAULTS["float8"] == "auto" and "accelerator" not in R.DEFAULTS and "max_steps" not in R.DEFAULTS
    assert R.override_keys() == ["model", *J.SCHEMA]
    for key in K.KEYS:
        assert key.help and key.kind in ("int", "float", "bool", "str", "dict"), key
        assert set(key.goes) <= set(K.GOES), key
        assert not key.choices or key.kind == "str", key
        assert key.low is None or key.kind in ("int", "float"), key


def test_every_preset_gives_the_keys_without_a_default():
    needed = {k.name for k in K.KEYS if k.default == K.PRESET and k.name != "accelerator"}
    for preset in sorted((REPO / "train" / "presets").glob("*.yml")):
        data = yaml.safe_load(preset.read_text())
        assert needed <= set(data), (preset.name, needed - set(data))


def _outside(key):
    """A value just outside a declared range (the low side where there is one)."""
    if key.low is not None:
        return key.low if key.low_open else key.low - 1
    return key.high if key.high_open else key.high + 1


@pytest.mark.parametrize("name", [k.name for k in K.KEYS if k.range_text()])
def test_a_value_outside_a_declared_range_is_refused_naming_the_key(name):
    key = K.BY_NAME[name]
    value = _outside(key)
    overrides = {**TINY_CPU, name: value}
    with pytest.raises(J.JobError) as err:
        R.resolve("bert", overrides, now=NOW)
    assert err.value.where == f"override {name}", str(err.value)
    inside = key.low + (1 if key.kind == "int" else 0.5) if key.low is not None and key.high is None else None
    if inside is not None and name not in ("max_seq_length", "warmup_steps"):
        assert key.out_of_range(inside) is None


@pytest.mark.parametrize("name", [k.name for k in K.KEYS if k.choices and not k.fixed])
def test_a_value_outside_a_keys_choices_is_refused_naming_the_key(name):
    with pytest.raises(J.JobError) as err:
        R.resolve("bert", {**TINY_CPU, name: "bogus"}, now=NOW)
    assert err.value.where == f"override {name}" and "bogus" in err.value.what, str(err.value)


def test_the_rank_gets_a_flag_only_where_the_declaration_sends_it():
    job = R.resolve("bert", {**TINY_CPU, "float8": "none", "pad_vocab_to_multiple_of": 1}, now=NOW)
    args = K.rank_argv(job)
    flags = [a for a in args if a.startswith("--")]
    assert "--float8" not in flags and "--pad_vocab_to_multiple_of" not in flags  # their "off" values
    assert "--vocab_size" not in flags and "--zero_stage" not in flags and "--train_batch_size" not in flags
    assert args[args.index("--attn_implementation") + 1] == "sdpa"
    assert args[args.index("--max_steps") + 1] == str(job["max_steps"])
    job = dict(job, float8="rowwise", pad_vocab_to_multiple_of=64)
    args = K.rank_argv(job)
    assert args[args.index("--float8") + 1] == "rowwise" and args[args.index("--pad_vocab_to_multiple_of") + 1] == "64"


def test_model_fields_carry_the_declarations():
    fields = {name: (typ, f) for name, typ, f in K.model_fields()}
    assert set(fields) == {"task", "model_type", "model_name_or_path", "attn_implementation",
                           "pad_vocab_to_multiple_of", "regional_compilation", "mlm_head", "unpadded_attention",
                           "fused_cross_entropy", "float8"}
    typ, float8 = fields["float8"]
    assert typ is str and float8.default == "none" and float8.metadata["choices"] == list(K.BY_NAME["float8"].choices)
    assert float8.metadata["help"] == K.BY_NAME["float8"].help
    assert fields["pad_vocab_to_multiple_of"][1].default == 1 and fields["unpadded_attention"][1].default is False


def test_the_resume_and_script_policies_are_the_declarations():
    from train.controller import plan as P

    assert P.RESUME_MAY_CHANGE == tuple(k.name for k in K.KEYS if k.resume)
    assert {"max_steps", "save_steps", "max_restarts"} <= set(P.RESUME_MAY_CHANGE)
    assert "learning_rate" not in P.RESUME_MAY_CHANGE and "float8" not in P.RESUME_MAY_CHANGE
    assert P.RESUME_KEYS_ADDED["float8"] == "none" and P.RESUME_KEYS_ADDED["pad_vocab_to_multiple_of"] == 1
    assert P.SCRIPT_DEFAULTS["zero_stage"] == 2 and P.SCRIPT_DEFAULTS["train_batch_size"] is None
    for name, value in {**P.RESUME_KEYS_ADDED, **P.SCRIPT_DEFAULTS}.items():  # each one a value the key takes
        key = K.BY_NAME[name]
        assert (value is None and key.nullable) or not key.choices or value in key.choices, name
        assert key.out_of_range(value) is None, name


ADDED_KEY = '''
import json, sys
from train.common import keys as K
K.KEYS = K.KEYS + (K.Key("label_smoothing_factor", "float", "label smoothing of the loss", ("trainer",), default=0.0,
                         low=0, high=1, high_open=True),)
K.BY_NAME = {key.name: key for key in K.KEYS}
from train.common import job as J
from train.controller import resolve as R
job = R.resolve("bert", {"model_size": "tiny", "accelerator": "cpu", "run_name": "t",
                         "label_smoothing_factor": sys.argv[1]})
args = R.argv(job, "/d", "/o", "/c.json")
print(json.dumps({"value": job["label_smoothing_factor"], "flag": args[args.index("--label_smoothing_factor") + 1],
                  "row": "| `label_smoothing_factor` | float in [0, 1) | `0.0` |" in K.table(),
                  "override": "label_smoothing_factor" in R.override_keys()}))
'''


def test_adding_a_key_is_one_declaration():
    """A key declared once (here a TrainingArguments field, in a fresh interpreter) is parsed from its -e string,
    validated against its range, passed to the rank and listed in the docs table, with no other edit."""
    import json

    def run(value):
        return subprocess.run([sys.executable, "-c", ADDED_KEY, value], cwd=REPO, capture_output=True, text=True,
                              timeout=60)

    good = run("0.1")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout) == {"value": 0.1, "flag": "0.1", "row": True, "override": True}
    bad = run("1.5")
    assert bad.returncode != 0 and "label_smoothing_factor must be in [0, 1), got 1.5" in bad.stderr

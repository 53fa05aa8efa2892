"""A user's own run_mlm.py-style script (HfArgumentParser + Trainer, --train_file, MLM collator), launched
unchanged through train/rank/run_script.py by the real deepspeed launcher with 2 ranks, plus train/controller/script_args.py."""

from __future__ import annotations

import json
import textwrap

import pytest

from train.controller import script_args
from train.rank.metrics import METRICS_KEYS
from train.tests.conftest import ds_config, launch, write_job

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # test tiers: pytest.ini

USER_SCRIPT = textwrap.dedent('''
    """run_mlm.py in miniature, as a user would write it: nothing here knows about the project."""
    import json
    from dataclasses import dataclass, field

    from datasets import load_dataset
    from transformers import (AutoConfig, AutoModelForMaskedLM, AutoTokenizer, DataCollatorForLanguageModeling,
                              HfArgumentParser, Trainer, TrainingArguments)


    @dataclass
    class Args:
        train_file: str = field(metadata={"help": "text file, one sample per line"})
        tokenizer_name: str = field(metadata={"help": "local tokenizer directory"})
        config_overrides: str = field(default="{}")
        max_seq_length: int = field(default=64)


    def main():
        args, training_args = HfArgumentParser((Args, TrainingArguments)).parse_args_into_dataclasses()
        tok = AutoTokenizer.from_pretrained(args.tokenizer_name)
        raw = load_dataset("text", data files={"train": args.train_file})["train"]
        ds = raw.map(lambda b: tok(b["text"], truncation=True, max_length=args.max_seq_length,
                                   return_special_tokens_mask=True), batched=True, remove_columns=["text"])
        config = AutoConfig.for_model("bert", vocab_size=len(tok), **json.loads(args.config_overrides))
        model = AutoModelForMaskedLM.from_config(config)
        trainer = Trainer(model=model, args=training_args, train_dataset=ds, processing_class=tok,
                          data_collator=DataCollatorForLanguageModeling(tok, mlm_probability=0.15))
        trainer.train()
        trainer.save_model()
        if training_args.do_eval:  # run_mlm.py's evaluation after training
            trainer.evaluate(eval_dataset=ds.select(range(32)))


    if __name__ == "__main__":
        main()
''').replace("data files", "data_files")


@pytest.fixture(scope="module")
def user_run(bert_artifact, tmp_path_factory):
    work = tmp_path_factory.mktemp("user-script")
    script = work / "my_run_mlm.py"
    script.write_text(USER_SCRIPT, encoding="utf-8")
    topics = __import__("pydoc_data.topics", fromlist=["topics"]).topics
    lines = [ln.strip() for text in topics.values() for ln in text.splitlines() if len(ln.split()) > 6]
    data = work / "data"
    data.mkdir()
    (data / "train.txt").write_text("\n".join(lines[:3000]) + "\n", encoding="utf-8")
    out = work / "out"
    user_args = script_args.split(
        "--train_file {data}/train.txt --tokenizer_name " + str(bert_artifact / "tokenizer")
        + " --config_overrides '" + json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                                                "intermediate_size": 128, "max_position_embeddings": 64})
        + "' --per_device_train_batch_size 8 --max_steps 30 --learning_rate 1e-3 --warmup_steps 3"
        " --logging_steps 5 --save_strategy no --report_to none --dataloader_num_workers 0 --remove_unused_columns false"
        " --do_eval --per_device_eval_batch_size 8"
    )
    args = script_args.complete(user_args, str(out), str(ds_config(work / "ds.json")), str(data))
    # the job file is not beside the output directory: the launcher names it in DSC_JOB_FILE
    job_file = write_job(tmp_path_factory.mktemp("plan") / "job.json", run_name="my-script-run")
    proc, _ = launch(2, args, work, entry=("--module", "train.rank.run_script", str(script)),
                     env_extra={"DSC_JOB_FILE": str(job_file)})
    return proc, out


def test_user_script_runs_data_parallel_with_progress(user_run):
    proc, out = user_run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["trainer_world_size"] == 2
    assert [r["rank"] for r in metrics["ranks"]] == [0, 1]
    assert metrics["steps"] == 30
    assert metrics["last_loss"] < metrics["first_loss"]
    records = [json.loads(ln) for ln in (out / "progress.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records][:2] == [5, 10] and records[-1]["step"] == 30
    assert (out / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "model.safetensors").is_file()  # the script's own save_model()
    assert "[rank 1/2] host=" in proc.stdout


def test_user_script_metrics_have_the_run_name_and_the_eval_metrics(user_run):
    """One set of metrics.json keys (the same as train/rank/pretrain.py's), the run name from the job file named by
    DSC_JOB_FILE, and the evaluation the script ran after training."""
    _, out = user_run
    m = json.loads((out / "metrics.json").read_text())
    assert tuple(m) == METRICS_KEYS
    assert m["run_name"] == "my-script-run" and m["mode"] == "script" and m["script"].endswith("my_run_mlm.py")
    assert m["model"] is None and m["model_type"] == "bert"
    assert m["eval"]["eval_loss"] > 0 and m["eval_loss"] == m["eval"]["eval_loss"]
    assert m["perplexity"] == pytest.approx(__import__("math").exp(m["eval_loss"]))
    from transformers import AutoTokenizer

    assert m["vocab_size"] == len(AutoTokenizer.from_pretrained(str(out)))  # the tokenizer's real size
    assert m["n_parameters"] > 100_000 and m["model_uses_num_items_in_batch"] is False
    assert m["train_loss"] > 0 and m["train_samples_per_second"] > 0


def test_loss_is_not_scaled_by_world_size(user_run):
    """BERT's first logged MLM loss is about ln(vocab) at initialisation, not world size times that."""
    import math

    _, out = user_run
    tok_vocab = 2000  # the bert_artifact fixture (conftest.job_dict)
    first = json.loads((out / "metrics.json").read_text())["first_loss"]
    assert abs(first - math.log(tok_vocab)) < 0.15 * math.log(tok_vocab), first


def test_a_plain_deepspeed_script_leaves_no_shared_memory_behind(tmp_path):
    """A script that calls deepspeed.init_distributed itself (no TrainingArguments): its two ranks train, and each
    unlinks its CPU all-reduce buffer right after that call (patches.release_after_deepspeed_init; launch fails a run
    that leaves one)."""
    from train.tests.test_plan import PLAIN_DS

    script = tmp_path / "plain_ds.py"
    script.write_text(PLAIN_DS)
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}))
    proc, _ = launch(2, ["--deepspeed", str(config), "--output_dir", str(tmp_path / "out")], tmp_path,
                     entry=("--module", "train.rank.run_script", str(script)))
    assert proc.stdout.count("plain-ds-done") == 2, proc.stdout[-3000:]  # the ranks share stdout: words interleave


@pytest.mark.parametrize(
    ("given", "expect"),
    [
        ("--max_steps 100 --per_device_train_batch_size 4", {"max_steps": 100, "per_device_train_batch_size": 4,
                                                              "gradient_accumulation_steps": 1, "warmup_steps": 0,
                                                              "precision": "fp32"}),
        ('["--bf16", "--warmup_steps=0.1", "--max_steps=50"]', {"precision": "bf16", "warmup_steps": 5}),
        ("--fp16 true --gradient_accumulation_steps 4", {"precision": "fp16", "gradient_accumulation_steps": 4}),
        ("--warmup_steps 0.2", {"warmup_steps": 1}),
        ("--warmup_steps 12 --train_file x.txt --my_flag", {"warmup_steps": 12}),
        ("--bf16 no --fp16=yes --learning_rate 2e-4", {"precision": "fp16", "learning_rate": 2e-4}),
        ("--max_steps -1", {}),
    ],
)
def test_job_overrides(given, expect):
    got = script_args.job_overrides(script_args.split(given))
    for key, value in expect.items():
        assert got[key] == value, (key, got)
    if given == "--max_steps -1":
        assert "max_steps" not in got


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("--fp16 --bf16", "both --fp16 and --bf16"),
        ("--max_steps lots", "--max_steps.*invalid int value: 'lots'"),
        ("--bf16 maybe", "--bf16: Truthy value expected"),
        ("--warmup_steps -3", "negative"),
        ("--output_dir 'unbalanced", "balance the quotes"),
        ({"a": 1}, "mapping; give a list"),
        ('{"--max_steps": 100}', "JSON object; give a JSON list"),
        ("{not json", "starts with '{' but is not valid JSON.*give a JSON list"),
        ('["--max_steps", 100', "starts with '\\[' but is not valid JSON"),
        ("[true]", "list of strings"),
    ],
)
def test_bad_script_args_are_refused(given, message):
    with pytest.raises(script_args.ScriptArgsError, match=message) as err:
        script_args.job_overrides(script_args.split(given))
    assert "\n" not in str(err.value)


def test_defaults_are_the_trainers_own():
    """What the script leaves out is what TrainingArguments defaults to (read from the dataclass, not copied)."""
    import dataclasses

    from transformers import TrainingArguments

    defaults = {f.name: f.default for f in dataclasses.fields(TrainingArguments)}
    got = script_args.job_overrides([])
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "adam_epsilon",
                "weight_decay", "seed"):
        assert got[key] == defaults[key], key
    assert got["warmup_steps"] == defaults["warmup_steps"] == 0 and got["precision"] == "fp32"
    assert "max_steps" not in got  # -1: trains by epochs


def test_script_args_import_is_cheap():
    import subprocess
    import sys

    from train.tests.conftest import REPO

    code = "import sys, train.controller.script_args; assert 'transformers' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=60).returncode == 0


def test_complete_adds_only_what_is_missing():
    assert script_args.complete(["--x", "{data}/t.txt"], "/o", "/c.json", "/d") == [
        "--x", "/d/t.txt", "--deepspeed", "/c.json", "--output_dir", "/o"]
    mine = ["--deepspeed=my.json", "--output_dir", "/mine"]
    assert script_args.complete(mine, "/o", "/c.json") == mine
    assert script_args.output_dir_of(mine, "/o") == "/mine"
    assert script_args.output_dir_of(["--output-dir=/dash"], "/o") == "/dash"  # argparse's alias, as the Trainer
    assert script_args.output_dir_of(["--output_dirx", "/not"], "/o") == "/o"  # no abbreviations either way
    with pytest.raises(script_args.ScriptArgsError, match="script_data"):
        script_args.complete(["{data}/x"], "/o", "/c.json", None)

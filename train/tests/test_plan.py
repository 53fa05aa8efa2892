"""train/controller/plan.py and train/controller/launch.py without Ansible: the run's plan from overrides, the cluster shape and paths."""

import datetime
import json
import shlex
from pathlib import Path

import pytest

from train.controller import launch, plan
from train.common.job import JobError

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = str(REPO / "templates" / "deepspeed")
NOW = datetime.datetime(2026, 12, 1, 10, 0, 0, tzinfo=datetime.timezone.utc)
NODE = {"dsc_root": "/opt/dsc", "local_ssd_dir": "/ssd", "venv_dir": "/opt/dsc/venv"}


def shape(nodes=("head-1", "worker-1"), slots=2, include="", master="10.0.0.1"):
    nodes = list(nodes)
    return {"nodes": nodes, "ranks": {n: slots for n in nodes}, "world_size": slots * len(nodes),
            "include": include, "master_addr": master if len(nodes) > 1 else "127.0.0.1",
            "single_node": len(nodes) == 1}


def build(tmp_path, overrides=None, **kw):
    args = dict(overrides=dict({"model": "bert", "model_size": "tiny"}, **(overrides or {})), accelerator="cpu",
                shape=shape(), node=NODE, output_root=str(tmp_path / "outputs"), templates_dir=TEMPLATES, now=NOW)
    args.update(kw)
    return plan.build(**args).as_dict()


def test_preset_plan_has_job_config_paths_and_one_launch_command_for_pdsh(tmp_path):
    p = build(tmp_path)
    assert p["run_name"] == "bert-tiny-20261201T100000Z" and p["mode"] == "preset"
    assert p["world_size"] == 4 and p["hosts"] == ["head-1", "worker-1"] and p["head"] == "head-1"
    assert json.loads(p["files"]["job.json"]) == p["job"]
    assert json.loads(p["files"]["ds_config.json"]) == p["ds_config"]
    assert p["ds_config"]["zero_optimization"]["stage"] == p["job"]["zero_stage"]
    run_dir = "/opt/dsc/runs/bert-tiny-20261201T100000Z"
    assert p["paths"]["run_dir"] == run_dir and p["paths"]["hostfile"] == f"{run_dir}/hostfile"
    assert p["paths"]["artifact_dir"] == f"/ssd/data/{p['job']['data_key']}"
    assert p["paths"]["out_dir"] == str(tmp_path / "outputs" / p["run_name"])
    assert list(p["launch"]) == ["head-1"] and p["logs"] == {"head-1": f"{run_dir}/train.log"}
    argv = p["launch"]["head-1"]
    # on several nodes the head's launcher runs under train.node.checkpoints, which gathers the nodes' checkpoint parts
    sup = argv[: argv.index("--") + 1]
    assert sup == ["/opt/dsc/venv/bin/python", "-m", "train.node.checkpoints", "supervise", "--output", f"{run_dir}/output",
                   "--world-size", "4", "--zero-stage", str(p["job"]["zero_stage"]), "--hosts", "worker-1", "--"]
    argv = argv[len(sup):]
    assert argv[:7] == ["/opt/dsc/venv/bin/deepspeed", "--hostfile", f"{run_dir}/hostfile", "--master_addr",
                        "10.0.0.1", "--master_port", "29500"]
    assert argv[7:9] == ["--module", "train.rank.pretrain"] and "--no_ssh_check" not in argv and "--no_ssh" not in argv
    # multi-node pdsh: the JSON of --config_overrides is quoted once more for the remote shell
    config = p["argv"][p["argv"].index("--config_overrides") + 1]
    assert shlex.quote(config) in argv and config not in argv
    assert not (tmp_path / "outputs").exists()  # the plan writes nothing


def test_the_plan_estimates_the_checkpoints_on_every_nodes_disk_and_shows_them(tmp_path):
    """A preset run's plan carries train.controller.memory's checkpoint estimate per node (the head's holds every
    rank's gathered part), how many are on a disk at once, and says so; a script's run has none."""
    from train.controller import memory

    p = build(tmp_path, {"max_steps": 1000, "save_steps": 100, "save_total_limit": 2})
    c = p["checkpoints"]
    assert c["bytes"] == memory.checkpoint_bytes(p["job"], p["ranks"], "head-1") and c["kept"] == 3
    assert c["bytes"]["head-1"] > c["bytes"]["worker-1"] and c["peak"] == {n: 3 * b for n, b in c["bytes"].items()}
    line = next(x for x in p["summary"] if x.startswith("checkpoints: "))
    assert line == (f"checkpoints: about {c['bytes']['head-1'] / 1e9:.2f} GB each on head-1 (every rank's part "
                    f"gathered), {c['bytes']['worker-1'] / 1e9:.2f} GB on each other node; up to 3 on a node's disk "
                    "at once (save_total_limit 2, save_steps 100)")
    assert build(tmp_path, {"max_steps": 50, "save_steps": 100, "save_total_limit": None})["checkpoints"]["kept"] == 1
    assert build(tmp_path, {"max_steps": 1000, "save_steps": 100, "save_total_limit": None})["checkpoints"]["kept"] == 10


def test_ansible_launcher_gives_every_node_its_node_rank(tmp_path):
    p = build(tmp_path, launcher="ansible", shape=shape(("head-1", "worker-1", "worker-2")))
    assert list(p["launch"]) == ["head-1", "worker-1", "worker-2"]
    for rank, node in enumerate(p["hosts"]):
        argv = p["launch"][node]
        assert argv[argv.index("--node_rank") + 1] == str(rank) and "--no_ssh" in argv
    assert p["logs"]["worker-2"].endswith("/train-worker-2.log")
    config = p["argv"][p["argv"].index("--config_overrides") + 1]
    assert config in p["launch"]["worker-1"]  # no remote shell in between: passed as it is


def test_slurm_launcher_starts_every_nodes_own_launcher_and_refuses_gpu_indices(tmp_path):
    """-e launcher=slurm: srun starts on each node the command the ansible launcher would (its node rank, --no_ssh),
    and each node logs to its own file; gpu_indices (DeepSpeed's --include) cannot be honoured under Slurm."""
    nodes = ("head-1", "worker-1", "worker-2")
    p = build(tmp_path, launcher="slurm", shape=shape(nodes))
    ansible = build(tmp_path, launcher="ansible", shape=shape(nodes))
    assert p["launcher"] == "slurm" and p["launch"] == ansible["launch"] and p["logs"] == ansible["logs"]
    assert p["launch"]["worker-2"][p["launch"]["worker-2"].index("--node_rank") + 1] == "2"
    with pytest.raises(plan.PlanError, match=r"launcher slurm with gpu_indices \(head-1:0@worker-1\)"):
        build(tmp_path, launcher="slurm", shape=shape(include="head-1:0@worker-1"))
    uneven = dict(shape(nodes), ranks={"head-1": 2, "worker-1": 2, "worker-2": 4}, world_size=8)
    with pytest.raises(plan.PlanError, match=r"launcher slurm with different slots per node"):
        build(tmp_path, launcher="slurm", shape=uneven)


def test_single_node_skips_the_ssh_check_and_uses_loopback(tmp_path):
    p = build(tmp_path, shape=shape(("localhost",)))
    argv = p["launch"]["localhost"]
    assert "--no_ssh_check" in argv and argv[argv.index("--master_addr") + 1] == "127.0.0.1"


def test_include_is_passed_to_the_launcher(tmp_path):
    p = build(tmp_path, shape=shape(include="head-1:0@worker-1"))
    argv = p["launch"]["head-1"]
    assert argv[argv.index("--include") + 1] == "head-1:0@worker-1"


def test_job_overrides_take_extra_vars_and_train_defaults_only():
    assert plan.job_overrides({"max_steps": "7", "unrelated": 1}) == {"max_steps": "7"}
    assert plan.job_overrides({}, {"seed": 3, "max_steps": 9}) == {"seed": 3, "max_steps": 9}
    assert plan.job_overrides({"max_steps": 5}, {"max_steps": 9}) == {"max_steps": 5}
    with pytest.raises(JobError, match="unknown job key 'maxsteps' in train_defaults"):
        plan.job_overrides({}, {"maxsteps": 9})
    with pytest.raises(JobError, match="train_defaults must be a mapping"):
        plan.job_overrides({}, "max_steps=9")


def test_existing_output_dir_is_refused(tmp_path):
    (tmp_path / "outputs" / "mine").mkdir(parents=True)
    with pytest.raises(JobError, match="already exists"):
        build(tmp_path, {"run_name": "mine"})


@pytest.mark.parametrize("kw, message", [
    ({"launcher": "ssh"}, "launcher is 'ssh'"),
    ({"master_port": "http"}, "train_master_port is 'http'"),
    ({"master_port": 70000}, "train_master_port is 70000"),
    ({"script": "/no/such/script.py"}, "script /no/such/script.py is not a file on the controller"),
    ({"script_args_value": ["--max_steps", "5"]}, "script_args is given but no script"),
])
def test_bad_playbook_knobs_are_one_line_errors(tmp_path, kw, message):
    with pytest.raises(JobError) as err:
        build(tmp_path, **kw)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_script_mode_reads_the_scripts_arguments_into_the_job(tmp_path):
    script = tmp_path / "run_mlm.py"
    script.write_text("print('hi')\n")
    p = build(tmp_path, script=str(script), script_data=str(tmp_path),
              script_args_value=["--train_file", "{data}/train.txt", "--per_device_train_batch_size", "4",
                                 "--max_steps", "30"])
    assert p["mode"] == "script" and p["run_name"].startswith("run_mlm-")
    assert p["job"]["per_device_train_batch_size"] == 4 and p["job"]["max_steps"] == 30
    assert p["entry"] == ["--module", "train.rank.run_script", "scripts/run_mlm.py"]
    data_dir = f"/ssd/user-data/{tmp_path.name}"
    assert p["paths"]["script_data_dir"] == data_dir and f"{data_dir}/train.txt" in p["argv"]
    assert p["argv"][p["argv"].index("--deepspeed") + 1] == f"{p['paths']['run_dir']}/ds_config.json"
    assert p["script"] == {"src": str(script.resolve()), "name": "run_mlm.py", "imports": []}
    assert any("your script run_mlm.py" in line for line in p["summary"])
    launched = json.loads(p["files"]["launch.json"])
    assert launched["argv"] == p["argv"] and "--per_device_train_batch_size" in launched["argv"]
    assert launched["launch"] == p["launch"] and launched["mode"] == "script"


def test_launch_builder_refuses_bad_input_and_shell_line_quotes():
    with pytest.raises(ValueError):
        launch.deepspeed_argv("ds", "h", "a", 29500, [])
    with pytest.raises(ValueError):
        launch.deepspeed_argv("ds", "h", "a", 0, ["x.py"])
    line = launch.shell_line(["ds", "a b", "{\"x\": 1}"], "/tmp/log file")
    assert shlex.split(line) == ["exec", "ds", "a b", "{\"x\": 1}", ">", "/tmp/log file", "2>&1"]


PLAIN_DS = '''import argparse
import deepspeed
import torch

p = argparse.ArgumentParser()
p.add_argument("--deepspeed")
p.add_argument("--output_dir")
p.add_argument("--local_rank", type=int, default=0)
a, _ = p.parse_known_args()
deepspeed.init_distributed()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=a.deepspeed)
for _ in range(3):
    x = torch.randn(engine.train_micro_batch_size_per_gpu(), 8)
    loss = engine(x).pow(2).mean()
    engine.backward(loss)
    engine.step()
print("plain-ds-done", engine.global_steps, flush=True)
'''


def _autos(node, prefix=""):
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _autos(value, f"{prefix}{key}.")
        elif value == "auto":
            yield f"{prefix}{key}"


def test_a_script_without_a_trainer_gets_a_config_without_auto(tmp_path):
    script = tmp_path / "plain_ds.py"
    script.write_text(PLAIN_DS)
    p = build(tmp_path, {"zero_stage": 3}, script=str(script),
              script_args_value=["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2",
                                 "--learning_rate", "3e-4", "--warmup_steps", "5", "--max_steps", "40"])
    ds = p["ds_config"]
    assert list(_autos(ds)) == []
    assert ds["train_batch_size"] == 4 * 2 * 4 and ds["train_micro_batch_size_per_gpu"] == 4
    assert ds["gradient_accumulation_steps"] == 2 and ds["optimizer"]["params"]["lr"] == 3e-4
    assert ds["scheduler"]["params"]["warmup_num_steps"] == 5 and ds["scheduler"]["params"]["total_num_steps"] == 40
    assert "reduce_bucket_size" not in ds["zero_optimization"]
    assert json.loads(p["files"]["ds_config.json"]) == ds


def test_a_trainer_script_keeps_the_auto_values_for_the_trainer(tmp_path):
    script = tmp_path / "run_mlm.py"
    script.write_text("from transformers import Trainer, TrainingArguments\n")
    p = build(tmp_path, script=str(script))
    assert "train_micro_batch_size_per_gpu" in set(_autos(p["ds_config"]))


def test_a_script_that_does_not_parse_is_refused_before_launch(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("def f(:\n")
    with pytest.raises(JobError, match=r"does not parse as Python \(line 1\)"):
        build(tmp_path, script=str(script))


def test_the_scripts_top_level_imports_are_listed_for_the_preflight(tmp_path):
    script = tmp_path / "run_mlm.py"
    script.write_text("from __future__ import annotations\nimport os, evaluate.loading\nfrom transformers import Trainer\n"
                      "from . import local\ntry:\n    import optional_pkg\nexcept ImportError:\n    pass\n"
                      "def f():\n    import inner\n")
    p = build(tmp_path, script=str(script))
    assert p["script"]["imports"] == ["evaluate", "os", "transformers"]


def test_script_mode_records_only_the_job_keys_that_apply_to_the_script(tmp_path):
    """job.json of a script run has no preset keys (model, model_size, data, logging)."""
    from train.controller.resolve import SCRIPT_KEYS

    script = tmp_path / "run_mlm.py"
    script.write_text("from transformers import Trainer\n")
    p = build(tmp_path, script=str(script), script_args_value=["--max_steps", "30", "--learning_rate", "1e-3"])
    job = json.loads(p["files"]["job.json"])
    assert job == p["job"] and list(job) == [k for k in SCRIPT_KEYS if k in job]
    for preset_key in ("model", "model_size", "data_key", "max_seq_length", "save_steps", "logging_steps",
                       "dataset_path", "vocab_size", "model_config", "torch_compile", "mlm_head", "attention"):
        assert preset_key not in job
    assert job["optimizer"] == "deepspeed" and job["autocast"] is False  # they shape the ds_config: they apply
    assert job["max_steps"] == 30 and job["learning_rate"] == 1e-3 and job["run_name"] == p["run_name"]
    # a Trainer script that trains by epochs: the preset's max_steps does not apply either
    p = build(tmp_path, script=str(script), script_args_value=["--num_train_epochs", "2"])
    assert "max_steps" not in p["job"] and any("trains by epochs" in line for line in p["summary"])
    # a plain DeepSpeed script's config is filled from max_steps: then it applies
    plain = tmp_path / "plain_ds.py"
    plain.write_text(PLAIN_DS)
    assert "max_steps" in build(tmp_path, script=str(plain))["job"]


def test_the_users_own_deepspeed_file_is_the_runs_ds_config(tmp_path, monkeypatch):
    """--deepspeed FILE in script_args: ds_config.json is that file's text, and the ranks read its staged copy."""
    script = tmp_path / "run_mlm.py"
    script.write_text("from transformers import Trainer\n")
    mine = '{\n  "train_micro_batch_size_per_gpu": 3,\n     "steps_per_print": 7\n}\n'
    (tmp_path / "my.json").write_text(mine)
    monkeypatch.chdir(tmp_path)  # a relative path is read from the current directory, like -e script
    for args in (["--max_steps", "5", "--deepspeed", "my.json"], ["--deepspeed=my.json", "--max_steps", "5"]):
        p = build(tmp_path, script=str(script), script_args_value=args)
        assert p["files"]["ds_config.json"] == mine and p["ds_config"]["steps_per_print"] == 7
        staged = f"{p['paths']['run_dir']}/ds_config.json"
        ds_args = [a for a in p["argv"] if "deepspeed" in a or a == staged]
        assert ds_args in (["--deepspeed", staged], [f"--deepspeed={staged}"]), p["argv"]
        assert p["ds_config_source"] == str(tmp_path / "my.json")
        assert json.loads(p["files"]["launch.json"])["ds_config_source"] == str(tmp_path / "my.json")
        assert any("DeepSpeed config: yours" in line for line in p["summary"])
    p = build(tmp_path, script=str(script), script_args_value=["--deepspeed", '{"train_batch_size": 8}'])
    assert p["files"]["ds_config.json"] == '{"train_batch_size": 8}'


@pytest.mark.parametrize("content, message", [
    (None, "--deepspeed nope.json is not a file on the controller"),
    ("{not json", "--deepspeed nope.json is not JSON"),
    ("[1, 2]", "--deepspeed nope.json is a JSON list, not an object"),
])
def test_a_bad_user_deepspeed_file_is_one_line(tmp_path, monkeypatch, content, message):
    script = tmp_path / "run_mlm.py"
    script.write_text("from transformers import Trainer\n")
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / "nope.json").write_text(content)
    with pytest.raises(JobError) as err:
        build(tmp_path, script=str(script), script_args_value=["--deepspeed", "nope.json"])
    assert message in str(err.value) and "\n" not in str(err.value)


def finished_run(tmp_path, world_size=4, step=10, accelerator="cpu", **overrides):
    """A run's results on the controller as train.yml leaves them: job.json and a complete, marked checkpoint."""
    from train.node import checkpoints
    from train.tests.test_checkpoints import write_checkpoint

    first = build(tmp_path, overrides, accelerator=accelerator)
    out = Path(first["paths"]["out_dir"])
    out.mkdir(parents=True)
    (out / "job.json").write_text(first["files"]["job.json"])
    ckpt = write_checkpoint(out, step, range(world_size), world_size)
    assert checkpoints.mark(ckpt, world_size) == []
    return first, ckpt


def test_resume_goes_on_with_the_same_job_from_the_newest_complete_checkpoint(tmp_path):
    first, ckpt = finished_run(tmp_path, max_steps=40)
    p = build(tmp_path, {"max_steps": 80}, resume=first["run_name"])
    assert p["run_name"] == first["run_name"] and p["paths"]["out_dir"] == first["paths"]["out_dir"]
    node_ckpt = f"{p['paths']['output']}/checkpoint-10"
    assert p["resume"] == {"run": first["run_name"], "step": 10, "checkpoint": str(ckpt), "node_checkpoint": node_ckpt,
                           "resize": None, "universal": False}
    assert "checkpoint" not in p["ds_config"]
    assert p["argv"][-2:] == ["--resume_from_checkpoint", node_ckpt]
    assert p["job"]["max_steps"] == 80
    assert {k: v for k, v in p["job"].items() if k != "max_steps"} == \
        {k: v for k, v in first["job"].items() if k != "max_steps"}
    assert any(line.startswith("resuming run ") and "from step 10" in line for line in p["summary"])
    assert build(tmp_path, resume="latest")["resume"]["checkpoint"] == str(ckpt)


def test_resume_takes_the_first_command_line_again_as_ansible_passes_it(tmp_path):
    """-e key=value gives strings: the first run's own command line plus -e resume= is the same job ("5" is its 5),
    and a value that differs after conversion is still refused."""
    first, _ = finished_run(tmp_path, warmup_steps="5", learning_rate="2e-4", lowercase="no", max_steps="40")
    assert (first["job"]["warmup_steps"], first["job"]["learning_rate"]) == (5, 2e-4)
    again = {"warmup_steps": "5", "learning_rate": "2e-4", "lowercase": "no", "model": "bert", "max_steps": "80"}
    p = build(tmp_path, again, resume=first["run_name"])
    assert p["job"]["max_steps"] == 80 and p["job"]["warmup_steps"] == 5
    with pytest.raises(JobError, match=r"warmup_steps '6' differs from run .*'s 5"):
        build(tmp_path, {**again, "warmup_steps": "6"}, resume=first["run_name"])
    with pytest.raises(JobError, match=r"warmup_steps 'lots' differs from run .*'s 5"):
        build(tmp_path, {**again, "warmup_steps": "lots"}, resume=first["run_name"])


def test_a_run_made_before_a_job_key_existed_resumes_with_what_it_ran(tmp_path, monkeypatch):
    """A GPU run's job.json written before pad_vocab_to_multiple_of, offload_ratio and float8 existed: the resumed run
    keeps the unpadded vocabulary, the whole-optimizer offload ratio and the bf16 matmuls its checkpoint was made with,
    not today's auto."""
    first, _ = finished_run(tmp_path, accelerator="cuda")
    assert first["job"]["pad_vocab_to_multiple_of"] == 128  # what a new run gets
    job_file = Path(first["paths"]["out_dir"]) / "job.json"
    old = json.loads(job_file.read_text())
    del old["pad_vocab_to_multiple_of"], old["offload_ratio"], old["float8"]
    job_file.write_text(json.dumps(old))
    from train.controller import resolve

    monkeypatch.setattr(resolve, "AUTO_FLOAT8", "tensorwise")  # were float8's auto to turn it on, the run keeps none
    p = build(tmp_path, resume=first["run_name"], accelerator="cuda")
    assert (p["job"]["pad_vocab_to_multiple_of"], p["job"]["offload_ratio"], p["job"]["float8"]) == (1, 1.0, "none")
    assert "--pad_vocab_to_multiple_of" not in p["argv"] and "--float8" not in p["argv"]


def test_resume_on_another_world_size_keeps_the_global_batch_through_the_universal_checkpoint(tmp_path):
    """4 ranks' ZeRO-2 checkpoint resumed on 2 (one node) and on 8: the accumulation steps follow the world size, the
    DeepSpeed config loads the universal checkpoint, the staging converts it (plan.resume.universal)."""
    first, ckpt = finished_run(tmp_path, train_batch_size=32, max_steps=40)
    assert (first["job"]["per_device_train_batch_size"], first["job"]["gradient_accumulation_steps"]) == (8, 1)
    run = first["run_name"]
    fewer = build(tmp_path, resume=run, shape=shape(("head-1",)))
    assert fewer["world_size"] == 2 and fewer["job"]["gradient_accumulation_steps"] == 2
    assert fewer["job"]["per_device_train_batch_size"] == 8 and fewer["job"]["train_batch_size"] == 32
    assert fewer["ds_config"]["checkpoint"] == {"load_universal": True}
    assert json.loads(fewer["files"]["ds_config.json"])["checkpoint"] == {"load_universal": True}
    # a preset's config leaves it "auto": the Trainer fills it from the rank's argument
    assert fewer["ds_config"]["gradient_accumulation_steps"] == "auto"
    assert fewer["argv"][fewer["argv"].index("--gradient_accumulation_steps") + 1] == "2"
    assert fewer["resume"]["universal"] is True and fewer["resume"]["resize"] == {
        "from_world_size": 4, "world_size": 2, "global_batch": 32, "micro": 8, "accumulation": 2,
        "from_accumulation": 1, "universal": True}
    assert "world size 4 -> 2: the global batch 32 is kept (accumulation 1 -> 2); its ZeRO optimizer state through " \
           "DeepSpeed's universal checkpoint, converted once on head-1 beside it" in fewer["summary"]
    assert "micro batch 8 x accumulation 2 x world size 2 = global batch 32" in fewer["summary"]
    with pytest.raises(JobError, match=r"global batch 32 \(.*\) cannot be kept on world size 8: 32 is not micro batch 8 "
                                        r"x 8 ranks x a whole number"):
        build(tmp_path, resume=run, shape=shape(("head-1", "worker-1", "worker-2", "worker-3")))


def test_a_zero0_checkpoint_without_optimizer_shards_resumes_on_another_world_size_as_it_is(tmp_path):
    from train.node import checkpoints
    from train.tests.test_checkpoints import write_checkpoint

    first = build(tmp_path, {"zero_stage": 0, "max_steps": 40})
    out = Path(first["paths"]["out_dir"])
    out.mkdir(parents=True)
    (out / "job.json").write_text(first["files"]["job.json"])
    assert checkpoints.mark(write_checkpoint(out, 10, range(4), 4, zero=False), 4, 0) == []
    p = build(tmp_path, resume=first["run_name"], shape=shape(("head-1",)))
    assert p["resume"]["universal"] is False and p["resume"]["resize"]["accumulation"] == 2
    assert "checkpoint" not in p["ds_config"]


def test_resume_refuses_another_model_job_or_world_size_and_runs_without_a_complete_checkpoint(tmp_path):
    first, ckpt = finished_run(tmp_path)
    run = first["run_name"]
    with pytest.raises(JobError, match=r"model gpt2 is not run .*'s model bert \(-e resume="):
        build(tmp_path, {"model": "gpt2"}, resume=run)
    with pytest.raises(JobError, match=r"learning_rate 0.5 differs from run .*; a resumed run keeps its job"):
        build(tmp_path, {"learning_rate": 0.5}, resume=run)
    with pytest.raises(JobError, match=r"global batch 32 \(micro batch 8 x accumulation 1 x world size 4\) cannot be "
                                        r"kept on world size 3: .*resume on a world size that divides 4 \(1, 2, 4 ranks\)"):
        build(tmp_path, resume=run, shape=shape(("head-1", "worker-1", "worker-2"), slots=1))
    with pytest.raises(JobError, match=r"no run nope in .* \(no .*/nope/job.json\)"):
        build(tmp_path, resume="nope")
    (ckpt / "rng_state_3.pth").unlink()
    with pytest.raises(JobError, match=r"has no complete checkpoint .*checkpoint-10: no RNG state of rank 3"):
        build(tmp_path, resume=run)
    with pytest.raises(JobError, match=r"no run in .* has a complete checkpoint"):
        build(tmp_path, resume="latest")


def test_a_script_run_resumes_with_resume_from_checkpoint_added_to_its_own_arguments(tmp_path):
    from train.node import checkpoints
    from train.tests.test_checkpoints import write_checkpoint

    script = tmp_path / "run_mlm.py"
    script.write_text("from transformers import Trainer, TrainingArguments\n")
    args = ["--max_steps", "30", "--learning_rate", "1e-3"]
    first = build(tmp_path, script=str(script), script_args_value=args)
    out = Path(first["paths"]["out_dir"])
    out.mkdir(parents=True)
    (out / "job.json").write_text(first["files"]["job.json"])
    assert checkpoints.mark(write_checkpoint(out, 20, range(4), 4), 4) == []
    p = build(tmp_path, script=str(script), script_args_value=["--max_steps", "60", "--learning_rate", "1e-3"],
              resume=first["run_name"])
    assert p["run_name"] == first["run_name"] and p["mode"] == "script"
    assert p["argv"][-2:] == ["--resume_from_checkpoint", f"{p['paths']['output']}/checkpoint-20"]
    assert p["argv"][: len(args)] == ["--max_steps", "60", "--learning_rate", "1e-3"]
    # on 2 ranks (one node) the script's own accumulation gives way to the one that keeps its global batch
    two = build(tmp_path, script=str(script), script_args_value=args, resume=first["run_name"],
                shape=shape(("head-1",)))
    assert two["argv"][-4:] == ["--gradient_accumulation_steps", "2", "--resume_from_checkpoint",
                                f"{two['paths']['output']}/checkpoint-20"]
    assert two["ds_config"]["checkpoint"] == {"load_universal": True}
    with pytest.raises(JobError, match=r"was a script run \(-e resume=.*\); resume it the way it was launched"):
        build(tmp_path, resume=first["run_name"])


def _plan_reads():
    """Every key of the plan the roles, playbooks and templates read: (file, "key" or "key.sub") for each
    ``train_plan.<key>[.<sub>|['<sub>']]`` in their YAML and Jinja, and each ``plan["key"]["sub"]`` in the Python
    plugins that take ``train_plan``."""
    import re

    yaml_read = re.compile(r"\btrain_plan\.(\w+)(?:\.(\w+)|\[['\"]([^'\"]+)['\"]\])?")
    py_read = re.compile(r"\bplan\[['\"](\w+)['\"]\](?:\[['\"]([^'\"]+)['\"]\])?")
    files = [p for top in ("roles", "playbooks", "templates") for p in (REPO / top).rglob("*")
             if p.suffix in (".yml", ".yaml", ".j2") and p.is_file()] + sorted(REPO.glob("*.yml"))
    plugins = [p for p in (REPO / "roles").rglob("*.py")
               if "tests" not in p.parts and "train_plan" in p.read_text(encoding="utf-8")]
    reads = []
    for path in files:
        for m in yaml_read.finditer(path.read_text(encoding="utf-8")):
            reads.append((path.relative_to(REPO), m.group(1), m.group(2) or m.group(3)))
    for path in plugins:
        for m in py_read.finditer(path.read_text(encoding="utf-8")):
            reads.append((path.relative_to(REPO), m.group(1), m.group(2)))
    return reads


def test_every_train_plan_key_the_roles_read_is_a_key_of_the_plan(tmp_path):
    """A key the roles read that the plan lacks is an undefined variable only when that task runs (maybe only on a
    failure, on Slurm, or with a script); here it fails at once. The sub-keys of the plan's nested parts (paths,
    script, resume, checkpoints, files) are checked too, against a built plan of each mode."""
    import dataclasses

    reads = _plan_reads()
    assert len(reads) > 200 and {k for _, k, _ in reads} >= {"paths", "hosts", "head", "run_name", "launch"}
    fields = {f.name: f for f in dataclasses.fields(plan.Plan)}
    parts = {"paths": plan.Paths, "script": plan.Script, "resume": plan.Resumed, "checkpoints": plan.Checkpoints}
    built = build(tmp_path)
    assert list(built) == plan.Plan.keys()  # the dict the roles read has exactly the typed fields
    unknown = []
    for where, key, sub in reads:
        if key not in fields:
            unknown.append(f"{where}: train_plan.{key}")
        elif sub and key in parts and sub not in {f.name for f in dataclasses.fields(parts[key])}:
            unknown.append(f"{where}: train_plan.{key}.{sub}")
        elif sub and key == "files" and sub not in plan.FILES:
            unknown.append(f"{where}: train_plan.files[{sub!r}]")
    assert not unknown, "keys the plan does not have:\n" + "\n".join(unknown)


def test_the_plan_refuses_a_broken_rule_where_it_is_built(tmp_path):
    """The Plan checks itself when made: a plan whose world size is not the sum of its ranks, or whose head is not
    its first host, is not made (ValueError naming the rule)."""
    import dataclasses

    p = plan.build(**dict(overrides={"model": "bert", "model_size": "tiny"}, accelerator="cpu", shape=shape(),
                          node=NODE, output_root=str(tmp_path / "outputs"), templates_dir=TEMPLATES, now=NOW))
    with pytest.raises(ValueError, match="world size 5 is not the sum"):
        dataclasses.replace(p, world_size=5)
    with pytest.raises(ValueError, match="the head is not the first"):
        dataclasses.replace(p, head="worker-1")
    with pytest.raises(ValueError, match="paths.log"):
        dataclasses.replace(p, paths=dataclasses.replace(p.paths, log="/elsewhere.log"))


def test_the_restart_policy_is_in_the_plan_and_checked_before_anything_runs(tmp_path):
    p = build(tmp_path)
    assert p["restart"] == {"max_restarts": 3, "min_nodes": 1}
    assert any(line.startswith("restarts: up to 3 by itself") for line in p["summary"])
    off = build(tmp_path, {"max_restarts": "0", "min_nodes": "2"})
    assert off["restart"] == {"max_restarts": 0, "min_nodes": 2} and off["job"]["max_restarts"] == 0
    assert "restarts: off (-e max_restarts=0): a fault stops the run" in off["summary"]
    assert "--max_restarts" not in off["argv"]
    with pytest.raises(JobError, match=r"max_restarts"):
        build(tmp_path, {"max_restarts": "many"})
    with pytest.raises(JobError, match=r"min_nodes .*set min_nodes to 1 or more"):
        build(tmp_path, {"min_nodes": "0"})


def test_a_restart_floor_above_the_nodes_of_the_launch_is_refused(tmp_path):
    """-e min_nodes above the run's nodes: refused at the plan with the numbers, not first met at a fault."""
    with pytest.raises(plan.PlanError, match=r"min_nodes 3 is more than the 2 nodes this run launches on "
                                        r"\(head-1, worker-1\).*set min_nodes to 2 or less"):
        build(tmp_path, {"min_nodes": 3})
    assert build(tmp_path, {"min_nodes": 2})["restart"]["min_nodes"] == 2

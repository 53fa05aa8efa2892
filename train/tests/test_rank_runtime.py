"""The rank runtime (train.rank.bootstrap, .metrics, .patches, the rank's log tee) and the import rules: importing train/
changes nothing, and no module but the ranks' own loads a heavy package; bootstrap is explicit; the run identity of
metrics.json; the CPU all-reduce buffer unlinked; gradient clipping as DeepSpeed's engine would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from train.rank import bootstrap, metrics, patches

from .conftest import REPO, write_job

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # test tiers: pytest.ini

# every module of train/ but the tests and ansible_async (it imports Ansible, which only the controller's venv has)
MODULES = tuple(sorted(
    name for name in (".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
                      for path in (REPO / "train").rglob("*.py") if "tests" not in path.parts)
    if name != "train.controller.ansible_async"))


def _run(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, **(env or {}))
    for key in ("OMP_NUM_THREADS", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM", "RANK", "LOCAL_RANK", "WORLD_SIZE"):
        if key not in (env or {}):
            full.pop(key, None)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=full, capture_output=True, text=True,
                          timeout=180)


def test_importing_train_modules_changes_nothing():
    """No environment variable, no patched transformers class, no rank line: the imports' own dependencies are
    imported first, so what is left is what train/ itself would do at import."""
    code = f"""
import json, os, sys
import torch, transformers, datasets, accelerate, deepspeed
from transformers import Trainer, TrainingArguments, TrainerCallback
before = dict(os.environ)
threads = torch.get_num_threads()
init, post = transformers.Trainer.__init__, transformers.TrainingArguments.__post_init__
print("DEPENDENCIES-IMPORTED", flush=True)
for name in {MODULES!r}:
    __import__(name)
changed = sorted(set(os.environ.items()) ^ set(before.items()))
assert not changed, changed
assert transformers.Trainer.__init__ is init and transformers.TrainingArguments.__post_init__ is post
assert torch.get_num_threads() == threads
print("IMPORTED-CLEANLY")
"""
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = proc.stdout.split("DEPENDENCIES-IMPORTED\n", 1)[1]
    assert after.strip().splitlines() == ["IMPORTED-CLEANLY"], proc.stdout  # no "[rank 0/1] host=" line


def test_bootstrap_sets_the_rank_environment_once():
    code = """
import os
from train.rank import bootstrap, metrics, patches
a = bootstrap.bootstrap()
b = bootstrap.bootstrap()
assert a is b
print(os.environ["OMP_NUM_THREADS"], os.environ["HF_HUB_OFFLINE"], os.environ["TOKENIZERS_PARALLELISM"])
"""
    proc = _run(code, {"LOCAL_SIZE": "2", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("[rank 1/2] host=") and lines[0].endswith("local_rank=1")
    cpus = len(os.sched_getaffinity(0))
    assert lines[1] == f"{max(1, cpus // 2)} 1 false"
    # what the user set is kept
    proc = _run(code, {"OMP_NUM_THREADS": "7", "HF_HUB_OFFLINE": "0"})
    assert proc.stdout.strip().splitlines()[-1] == "7 0 false"


def test_bootstrap_makes_a_lone_deepspeed_process_rank_0_of_1():
    proc = _run("import os; from train.rank import bootstrap, metrics, patches; bootstrap.bootstrap('ds.json', announce=False); "
                "print(os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['MASTER_ADDR'], "
                "int(os.environ['MASTER_PORT']) > 0)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "1", "127.0.0.1", "True"]


def test_bootstrap_puts_the_variables_passed_to_the_run_into_the_ranks_environment(tmp_path):
    """passthrough.env beside the run's job.json (roles/train_launch/tasks/passthrough.yml): its NAME=value lines go
    into the rank's environment over what it inherited, values as given; other lines are skipped."""
    (tmp_path / "job.json").write_text("{}")
    (tmp_path / "passthrough.env").write_text('HF_TOKEN=hf_x=y "z" $HOME\nnot a line\n9BAD=1\nWANDB_MODE=offline\n')
    proc = _run("import json, os; from train.rank import bootstrap; bootstrap.bootstrap(announce=False); "
                "print(json.dumps([os.environ.get(k) for k in ('HF_TOKEN', 'WANDB_MODE', '9BAD')]))",
                env={"DSC_JOB_FILE": str(tmp_path / "job.json"), "WANDB_MODE": "online"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ['hf_x=y "z" $HOME', "offline", None]


def test_deepspeeds_cpu_allreduce_buffer_is_unlinked_once_mapped():
    """DeepSpeed's TorchBackend on CPU creates /dev/shm/<cpu_allreduce_buffer_name> (a real init_distributed, one
    rank); release_cpu_allreduce_buffer unlinks that very file, while the rank keeps its mapping."""
    proc = _run("""
import json, os
from pathlib import Path
from train.rank import bootstrap, patches
bootstrap.bootstrap('ds.json', announce=False)
import deepspeed, torch.distributed as dist
deepspeed.init_distributed(dist_backend='gloo')
shm = Path(bootstrap.SHM_DIR) / bootstrap.cpu_allreduce_buffer_name(0, os.environ['MASTER_ADDR'], os.environ['MASTER_PORT'])
before = shm.is_file() and shm.stat().st_size
released = patches.release_cpu_allreduce_buffer()
t = __import__('torch').ones(4)
dist.all_reduce(t)  # the backend still works on its mapped buffers
print(json.dumps({"path": str(shm), "before": before, "released": released, "after": shm.exists(),
                  "again": patches.release_cpu_allreduce_buffer(), "sum": t.tolist()}))
""")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"] > 32 * 2**20, out  # DeepSpeed made it: two 32 MB halves and more
    assert out["released"] == out["path"] and out["after"] is False and out["again"] is None, out
    assert out["sum"] == [1.0] * 4


def test_run_identity_prefers_env_then_job_file_then_run_name(tmp_path, monkeypatch):
    monkeypatch.delenv(bootstrap.RUN_NAME_ENV, raising=False)
    monkeypatch.delenv(bootstrap.JOB_FILE_ENV, raising=False)
    out = tmp_path / "run" / "output"
    out.mkdir(parents=True)
    assert metrics.run_identity(out, "from-args")["run_name"] == "from-args"
    assert metrics.run_identity(out, None) == {"run_name": None, "model": None, "model_size": None,
                                               "job_file": None, "mode": "preset"}
    beside = write_job(tmp_path / "run" / "job.json", run_name="beside-output")
    ident = metrics.run_identity(out, "from-args")
    assert ident == {"run_name": "beside-output", "model": "bert", "model_size": "tiny", "job_file": str(beside),
                     "mode": "preset"}
    elsewhere = write_job(tmp_path / "job-elsewhere.json", run_name="from-env-file")
    monkeypatch.setenv(bootstrap.JOB_FILE_ENV, str(elsewhere))
    ident = metrics.run_identity(tmp_path / "somewhere-else", None, script="/x/run_mlm.py")
    assert ident == {"run_name": "from-env-file", "model": None, "model_size": None, "job_file": str(elsewhere),
                     "mode": "script"}
    monkeypatch.setenv(bootstrap.RUN_NAME_ENV, "from-env")
    assert metrics.run_identity(out, "from-args")["run_name"] == "from-env"


def test_configured_state_keeps_the_users_accelerator_config(tmp_path):
    assert patches.configured_state(None) == {"use_configured_state": True}
    assert patches.configured_state('{"split_batches": true}') == {"split_batches": True,
                                                                    "use_configured_state": True}
    path = tmp_path / "acc.json"
    path.write_text(json.dumps({"even_batches": False}))
    assert patches.configured_state(str(path)) == {"even_batches": False, "use_configured_state": True}


def test_num_items_probe_tells_bert_from_gpt2():
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    from .conftest import TINY_BERT, TINY_GPT2

    bert = BertForMaskedLM(BertConfig(vocab_size=100, **TINY_BERT))
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=100, **TINY_GPT2))
    assert patches.fix_loss_kwargs_flag(bert, 100) is False and bert.accepts_loss_kwargs is False
    assert patches.fix_loss_kwargs_flag(gpt2, 100) is True and gpt2.accepts_loss_kwargs is True
    assert bert.training and gpt2.training  # the probe leaves the mode alone
    assert metrics.count_parameters(bert) == sum(p.numel() for p in bert.parameters())


def test_deepspeed_clips_fp32_gradients_only_where_its_engine_would():
    """deepspeed/runtime/engine.py _take_model_step: clip_fp32_gradients runs for gradient_clipping > 0 with no
    fp16/bf16 block enabled and ZeRO stage 0; the ZeRO and bf16/fp16 optimizers clip themselves."""
    clips = patches.deepspeed_clips_fp32_gradients
    base = {"zero_optimization": {"stage": 0}, "gradient_clipping": 1.0, "bf16": {"enabled": False},
            "torch_autocast": {"enabled": True, "dtype": "bfloat16"}}
    assert clips(base)
    assert not clips({**base, "gradient_clipping": 0.0})
    assert not clips({**base, "zero_optimization": {"stage": 2}})
    assert not clips({**base, "bf16": {"enabled": True}}) and not clips({**base, "fp16": {"enabled": True}})
    assert clips({"gradient_clipping": 0.5})  # no zero_optimization block: stage 0
    assert not clips({**base, "bfloat16": {"enabled": True}})  # bf16's alias
    # fp16 autocast: DeepSpeed unscales the GradScaler's gradients only where it clips itself
    assert not clips({**base, "torch_autocast": {"enabled": True, "dtype": "float16"}})
    assert not clips({**base, "tensor_parallel": {"autotp_size": 2}})  # its norm spans the model-parallel group
    assert clips({**base, "tensor_parallel": {"autotp_size": 1}})


def test_clipping_in_the_optimizer_step_clips_and_keeps_the_pre_clip_norm():
    import torch

    w = torch.nn.Parameter(torch.zeros(3))
    b = torch.nn.Parameter(torch.zeros(4))
    optimizer = torch.optim.SGD([{"params": [w]}, {"params": [b]}], lr=1.0)
    holder = patches.clip_in_optimizer_step(optimizer, max_norm=1.0)
    assert holder["norm"] is None
    w.grad, b.grad = torch.tensor([3.0, 0.0, 0.0]), torch.tensor([0.0, 4.0, 0.0, 0.0])  # total norm 5
    optimizer.step()
    assert float(holder["norm"]) == pytest.approx(5.0)
    # SGD with lr 1 moves each weight by its clipped gradient: the gradients scaled by 1 / 5
    assert w.detach().tolist() == pytest.approx([-0.6, 0.0, 0.0], abs=1e-6)
    assert b.detach().tolist() == pytest.approx([0.0, -0.8, 0.0, 0.0], abs=1e-6)
    w.grad, b.grad = torch.tensor([0.3, 0.0, 0.0]), torch.tensor([0.0, 0.4, 0.0, 0.0])  # norm 0.5: left alone
    optimizer.step()
    assert float(holder["norm"]) == pytest.approx(0.5)
    assert w.detach().tolist() == pytest.approx([-0.9, 0.0, 0.0], abs=1e-6)


def test_process_start_is_the_processes_creation_time():
    started = time.time()
    proc = subprocess.run([sys.executable, "-c", "import time; time.sleep(1.2); from train.rank import bootstrap, metrics, patches; "
                           "print(bootstrap.process_start_unix_s())"], cwd=REPO, capture_output=True, text=True,
                          check=True)
    value = float(proc.stdout)
    assert started - 0.05 <= value <= started + 0.8, (started, value)  # at the start, not 1.2 s later at the call


# the ranks' own modules: only a rank loads them, and they import torch (and more) at the top
RANK_ONLY = ("train.rank.callbacks", "train.rank.hooks", "train.rank.kernels", "train.rank.mlm_head",
             "train.rank.perf", "train.rank.pretrain")


@pytest.mark.parametrize("name", [m for m in MODULES if m not in RANK_ONLY])
def test_light_modules_import_no_heavy_package(name):
    """Every module but the ranks' own loads no heavy package: the controller, the data preparation and the nodes'
    tools import them (docs/developers/architecture.md, "Rules of thumb")."""
    code = (f"import sys, {name}; heavy = {{m.split('.')[0] for m in sys.modules}} & "
            "{'torch', 'transformers', 'deepspeed', 'datasets', 'numpy'}; assert not heavy, heavy")
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr


def test_each_rank_output_is_copied_into_its_own_log_file_and_still_reaches_the_stream(tmp_path):
    """Two real rank processes of one run: each one's stdout, stderr, a child's output and its traceback are in
    <run_dir>/logs/<host>.rank<R>.log, and still on the process's own stdout/stderr (the launcher's stream)."""
    import socket

    (tmp_path / "job.json").write_text("{}")
    code = """
import os, subprocess, sys
from train.rank import bootstrap, metrics, patches
info = bootstrap.bootstrap()
print(f"stdout of rank {info.rank}", flush=True)
subprocess.run(["sh", "-c", "echo a child of rank $RANK"])
raise RuntimeError(f"rank {info.rank} failed")
"""
    procs = [_run(code, {"DSC_JOB_FILE": str(tmp_path / "job.json"), "RANK": str(r), "WORLD_SIZE": "2"})
             for r in (0, 1)]
    host = socket.gethostname()
    for rank, proc in enumerate(procs):
        assert proc.returncode == 1
        log = (tmp_path / "logs" / f"{host}.rank{rank}.log").read_text()
        for line in (f"[rank {rank}/2] host={host}", f"stdout of rank {rank}", f"a child of rank {rank}",
                     f"RuntimeError: rank {rank} failed"):
            assert line in log and line in proc.stdout + proc.stderr, (line, log)
        assert f"rank {1 - rank}" not in log  # its own lines only
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [f"{host}.rank0.log", f"{host}.rank1.log"]


def test_a_killed_ranks_lines_are_in_its_log_and_no_tee_is_left(tmp_path):
    """SIGKILL (no exit handler runs): what the rank wrote before is in its file, and its tee processes end."""
    (tmp_path / "job.json").write_text("{}")
    code = """
import os, signal, sys
from train.rank import bootstrap, metrics, patches
bootstrap.bootstrap()
print("before the kill", flush=True)
print("tee pids", *[t.pid for t in bootstrap._TEES], flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = _run(code, {"DSC_JOB_FILE": str(tmp_path / "job.json"), "RANK": "2", "WORLD_SIZE": "4"})
    assert proc.returncode == -9
    log = next((tmp_path / "logs").glob("*.rank2.log")).read_text()
    assert "before the kill" in log and "before the kill" in proc.stdout
    tees = [int(p) for p in proc.stdout.split("tee pids", 1)[1].split()]
    assert len(tees) == 2
    for pid in tees:  # each ended at the end of its pipe (at most a moment after the stream's)
        for _ in range(50):
            if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"tee {pid} still runs after its rank was killed")


def test_without_a_run_there_is_no_rank_log(tmp_path):
    proc = _run("from train.rank import bootstrap, metrics, patches; bootstrap.bootstrap(); print(bootstrap._TEES)", {"RANK": "0"})
    assert proc.returncode == 0 and proc.stdout.strip().endswith("[]")


def test_without_tensorboard_the_run_goes_on_without_events_and_says_so(tmp_path):
    """TensorBoard made unimportable: report_to loses "tensorboard" (the Trainer would refuse it), rank 0 says so on
    stderr, and progress.jsonl's first line is the warning (the follower prints it); another rank stays quiet."""
    code = f"""
import json, sys, types
sys.modules.update({{"tensorboard": None, "tensorboardX": None, "torch.utils.tensorboard": None}})
from train.rank.callbacks import ProgressCallback, usable_report_to
print(json.dumps([usable_report_to("tensorboard", rank=1), usable_report_to(["tensorboard", "none"], rank=0),
                  usable_report_to("none")]))
from transformers import TrainingArguments
from transformers.integrations import get_reporting_integration_callbacks
targs = TrainingArguments(output_dir={str(tmp_path)!r}, report_to=usable_report_to("tensorboard"))
assert targs.report_to == [] and get_reporting_integration_callbacks(targs.report_to) == []
cb = ProgressCallback({str(tmp_path)!r}, 8)
cb.on_train_begin(None, types.SimpleNamespace(is_world_process_zero=True, global_step=0), None)
cb.on_train_end(None, None, None)
"""
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [[], [], []]
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: report_to tensorboard")]
    assert len(warnings) == 2 and "this run writes no TensorBoard events" in warnings[0]  # rank 0's two calls
    first = json.loads((tmp_path / "progress.jsonl").read_text().splitlines()[0])
    assert first["event"] == "warning" and first["message"] == warnings[0].removeprefix("warning: ")

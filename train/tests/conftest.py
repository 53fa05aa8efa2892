"""Shared fixtures for the train/ tests: hand-written jobs, one prepared artifact per tokenizer kind for the whole
session, and a helper that launches train/rank/pretrain.py through the real ``deepspeed`` launcher.

The tests run with the training venv's python (``/root/devtrain/bin/python -m pytest train/tests`` here, the node
venv's under ``make unit``); the deepspeed launcher is taken from beside that python.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
DEEPSPEED = str(Path(PYTHON).parent / "deepspeed")

# Tiny models: a few hundred thousand parameters, a training step in tens of milliseconds on one core.
TINY_BERT = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128,
             "max_position_embeddings": 64, "type_vocab_size": 2}
TINY_GPT2 = {"n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 64}
SEQ = 64


def job_dict(**overrides) -> dict:
    """A resolved job exactly as train.controller.resolve writes it: preset ``model`` (default: the one that fits the given
    model_type / task / tokenizer_type, else bert), size tiny, on cpu, vocab_size 2000, blocks of SEQ, run_name test-run, then ``overrides``
    (any job key). A fixed key (task, model_type, tokenizer_type) the preset does not have is written in as a hand
    edit would be (data_key recomputed), so train.common.job.load_job's validation is what judges it."""
    from train.common import job as J
    from train.controller import resolve as R

    fixed = {k: overrides.pop(k) for k in J.FIXED_KEYS if k in overrides}
    model = (overrides.pop("model", None)
             or {"gpt2": "gpt2", "roberta": "roberta"}.get(fixed.get("model_type"))
             or ("gpt2" if fixed.get("task") == "clm" else "roberta" if fixed.get("tokenizer_type") == "byte_bpe"
                 else "bert"))
    base = {"model_size": "tiny", "accelerator": "cpu", "vocab_size": 2000, "max_seq_length": SEQ, "seed": 42,
            "run_name": "test-run"}
    job = R.resolve(model, {**base, **overrides})
    for key, value in fixed.items():
        job[key] = value
    job["data_key"] = J.data_key(job)
    return job


def write_job(path: Path, **overrides) -> Path:
    """Write job_dict(**overrides) to ``path`` (train.common.jsonio.write_json_atomic); returns the path."""
    from train.common.jsonio import write_json_atomic

    write_json_atomic(path, job_dict(**overrides))
    return path


def one_line_error(proc, *needles) -> str:
    """Assert ``proc`` (a CompletedProcess of a train.* CLI) stopped with exit 2 and one ``error: <what>; <fix>``
    line on stderr containing every needle, no traceback; return that line."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "; " in lines[0], "the message says how to fix it after '; '"
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def run_prepare(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m train.data.prepare_data ARGS`` from the repo root; output captured as text."""
    return subprocess.run([PYTHON, "-m", "train.data.prepare_data", *map(str, args)], check=False, cwd=REPO, text=True,
                          capture_output=True, timeout=timeout)


def prepare_or_fail(job: Path, out: Path) -> subprocess.CompletedProcess:
    proc = run_prepare("--job", job, "--out", out)
    assert proc.returncode == 0, f"prepare_data failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="session")
def bert_artifact(tmp_path_factory) -> Path:
    """The default corpus (stdlib pydoc topics), WordPiece vocab 2000, blocks of 64: shared by all tests."""
    d = tmp_path_factory.mktemp("bert-artifact")
    prepare_or_fail(write_job(d / "job.json"), d / "artifact")
    return d / "artifact"


@pytest.fixture(scope="session")
def gpt2_artifact(tmp_path_factory) -> Path:
    """The default corpus, GPT-2 style byte-level BPE (vocab 1000), task clm, blocks of 64."""
    d = tmp_path_factory.mktemp("gpt2-artifact")
    job = write_job(d / "job.json", model="gpt2", task="clm", model_type="gpt2", tokenizer_type="byte_bpe",
                    vocab_size=1000, lowercase=False, mlm_probability=None)
    prepare_or_fail(job, d / "artifact")
    return d / "artifact"


# ------------------------------------------------------------------------------------------------ deepspeed runs
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ds_config(path: Path, stage: int = 2, client_optimizer: bool = False) -> Path:
    """The repo's ZeRO-<stage> template as train.controller.dsconfig renders it for a CPU job without offload: torch's AdamW
    via DeepSpeed (``torch_adam``), so no DeepSpeed op (fused_adam / cpu_adam) is JIT-compiled. "auto" values stay
    for the HF Trainer to fill. ``client_optimizer``: no optimizer and no scheduler block, as for a job whose
    optimizer is the Trainer's (the GPU defaults; pass ``--optim adamw_torch``)."""
    template = REPO / "templates" / "deepspeed" / f"zero{stage}.json"
    if template.is_file():
        config = json.loads(template.read_text(encoding="utf-8"))
    else:  # minimal stand-in, should the template ever move
        config = {"zero_optimization": {"stage": stage}, "optimizer": {"type": "AdamW", "params": {
            "lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
            "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "train_batch_size": "auto",
            "train_micro_batch_size_per_gpu": "auto"}
        if stage == 3:
            config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    assert config["zero_optimization"]["stage"] == stage
    if str(config.get("optimizer", {}).get("type", "")).lower() in ("adam", "adamw"):
        config["optimizer"].setdefault("params", {})["torch_adam"] = True
    for key in ("bf16", "fp16"):  # CPU: full precision
        config.pop(key, None)
    if client_optimizer:
        config.pop("optimizer", None)
        config.pop("scheduler", None)
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def pretrain_args(artifact: Path, out: Path, ds: Path, *, task: str = "mlm", model_type: str = "bert",
                  config: dict | None = None, max_steps: int = 30, logging_steps: int = 5, micro: int = 8,
                  accum: int = 1, lr: float = 1e-3, warmup: int = 3, weight_decay: float = 0.01,
                  max_grad_norm: float = 1.0) -> list[str]:
    """The pretrain.py command line, in the form train.controller.resolve argv produces it (contract)."""
    config = config if config is not None else (TINY_BERT if model_type == "bert" else TINY_GPT2)
    args = ["--task", task, "--model_type", model_type, "--config_overrides", json.dumps(config),
            "--dataset_dir", str(artifact)]
    if task == "mlm":
        args += ["--mlm_probability", "0.15"]
    args += ["--output_dir", str(out), "--deepspeed", str(ds),
             "--per_device_train_batch_size", str(micro), "--gradient_accumulation_steps", str(accum),
             "--learning_rate", str(lr), "--weight_decay", str(weight_decay), "--adam_beta1", "0.9",
             "--adam_beta2", "0.999", "--adam_epsilon", "1e-06", "--max_grad_norm", str(max_grad_norm),
             "--warmup_steps", str(warmup),
             "--max_steps", str(max_steps), "--save_steps", "1000", "--logging_steps", str(logging_steps),
             "--save_total_limit", "1", "--seed", "42", "--report_to", "none", "--dataloader_num_workers", "0",
             "--lr_scheduler_type", "linear", "--save_strategy", "steps", "--logging_first_step", "true"]
    return args


def launch(ranks: int, args: list[str], workdir: Path, timeout: int = 420,
           entry: tuple[str, ...] = ("--module", "train.rank.pretrain"),
           env_extra: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """``deepspeed --hostfile H --no_ssh_check --master_addr 127.0.0.1 --master_port P --module train.rank.pretrain ARGS`` from
    the repo root, as the playbook runs it on one node; returns (process, seconds)."""
    hostfile = workdir / "hostfile"
    hostfile.write_text(f"localhost slots={ranks}\n", encoding="utf-8")
    port = free_port()
    cmd = [DEEPSPEED, "--hostfile", str(hostfile), "--no_ssh_check", "--master_addr", "127.0.0.1",
           "--master_port", str(port), *entry, *args]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env_extra or {}))
    env.pop("OMP_NUM_THREADS", None)  # let pretrain.py pick (cores / ranks per node)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, check=False, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout)
    elapsed = time.monotonic() - t0
    (workdir / "launch.log").write_text(proc.stdout, encoding="utf-8")
    assert proc.returncode == 0, f"deepspeed launch failed (rc {proc.returncode}):\n{proc.stdout[-6000:]}"
    # DeepSpeed's CPU all-reduce buffers (~67 MB a rank, named after the master port) must not outlive the run
    left = sorted(p.name for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_127.0.0.1_{port}_*"))
    assert not left, f"the run left DeepSpeed's shared-memory buffers in /dev/shm: {left}"
    return proc, elapsed

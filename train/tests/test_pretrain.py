"""train/rank/pretrain.py under the real ``deepspeed`` launcher (gloo on CPU, ZeRO-2 template), plus the two CPU traps.

a. accelerate leaves the backend unset under DeepSpeed on CPU, so the Trainer believes world size is 1:
   the 2-rank run must report trainer_world_size 2 and the ranks must have trained on different batches.
b. the Trainer multiplies the loss by world size for models that ignore num_items_in_batch (BERT):
   the first logged loss must be the same at 1 and 2 ranks, and close to ln(vocab) for a fresh model.
"""

from __future__ import annotations

import json
import math

import pytest

from train.rank.metrics import METRICS_KEYS

from .conftest import SEQ, TINY_BERT, TINY_GPT2, ds_config, job_dict, launch, pretrain_args

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # test tiers: pytest.ini

BERT_STEPS = 30


@pytest.fixture(scope="module")
def bert_2ranks(bert_artifact, tmp_path_factory):
    """A tiny BERT, 2 ranks, 30 steps: the run most tests below look at."""
    work = tmp_path_factory.mktemp("bert-2ranks")
    (work / "job.json").write_text(json.dumps(job_dict(run_name="bert-test-run")))  # beside output/, as the playbook
    out = work / "output"
    args = pretrain_args(bert_artifact, out, ds_config(work / "ds_config.json"), max_steps=BERT_STEPS)
    proc, seconds = launch(2, args, work)
    return {"out": out, "log": proc.stdout, "seconds": seconds, "artifact": bert_artifact,
            "metrics": json.loads((out / "metrics.json").read_text())}


@pytest.fixture(scope="module")
def bert_1rank(bert_artifact, tmp_path_factory):
    """The same tiny BERT and per-rank batch (micro 8 x 1) on 1 rank, 8 steps, a loss logged every step."""
    work = tmp_path_factory.mktemp("bert-1rank")
    (work / "job.json").write_text(json.dumps(job_dict(run_name="bert-test-1rank")))
    out = work / "output"
    launch(1, pretrain_args(bert_artifact, out, ds_config(work / "ds.json"), max_steps=8, logging_steps=1), work)
    return {"out": out, "metrics": json.loads((out / "metrics.json").read_text())}


def test_two_ranks_are_two_ranks(bert_2ranks):
    """Trap a: the Trainer sees world size 2 and each rank gets its own batches."""
    m = bert_2ranks["metrics"]
    assert m["world_size"] == 2
    assert m["trainer_world_size"] == 2
    assert m["global_batch_size"] == 2 * m["per_device_train_batch_size"] * m["gradient_accumulation_steps"]
    assert [r["rank"] for r in m["ranks"]] == [0, 1]
    assert [r["local_rank"] for r in m["ranks"]] == [0, 1]
    r0, r1 = (r["first_batches_sha256"] for r in m["ranks"])
    assert len(r0) == len(r1) == 3 and all(len(h) == 64 for h in r0 + r1)
    assert not set(r0) & set(r1), "both ranks trained on the same batches"
    assert len(set(r0)) == 3, "a rank saw the same batch twice"
    for rank in (0, 1):
        assert f"[rank {rank}/2] host=" in bert_2ranks["log"] and f"local_rank={rank}" in bert_2ranks["log"]


def test_metrics_and_progress(bert_2ranks):
    m, out = bert_2ranks["metrics"], bert_2ranks["out"]
    assert (m["model"], m["model_size"], m["run_name"]) == ("bert", "tiny", "bert-test-run")
    assert m["steps"] == m["max_steps"] == BERT_STEPS
    assert m["last_loss"] < m["first_loss"] - 0.2, (m["first_loss"], m["last_loss"])
    assert m["train_samples_per_second"] > 0 and m["wall_time_s"] > 0
    assert m["model_uses_num_items_in_batch"] is False  # BERT ignores it: the Trainer is told so (trap b)
    assert tuple(m) == METRICS_KEYS and m["mode"] == "preset" and m["script"] is None and m["task"] == "mlm"
    prepared = json.loads((bert_2ranks["artifact"] / "prepare.json").read_text())
    # the model is built with the vocabulary the tokenizer reached, and metrics.json says so next to the ask
    assert m["vocab_size"] == prepared["vocab_size"] and m["vocab_size_requested"] == 2000
    assert m["n_parameters"] > 100_000 and m["train_loss"] > 0 and m["eval"] is None

    lines = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    records = [r for r in lines if "event" not in r]
    # the Trainer saves at the last step (save_strategy steps): one save event, after that step's record
    assert [(r["event"], r["step"], r["checkpoint"]) for r in lines if "event" in r] == [("save", 30, "checkpoint-30")]
    assert lines[-1]["event"] == "save"
    # its size is this node's part of the checkpoint, as it is on disk, and its time positive
    on_disk = sum(p.stat().st_size for p in (out / "checkpoint-30").rglob("*") if p.is_file())
    assert lines[-1]["size_bytes"] == on_disk > 0 and 0 < lines[-1]["save_s"] < 60, lines[-1]
    assert [r["step"] for r in records] == [1, 5, 10, 15, 20, 25, 30]
    keys = {"step", "max_steps", "loss", "learning_rate", "grad_norm", "samples_per_second", "tokens_per_second",
            "interval_s", "elapsed_s", "eta_s", "epoch"}
    assert all(set(r) - {"step_s"} == keys for r in records), records
    # each rank's own step time (stragglers), gathered by host: this one node's 2 ranks, every logged step but the first
    timed = [r["step_s"] for r in records if "step_s" in r]
    assert len(timed) >= len(records) - 1, records
    assert all(len(t) == 1 and all(len(v) == 2 and min(v) > 0 for v in t.values()) for t in timed), timed
    assert all(r["grad_norm"] > 0 for r in records), records  # ZeRO-2's own pre-clip norm
    assert all(r["max_steps"] == BERT_STEPS and r["loss"] > 0 and r["samples_per_second"] > 0 for r in records)
    assert records[-1]["eta_s"] == 0 and records[0]["eta_s"] > 0
    assert [r["elapsed_s"] for r in records] == sorted(r["elapsed_s"] for r in records)
    assert records[0]["loss"] == m["first_loss"] and records[-1]["loss"] == m["last_loss"]
    # samples/s is the rate over the interval since the record before (train/tests/test_rates.py has the cases);
    # tokens/s = samples/s x the block length; metrics.json's steady rate is first -> last logged step
    gb = m["global_batch_size"]
    for before, r in zip(records, records[1:]):
        assert r["interval_s"] == pytest.approx(r["elapsed_s"] - before["elapsed_s"], abs=0.01)
        assert r["samples_per_second"] == pytest.approx(gb * (r["step"] - before["step"]) / r["interval_s"], rel=0.01)
        assert r["tokens_per_second"] == pytest.approx(r["samples_per_second"] * m["block_length"], rel=0.001)
    # from the first record at or after max_steps / 4 (step 10 of 30) to the last
    start = next(r for r in records if r["step"] >= BERT_STEPS // 4)
    assert m["steady_steps"] == [start["step"], BERT_STEPS] and m["steady_mfu"] is None  # no GPU: no MFU
    assert m["steady_samples_per_second"] == pytest.approx(
        gb * (BERT_STEPS - start["step"]) / (records[-1]["elapsed_s"] - start["elapsed_s"]), rel=0.01)
    assert m["steady_tokens_per_second"] == pytest.approx(m["steady_samples_per_second"] * m["block_length"], rel=0.01)
    png = (out / "loss_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_saved_model_reloads_and_fills_a_mask(bert_2ranks, bert_artifact):
    import torch
    from datasets import load_from_disk
    from transformers import AutoModelForMaskedLM, AutoTokenizer, DataCollatorForLanguageModeling

    model_dir = bert_2ranks["out"] / "model"
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model, info = AutoModelForMaskedLM.from_pretrained(str(model_dir), output_loading_info=True)
    model.eval()
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert model.config.model_type == "bert" and model.config.hidden_size == TINY_BERT["hidden_size"]
    assert model.config.vocab_size == len(tok)
    enc = tok(f"the {tok.mask_token} statement is used for conditional execution.", return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    pos = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[0].item()
    predicted = logits[0, pos].argmax().item()
    assert predicted not in tok.all_special_ids
    assert tok.decode([predicted]).strip()
    # the saved weights are the trained ones: their masked-LM loss is well below a fresh model's
    blocks = load_from_disk(str(bert_artifact / "dataset")).select(range(64))
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, seed=0)
    batch = collator([{"input_ids": r["input_ids"], "special_tokens_mask": r["special_tokens_mask"]} for r in blocks])
    with torch.no_grad():
        loss = model(**batch).loss.item()
    assert loss < bert_2ranks["metrics"]["first_loss"] - 0.2, (loss, bert_2ranks["metrics"]["first_loss"])


def test_loss_does_not_depend_on_world_size(bert_artifact, bert_1rank, bert_2ranks):
    """Trap b: same data, seed and micro batch at 1 rank; the first logged loss must agree with the 2-rank run's
    (a factor 2 would not) and both must be near ln(V), the loss of a freshly initialised model."""
    one = bert_1rank["metrics"]
    two = bert_2ranks["metrics"]
    assert one["world_size"] == one["trainer_world_size"] == 1
    vocab = json.loads((bert_artifact / "prepare.json").read_text())["vocab_size"]
    assert abs(one["first_loss"] - two["first_loss"]) < 0.1 * math.log(vocab), (one["first_loss"], two["first_loss"])
    for loss in (one["first_loss"], two["first_loss"]):
        assert loss == pytest.approx(math.log(vocab), rel=0.1)


def test_gpt2_causal_lm_zero3(gpt2_artifact, tmp_path):
    """A causal LM with the ZeRO-3 template (partitioned parameters, weights gathered for the final save)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "output"
    args = pretrain_args(gpt2_artifact, out, ds_config(tmp_path / "ds.json", stage=3), task="clm",
                         model_type="gpt2", max_steps=6, logging_steps=4, warmup=1)
    launch(2, args + ["--pad_vocab_to_multiple_of", "128"], tmp_path)  # the GPU default's padded vocabulary
    m = json.loads((out / "metrics.json").read_text())
    assert (m["world_size"], m["trainer_world_size"], m["steps"], m["task"]) == (2, 2, 6, "clm")
    assert m["model_uses_num_items_in_batch"] is True  # GPT-2 normalises by the all-ranks token count itself
    vocab = json.loads((gpt2_artifact / "prepare.json").read_text())["vocab_size"]
    assert m["first_loss"] == pytest.approx(math.log(vocab), rel=0.1)  # not x2 at 2 ranks
    assert m["last_loss"] < m["first_loss"]
    records = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    records = [r for r in records if "event" not in r]  # the save at the last step is an event line
    assert [r["step"] for r in records] == [1, 4, 6]  # the last step is logged although 6 % 4 != 0
    r0, r1 = (r["first_batches_sha256"] for r in m["ranks"])
    assert not set(r0) & set(r1)
    # the checkpoint the Trainer saved at the last step is complete by train/node/checkpoints.py's rule: at ZeRO-3
    # every rank's model states and optimizer shard, both RNG states, whole files
    from train.node import checkpoints

    ckpt = out / "checkpoint-6"
    assert checkpoints.problems(ckpt, 2, 3) == []
    assert len(list(ckpt.glob("global_step6/zero_pp_rank_*_mp_rank_00_model_states.pt"))) == 2
    found = checkpoints.problems(ckpt, 3, 3)  # taken for a 3-rank run: rank 2's files are missing
    assert "no optimizer shard of rank 2 in global_step6/" in found and "no RNG state of rank 2" in found, found
    tok = AutoTokenizer.from_pretrained(str(out / "model"))
    model, info = AutoModelForCausalLM.from_pretrained(str(out / "model"), output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert m["n_parameters"] == sum(p.numel() for p in model.parameters())  # counted right although partitioned
    assert model.config.n_embd == TINY_GPT2["n_embd"] and model.config.vocab_size == -(-len(tok) // 128) * 128
    assert model.config.vocab_size > len(tok) and m["vocab_size"] == model.config.vocab_size
    ids = tok("The if statement", return_tensors="pt")["input_ids"]
    gen = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    assert gen.shape[1] == ids.shape[1] + 5


def test_llama_with_grouped_query_attention_and_activation_checkpointing(gpt2_artifact, tmp_path):
    """The llama preset's model (LlamaForCausalLM: RoPE, RMSNorm, SwiGLU, 2 key/value heads for 4 query heads) on
    the same byte-level BPE blocks, 2 ranks, with activation checkpointing as the memory plan turns it on: the loss
    falls and the saved model loads as a Llama with its grouped-query attention."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from train.controller import resolve

    job = resolve.resolve("llama", {"accelerator": "cpu", "model_size": "tiny", "gradient_checkpointing": True})
    config = {**job["model_config"], "max_position_embeddings": SEQ}
    out = tmp_path / "output"
    args = pretrain_args(gpt2_artifact, out, ds_config(tmp_path / "ds.json", stage=2), task="clm",
                         model_type="llama", config=config, max_steps=8, logging_steps=4, warmup=1)
    flags = resolve.argv(job, "/d", "/o", "/c.json")
    i = flags.index("--gradient_checkpointing")
    launch(2, args + flags[i:i + 4], tmp_path)  # --gradient_checkpointing true --gradient_checkpointing_kwargs {..}
    m = json.loads((out / "metrics.json").read_text())
    assert (m["world_size"], m["steps"], m["task"]) == (2, 8, "clm")
    assert m["last_loss"] < m["first_loss"]
    assert torch.load(out / "model" / "training_args.bin", weights_only=False).gradient_checkpointing is True
    tok = AutoTokenizer.from_pretrained(str(out / "model"))
    model, info = AutoModelForCausalLM.from_pretrained(str(out / "model"), output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (model.config.num_attention_heads, model.config.num_key_value_heads) == (4, 2)
    assert model.model.layers[0].self_attn.k_proj.out_features == 2 * (128 // 4)  # 2 kv heads of 32
    assert m["n_parameters"] == sum(p.numel() for p in model.parameters()) and model.config.vocab_size == len(tok)
    gen = model.generate(tok("The if statement", return_tensors="pt")["input_ids"], max_new_tokens=3, do_sample=False)
    assert gen.shape[1] > 3


def test_float8_through_the_rank_and_deepspeed(gpt2_artifact, tmp_path):
    """-e float8=tensorwise as the rank runs it (job key float8, torch's CPU emulation of the float8 matmuls): one
    rank of the llama preset's tiny model under DeepSpeed ZeRO-2 converts the nn.Linear layers of its blocks (7 a
    layer), says so, trains (the loss falls), and its saved model loads as a plain LlamaForCausalLM."""
    pytest.importorskip("torchao")
    from transformers import AutoModelForCausalLM

    from train.controller import resolve

    job = resolve.resolve("llama", {"accelerator": "cpu", "model_size": "tiny", "float8": "tensorwise"})
    config = {**job["model_config"], "max_position_embeddings": SEQ}
    out = tmp_path / "output"
    args = pretrain_args(gpt2_artifact, out, ds_config(tmp_path / "ds.json", stage=2), task="clm",
                         model_type="llama", config=config, max_steps=8, logging_steps=4, warmup=1)
    flags = resolve.argv(job, "/d", "/o", "/c.json")
    i = flags.index("--float8")
    proc, _ = launch(1, args + flags[i:i + 2], tmp_path)
    layers = config["num_hidden_layers"]
    assert f"[pretrain] float8 (tensorwise): {7 * layers} nn.Linear layers of the blocks" in proc.stdout
    m = json.loads((out / "metrics.json").read_text())
    assert m["steps"] == 8 and m["last_loss"] < m["first_loss"]
    model, info = AutoModelForCausalLM.from_pretrained(str(out / "model"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert type(model.model.layers[0].mlp.up_proj).__name__ == "Linear"


def _checkpoint_estimate_matches(ckpt, model_type, config, vocab, zero_stage, ranks=2):
    """The plan's estimate of one checkpoint on the disk of the node that holds it whole (train.controller.memory
    checkpoint_bytes) against the checkpoint the run wrote: never below it, and its model and optimizer part within
    -15 % / +10 % of it (the fixed CHECKPOINT_EXTRA_BYTES covers tokenizer, RNG states and the rest)."""
    from train.controller import memory

    job = {"model_type": model_type, "model_config": config, "vocab_size": vocab, "zero_stage": zero_stage,
           "precision": "fp32", "autocast": False}
    on_disk = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
    estimate = memory.checkpoint_bytes(job, {"node": ranks}, "node")["node"]
    states = estimate - memory.CHECKPOINT_EXTRA_BYTES
    assert on_disk <= estimate and 0.85 * on_disk <= states <= 1.1 * on_disk, (ckpt, on_disk, states)


def test_the_plans_checkpoint_estimate_matches_what_the_runs_wrote(bert_2ranks, gpt2_artifact, tmp_path):
    """ZeRO-2 BERT (2 ranks, the module fixture's run) and a ZeRO-3 GPT-2 (2 ranks): the checkpoints on disk against
    the plan's estimate, which the preflight compares with each node's free space."""
    (ckpt,) = sorted(bert_2ranks["out"].glob("checkpoint-*"))
    _checkpoint_estimate_matches(ckpt, "bert", TINY_BERT, bert_2ranks["metrics"]["vocab_size"], 2)
    out = tmp_path / "output"
    args = pretrain_args(gpt2_artifact, out, ds_config(tmp_path / "ds.json", stage=3), task="clm",
                         model_type="gpt2", max_steps=2, logging_steps=1, warmup=1)
    launch(2, args, tmp_path)
    m = json.loads((out / "metrics.json").read_text())
    (ckpt,) = sorted(out.glob("checkpoint-*"))
    _checkpoint_estimate_matches(ckpt, "gpt2", TINY_GPT2, m["vocab_size"], 3)


# ----------------------------------------------------------------------------------------------- in-process units
def test_bad_dataset_dir_is_a_usage_error(tmp_path, gpt2_artifact):
    from train.rank.pretrain import DataArguments, UsageError, load_artifact

    with pytest.raises(UsageError, match="prepare_data"):
        load_artifact(DataArguments(dataset_dir=str(tmp_path / "nothing")), "mlm")
    with pytest.raises(UsageError, match="prepared for task clm"):
        load_artifact(DataArguments(dataset_dir=str(gpt2_artifact)), "mlm")


def test_build_model_makes_a_fresh_model_on_the_given_device(bert_artifact):
    """pretrain.main builds a fresh model on the rank's GPU (start-up); here the meta device stands in for it:
    every parameter and buffer must end up there (built there: a meta tensor cannot be initialised and moved
    back)."""
    import torch
    from train.rank.pretrain import DataArguments, ModelArguments, build_model, load_artifact

    tokenizer, _, _ = load_artifact(DataArguments(dataset_dir=str(bert_artifact)), "mlm")
    args = ModelArguments(model_type="bert", config_overrides=json.dumps(TINY_BERT), mlm_head="masked")
    model, _ = build_model(args, tokenizer, 32, torch.device("meta"))
    devices = {t.device.type for t in [*model.parameters(), *model.buffers()]}
    assert devices == {"meta"}
    model, config = build_model(args, tokenizer, 32)
    assert {p.device.type for p in model.parameters()} == {"cpu"} and config.vocab_size == len(tokenizer)


def test_a_padded_vocabulary_leaves_the_loss_within_noise(gpt2_artifact):
    """pad_vocab_to_multiple_of (the GPU default, 128): the model gets len(tokenizer) rounded up to 128 rows; with
    the same weights for the real rows, a real batch's loss differs from the unpadded model's only by the padded
    logits' share of the softmax (the rows no token uses): under 1 % at initialisation, and the padded rows get no
    input ever."""
    import torch
    from train.rank.pretrain import DataArguments, ModelArguments, build_model, load_artifact, padded_vocab_size

    assert (padded_vocab_size(50257, 128), padded_vocab_size(30522, 128), padded_vocab_size(512, 128)) == (
        50304, 30592, 512)
    with pytest.raises(ValueError, match=">= 1"):
        padded_vocab_size(100, 0)
    tokenizer, dataset, _ = load_artifact(DataArguments(dataset_dir=str(gpt2_artifact)), "clm")
    gpt2 = {"task": "clm", "model_type": "gpt2", "config_overrides": json.dumps(TINY_GPT2)}
    plain, _ = build_model(ModelArguments(**gpt2), tokenizer, SEQ)
    padded, config = build_model(ModelArguments(**gpt2, pad_vocab_to_multiple_of=128), tokenizer, SEQ)
    n = len(tokenizer)
    assert config.vocab_size % 128 == 0 and 0 < config.vocab_size - n < 128
    state = plain.state_dict()
    with torch.no_grad():
        for name, t in padded.state_dict().items():
            t[:n].copy_(state[name]) if t.shape != state[name].shape else t.copy_(state[name])
    ids = torch.tensor([dataset[i]["input_ids"] for i in range(4)])
    assert int(ids.max()) < n
    with torch.no_grad():
        a = plain(input_ids=ids, labels=ids).loss.item()
        b = padded(input_ids=ids, labels=ids).loss.item()
    assert b == pytest.approx(a, rel=0.01) and b != a


def _progress(out) -> list[dict]:
    return [r for r in map(json.loads, (out / "progress.jsonl").read_text().splitlines()) if "event" not in r]


def test_perf_json_and_clipping_in_the_client_optimizer(bert_artifact, tmp_path):
    """The GPU defaults' path on CPU (ZeRO-0, the Trainer's own AdamW, no DeepSpeed optimizer block):

    - PerfCallback (make bench reads it): perf.json's steady window counts the samples really trained, its
      start-up phases come in order, and DSC_PROFILE_STEPS=A:B writes profile.txt with the window's seconds;
    - gradients are clipped in the optimizer's step (patches.clip_without_host_sync), not by DeepSpeed's
      clip_fp32_gradients: the same losses and pre-clip gradient norms (logged at every step; DeepSpeed reports
      none on that path) as the plain Trainer without DeepSpeed, which clips with torch's clip_grad_norm_.
      max_grad_norm 0.05 is far below the norms (~2): a run that did not clip would lose differently, and a hook
      registered twice would log the clipped norm; the engine's own clipping is 0 (not clipping twice)."""
    runs = {}
    for name in ("deepspeed", "plain"):
        work = tmp_path / name
        work.mkdir()
        out = work / "output"
        args = pretrain_args(bert_artifact, out, ds_config(work / "ds.json", stage=0, client_optimizer=True),
                             max_steps=8, micro=4, accum=2, logging_steps=1, weight_decay=0.0,
                             max_grad_norm=0.05) + ["--optim", "adamw_torch"]
        if name == "plain":  # the Trainer without DeepSpeed: accelerate clips with torch's clip_grad_norm_
            i = args.index("--deepspeed")
            del args[i:i + 2]
        launch(1, args, work, env_extra={"DSC_PROFILE_STEPS": "3:4"} if name == "deepspeed" else None)
        runs[name] = out
    out = runs["deepspeed"]
    perf = json.loads((out / "perf.json").read_text())
    assert perf["steady_steps"] == [2, 8] and perf["steady_samples"] == 6 * 4 * 2, perf
    assert perf["steady_samples_per_second"] > 0 and perf["first_step_end_unix_s"] > perf["train_begin_unix_s"]
    startup = perf["startup"]
    order = ["process_start", "imports_done", "arguments_parsed", "data_loaded", "model_built", "trainer_built",
             "train_begin", "first_step_end"]
    assert list(startup) == order and all(isinstance(startup[k], float) for k in order), startup
    assert [startup[k] for k in order] == sorted(startup[k] for k in order), startup
    assert startup["imports_done"] - startup["process_start"] > 0.5  # torch and transformers were imported
    from train.tools.bench import STARTUP_PHASES, startup_phases

    phases = startup_phases(startup, launch=startup["process_start"] - 1.0)  # the report's breakdown
    assert [name for name, _ in phases] == [name for name, _ in STARTUP_PHASES] and phases[0][1] == 1.0
    assert sum(sec for _, sec in phases) == pytest.approx(startup["first_step_end"] - startup["process_start"] + 1,
                                                           abs=0.05)
    profile = perf["profile"]
    assert profile["steps"] == [3, 4] and profile["wall_s"] > 0 and profile["gpu_kernel_s"] == 0  # no GPU here
    text = (out / "profile.txt").read_text()
    assert text.startswith("torch.profiler, steps 3..4 (2 optimizer steps): ") and "by CPU time (self):" in text
    assert "aten::" in text and "by Python stack:\nnone" in text  # no GPU: nothing to wait for
    assert "GPU idle: 0.0 ms in 0 gaps" in text and profile["gpu_idle_s"] == 0  # no device events on CPU

    assert perf["deepspeed_gradient_clipping"] == 0  # DeepSpeed does not clip a second time
    ours, theirs = _progress(runs["deepspeed"]), _progress(runs["plain"])
    assert [r["step"] for r in ours] == [r["step"] for r in theirs] == list(range(1, 9))
    assert [r["loss"] for r in ours] == pytest.approx([r["loss"] for r in theirs], rel=1e-4)
    assert ours[-1]["loss"] != pytest.approx(ours[0]["loss"], rel=1e-3)  # it trained
    assert all(r["grad_norm"] > 0.5 for r in ours), ours  # pre-clip norms, well above max_grad_norm
    assert [r["grad_norm"] for r in ours] == pytest.approx([r["grad_norm"] for r in theirs], rel=1e-4)


def test_scaling_report_from_real_runs_at_one_and_two_ranks(bert_1rank, bert_2ranks, tmp_path):
    """train.tools.bench's data-parallel scaling (docs/gpu-validation.md) from two real CPU runs of the same
    per-rank batch, 1 and 2 ranks: the report's efficiency is the per-rank throughput ratio of their perf.json files,
    the target line and the table say it; a run with another per-rank batch gets no efficiency, and says why."""
    from train.tools import bench

    one, two = bert_1rank["out"].parent, bert_2ranks["out"].parent
    records = [{"label": f"bert tiny, {n} rank(s)", "run_name": d.name, "command": f"launch({n})",
                "series": "bert tiny (CPU)", "run_dirs": [str(d)]} for n, d in ((2, two), (1, one))]
    (tmp_path / "runs.json").write_text(json.dumps(records))
    assert bench.main(["report", "--runs", str(tmp_path / "runs.json"), "--out", str(tmp_path / "rep"),
                       "--stem", "scaling"]) == 0
    data = json.loads((tmp_path / "rep" / "scaling.json").read_text())
    sps = {n: json.loads((d / "output" / "perf.json").read_text())["steady_samples_per_second"]
           for n, d in ((1, one), (2, two))}
    rows = data["scaling"]
    assert [r["world_size"] for r in rows] == [1, 2] and {r["per_gpu_batch"] for r in rows} == {"8 x 1"}, rows
    assert rows[0]["efficiency"] == 1.0 and rows[1]["speedup"] == pytest.approx(sps[2] / sps[1], abs=1e-4)
    efficiency = sps[2] / 2 / sps[1]
    assert rows[1]["efficiency"] == pytest.approx(efficiency, abs=1e-4), (rows, sps)
    verdict = "met" if efficiency >= 0.95 else "missed"
    assert f"bert tiny (CPU): scaling efficiency at 2 GPUs (per GPU against 1 GPU) >= 95 %: {100 * efficiency:.1f} % " \
        f"— {verdict}" in \
        data["targets"], data["targets"]
    md = (tmp_path / "rep" / "scaling.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| bert tiny (CPU) | 2 | ")).split(" | ")
    # samples/s and per GPU, printed to 0.1 (the report rounds per GPU to 0.01 first)
    assert float(row[2].replace(",", "")) == pytest.approx(sps[2], abs=0.051), md
    assert float(row[3].replace(",", "")) == pytest.approx(sps[2] / 2, abs=0.06) and row[4] == "8 x 1", md

    # what the user saw beside the benchmark's window: the progress line's rate at the last step, the summary's
    # steady rate and the Trainer's average, each from that run's own files, and the 10 % target on the first
    two_run = next(r for r in data["runs"] if r["world_size"] == 2)
    last = [json.loads(ln) for ln in (bert_2ranks["out"] / "progress.jsonl").read_text().splitlines()
            if '"event"' not in ln][-1]
    assert two_run["progress_last_samples_per_second"] == last["samples_per_second"] > 0
    assert two_run["summary_steady_samples_per_second"] == bert_2ranks["metrics"]["steady_samples_per_second"]
    assert two_run["summary_average_samples_per_second"] == bert_2ranks["metrics"]["train_samples_per_second"]
    shown, steady = last["samples_per_second"], two_run["samples_per_second"]
    verdict = "met" if abs(shown - steady) <= 0.1 * steady else "missed"
    assert (f"bert tiny, 2 rank(s): the progress line's samples/s at the last step within 10 % of the steady rate: "
            f"{shown:,.1f} vs {steady:,.1f} — {verdict}") in data["targets"], data["targets"]

    # a repeated run of one world size replaces the earlier one (the last record counts)
    again = data["runs"] + [dict(data["runs"][0], samples_per_second=2 * data["runs"][0]["samples_per_second"])]
    twice = bench.scaling(again)
    assert [r["world_size"] for r in twice] == [1, 2] and twice[1]["samples_per_second"] == 2 * sps[2], twice

    other = [dict(r, micro_batch=16) if r["world_size"] == 2 else r for r in data["runs"]]
    mixed = bench.scaling(other)
    assert mixed[1]["efficiency"] is None and "per-GPU batch 16 x 1 differs from the 1-rank run's 8 x 1" in \
        mixed[1]["note"], mixed


def _losses(out) -> dict[int, float]:
    records = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "event" not in r and r.get("loss") is not None}


def test_a_zero2_checkpoint_of_2_ranks_resumes_on_1_through_the_universal_checkpoint(bert_artifact, tmp_path):
    """-e resume= on another world size, as train.yml runs it on one node: a 2-rank ZeRO-2 run saves checkpoint-10;
    the same checkpoint resumed on 2 ranks (the reference) and, converted by train.node.checkpoints universal, on 1
    rank with twice the accumulation (the global batch kept; "checkpoint": {"load_universal": true}). The 1-rank run
    goes on from step 10 with the same samples in each optimizer step (data order) and the loss within noise of the
    reference; the conversion is made once and reused."""
    import shutil
    import subprocess
    import sys

    from train.node import checkpoints

    work = tmp_path / "first"
    work.mkdir()
    out = work / "output"
    common = dict(max_steps=10, logging_steps=1)
    launch(2, pretrain_args(bert_artifact, out, ds_config(work / "ds.json"), **common), work)
    ckpt = out / "checkpoint-10"
    assert checkpoints.mark(ckpt, 2, 2) == []

    def resume(name, ranks, accum, universal):
        w = tmp_path / name
        (w / "output").mkdir(parents=True)
        shutil.copytree(ckpt, w / "output" / "checkpoint-10")
        ds = json.loads(ds_config(w / "ds.json").read_text())
        if universal:
            ds["checkpoint"] = {"load_universal": True}
        (w / "ds.json").write_text(json.dumps(ds))
        if universal:
            for _ in range(2):  # the second call finds the first's conversion
                res = subprocess.run([sys.executable, "-m", "train.node.checkpoints", "universal",
                                      str(w / "output" / "checkpoint-10")], capture_output=True, text=True,
                                     check=False, timeout=300)
                assert res.returncode == 0, res.stderr[-3000:]
                done = json.loads(res.stdout)
                assert done["tag"] == "global_step10_universal"
                conversions.append(done["converted"])
            assert (w / "output" / "checkpoint-10" / "latest_universal").read_text() == "global_step10_universal"
            assert checkpoints.verify(w / "output" / "checkpoint-10") == []  # still the complete checkpoint it was
        args = pretrain_args(bert_artifact, w / "output", w / "ds.json", max_steps=14, logging_steps=1, accum=accum)
        proc, _ = launch(ranks, args + ["--resume_from_checkpoint", str(w / "output" / "checkpoint-10")], w)
        return proc, json.loads((w / "output" / "metrics.json").read_text()), _losses(w / "output")

    conversions = []
    _, ref_m, ref = resume("same", 2, 1, False)
    proc, one_m, one = resume("fewer", 1, 2, True)
    assert conversions == [True, False]
    # DeepSpeed's loader of a universal checkpoint's parameter files (base_optimizer; its INFO lines are not shown)
    assert "load_hp_checkpoint_state_from_checkpoint_dir" in proc.stdout
    assert one_m["world_size"] == 1 and one_m["global_batch_size"] == ref_m["global_batch_size"] == 16
    assert sorted(one) == sorted(ref) == [11, 12, 13, 14]  # on from step 10, not from step 1
    # data order: the 2 ranks' first micro batches (step 11) are the 1 rank's first two (its 2 accumulation steps)
    r0, r1 = (r["first_batches_sha256"] for r in ref_m["ranks"])
    assert set(one_m["ranks"][0]["first_batches_sha256"][:2]) == {r0[0], r1[0]}
    first = _losses(out)
    for step in one:  # within noise of the same steps on 2 ranks (masks and dropout differ), below the first loss
        assert one[step] == pytest.approx(ref[step], rel=0.1), (step, one, ref)
        assert one[step] < first[1]

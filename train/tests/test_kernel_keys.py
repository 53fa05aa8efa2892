"""The kernel job keys (unpadded_attention, fused_cross_entropy, float8): what ``auto`` picks on cuda and cpu, a user's value
kept, the refusals, and pretrain's flags for them (train/controller/resolve.py, train/common/job.py; the rank side
is tested in test_kernels.py)."""

import datetime

import pytest

from train.common import job as J
from train.controller import resolve as R

NOW = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
KEYS = ("unpadded_attention", "fused_cross_entropy")


def _pick(job):
    return {k: job[k] for k in KEYS}


def _flags(args):
    return dict(zip(args[::2], args[1::2], strict=True))


def test_auto_on_cuda_and_cpu():
    for model in ("bert", "gpt2", "roberta"):
        assert _pick(R.resolve(model, {"accelerator": "cuda"}, now=NOW)) == {
            "unpadded_attention": True, "fused_cross_entropy": False}, model
    llama = R.resolve("llama", {"accelerator": "cuda", "model_size": "1b"}, now=NOW)
    assert _pick(llama) == {"unpadded_attention": True, "fused_cross_entropy": False}
    for model in ("bert", "gpt2", "roberta", "llama"):
        cpu = R.resolve(model, {"accelerator": "cpu", "model_size": "tiny"}, now=NOW)
        assert _pick(cpu) == {"unpadded_attention": False, "fused_cross_entropy": False}, model
    # another attention implementation has its own mask handling
    eager = R.resolve("gpt2", {"accelerator": "cuda", "attention": "eager"}, now=NOW)
    assert eager["unpadded_attention"] is False


def test_fused_cross_entropy_auto_rule_when_switched_on(monkeypatch):
    """AUTO_FUSED_CROSS_ENTROPY is off (slower on the GPU measured); the rule it gates: causal LMs on cuda only."""
    assert R.AUTO_FUSED_CROSS_ENTROPY is False
    monkeypatch.setattr(R, "AUTO_FUSED_CROSS_ENTROPY", True)
    assert R.resolve("gpt2", {"accelerator": "cuda"}, now=NOW)["fused_cross_entropy"] is True
    assert R.resolve("bert", {"accelerator": "cuda"}, now=NOW)["fused_cross_entropy"] is False
    assert R.resolve("gpt2", {"accelerator": "cpu", "model_size": "tiny"}, now=NOW)["fused_cross_entropy"] is False


def test_a_users_values_are_kept():
    job = R.resolve("gpt2", {"accelerator": "cuda", "unpadded_attention": "false", "fused_cross_entropy": "true"},
                    now=NOW)
    assert _pick(job) == {"unpadded_attention": False, "fused_cross_entropy": True}
    assert R.resolve("gpt2", {"accelerator": "cpu", "model_size": "tiny", "unpadded_attention": "true"},
                     now=NOW)["unpadded_attention"] is True  # runs on CPU too (its tests do)


@pytest.mark.parametrize("model, overrides, key", [
    ("gpt2", {"accelerator": "cuda", "attention": "eager", "unpadded_attention": "true"}, "unpadded_attention"),
    ("gpt2", {"accelerator": "cpu", "model_size": "tiny", "fused_cross_entropy": "true"}, "fused_cross_entropy"),
    ("bert", {"accelerator": "cuda", "fused_cross_entropy": "true"}, "fused_cross_entropy"),
])
def test_refusals_name_the_key(model, overrides, key):
    with pytest.raises(J.JobError) as err:
        R.resolve(model, overrides, now=NOW)
    assert key in str(err.value)


def test_pretrain_flags():
    on = _flags(R.argv(R.resolve("gpt2", {"accelerator": "cuda", "fused_cross_entropy": "true"}, now=NOW),
                       "/d", "/o", "/c.json"))
    assert (on["--unpadded_attention"], on["--fused_cross_entropy"]) == ("true", "true")
    off = _flags(R.argv(R.resolve("gpt2", {"accelerator": "cpu", "model_size": "tiny"}, now=NOW), "/d", "/o",
                        "/c.json"))
    assert not {"--unpadded_attention", "--fused_cross_entropy"} & set(off)


def test_the_keys_are_user_keys():
    assert {*KEYS, "float8"} <= set(R.override_keys())


def test_float8_auto_resolves_to_none_and_a_recipe_is_kept():
    for model, over in (("bert", {}), ("gpt2", {}), ("llama", {"model_size": "1b"})):
        assert R.resolve(model, {"accelerator": "cuda", **over}, now=NOW)["float8"] == "none", model
        assert R.resolve(model, {"accelerator": "cpu", "model_size": "tiny"}, now=NOW)["float8"] == "none", model
    for recipe in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
        job = R.resolve("bert", {"accelerator": "cuda", "float8": recipe}, now=NOW)
        assert job["float8"] == recipe
        assert _flags(R.argv(job, "/d", "/o", "/c.json"))["--float8"] == recipe
    # on the CPU too (torch emulates float8 matmuls there: how its tests run)
    assert R.resolve("llama", {"accelerator": "cpu", "model_size": "tiny", "float8": "rowwise"}, now=NOW)["float8"] == "rowwise"
    assert "--float8" not in R.argv(R.resolve("bert", {"accelerator": "cuda"}, now=NOW), "/d", "/o", "/c.json")


@pytest.mark.parametrize("model, value, says", [
    ("gpt2", "tensorwise", "Conv1D"),
    ("bert", "fast", "float8 must be one of none, tensorwise, rowwise, rowwise_with_gw_hp or auto"),
    ("bert", "true", "float8 must be one of"),
    ("llama", "tensorwise", "ZeRO-3"),
])
def test_float8_refusals(model, value, says):
    zero3 = {"zero_stage": 3} if model == "llama" else {}
    with pytest.raises(J.JobError) as err:
        R.resolve(model, {"accelerator": "cuda", "float8": value, **zero3}, now=NOW)
    assert says in str(err.value) and "-e float8=" in str(err.value)


def test_float8_auto_rule_when_switched_on(monkeypatch):
    """AUTO_FLOAT8 is none (slower for BERT-base on the GPU measured); the rule it gates: cuda, not Conv1D blocks."""
    assert R.AUTO_FLOAT8 == "none"
    monkeypatch.setattr(R, "AUTO_FLOAT8", "tensorwise")
    assert R.resolve("bert", {"accelerator": "cuda"}, now=NOW)["float8"] == "tensorwise"
    assert R.resolve("llama", {"accelerator": "cuda", "model_size": "1b"}, now=NOW)["float8"] == "tensorwise"
    assert R.resolve("gpt2", {"accelerator": "cuda"}, now=NOW)["float8"] == "none"
    assert R.resolve("bert", {"accelerator": "cpu", "model_size": "tiny"}, now=NOW)["float8"] == "none"
    assert R.resolve("llama", {"accelerator": "cuda", "model_size": "1b", "zero_stage": 3}, now=NOW)["float8"] == "none"

"""The kernel job keys (unpadded_attention, sdpa_backend, fused_cross_entropy, float8): what ``auto`` picks on cuda
and cpu, a user's value kept, the refusals, and pretrain's flags for them (train/controller/resolve.py,
train/common/job.py; the rank side is tested in test_kernels.py)."""

import datetime

import pytest

from train.common import job as J
from train.controller import resolve as R

NOW = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
KEYS = ("unpadded_attention", "sdpa_backend", "fused_cross_entropy", "float8")


def _pick(job):
    return {k: job[k] for k in KEYS}


def _flags(args):
    return dict(zip(args[::2], args[1::2], strict=True))


def test_auto_on_cuda_and_cpu():
    bert = R.resolve("bert", {"accelerator": "cuda"}, now=NOW)
    gpt2 = R.resolve("gpt2", {"accelerator": "cuda"}, now=NOW)
    llama = R.resolve("llama", {"accelerator": "cuda", "model_size": "1b"}, now=NOW)
    assert _pick(bert) == {"unpadded_attention": True, "sdpa_backend": R.AUTO_SDPA_BACKEND,
                           "fused_cross_entropy": False, "float8": False}
    assert _pick(gpt2) == {"unpadded_attention": True, "sdpa_backend": R.AUTO_SDPA_BACKEND,
                           "fused_cross_entropy": R.AUTO_FUSED_CROSS_ENTROPY, "float8": False}
    assert llama["fused_cross_entropy"] == R.AUTO_FUSED_CROSS_ENTROPY and llama["unpadded_attention"] is True
    for model in ("bert", "gpt2", "roberta", "llama"):
        cpu = R.resolve(model, {"accelerator": "cpu", "model_size": "tiny"}, now=NOW)
        assert _pick(cpu) == {"unpadded_attention": False, "sdpa_backend": "default",
                              "fused_cross_entropy": False, "float8": False}, model
    # another attention implementation: no SDPA to choose a kernel of, and its own mask handling
    eager = R.resolve("gpt2", {"accelerator": "cuda", "attention": "eager"}, now=NOW)
    assert (eager["unpadded_attention"], eager["sdpa_backend"]) == (False, "default")


def test_a_users_values_are_kept():
    job = R.resolve("gpt2", {"accelerator": "cuda", "unpadded_attention": "false", "sdpa_backend": "cudnn",
                             "fused_cross_entropy": "false", "float8": "true"}, now=NOW)
    assert _pick(job) == {"unpadded_attention": False, "sdpa_backend": "cudnn", "fused_cross_entropy": False,
                          "float8": True}
    assert R.resolve("gpt2", {"accelerator": "cpu", "model_size": "tiny", "unpadded_attention": "true"},
                     now=NOW)["unpadded_attention"] is True  # runs on CPU too (its tests do)


@pytest.mark.parametrize("overrides, key", [
    ({"accelerator": "cuda", "attention": "eager", "unpadded_attention": "true"}, "unpadded_attention"),
    ({"accelerator": "cpu", "model_size": "tiny", "sdpa_backend": "cudnn"}, "sdpa_backend"),
    ({"accelerator": "cuda", "attention": "eager", "sdpa_backend": "flash"}, "sdpa_backend"),
    ({"accelerator": "cuda", "sdpa_backend": "fastest"}, "sdpa_backend"),
    ({"accelerator": "cpu", "model_size": "tiny", "fused_cross_entropy": "true"}, "fused_cross_entropy"),
    ({"accelerator": "cpu", "model_size": "tiny", "float8": "true"}, "float8"),
])
def test_refusals_name_the_key(overrides, key):
    with pytest.raises(J.JobError) as err:
        R.resolve("gpt2", overrides, now=NOW)
    assert key in str(err.value)


def test_fused_cross_entropy_is_for_causal_lms():
    with pytest.raises(J.JobError, match="fused_cross_entropy"):
        R.resolve("bert", {"accelerator": "cuda", "fused_cross_entropy": "true"}, now=NOW)


def test_pretrain_flags():
    on = _flags(R.argv(R.resolve("gpt2", {"accelerator": "cuda", "sdpa_backend": "cudnn", "float8": "true",
                                          "fused_cross_entropy": "true"}, now=NOW), "/d", "/o", "/c.json"))
    assert (on["--unpadded_attention"], on["--sdpa_backend"], on["--fused_cross_entropy"], on["--float8"]) == (
        "true", "cudnn", "true", "true")
    off = _flags(R.argv(R.resolve("gpt2", {"accelerator": "cpu", "model_size": "tiny"}, now=NOW), "/d", "/o",
                        "/c.json"))
    assert not {"--unpadded_attention", "--sdpa_backend", "--fused_cross_entropy", "--float8"} & set(off)


def test_the_keys_are_user_keys():
    assert set(KEYS) <= set(R.override_keys())

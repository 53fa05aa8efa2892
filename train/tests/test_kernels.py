"""train/rank/kernels.py on CPU: attention without a mask gives the stock model's loss and gradients (GPT-2 causal,
BERT bidirectional, eager and under torch.compile) and SDPA gets no mask; the collator drops an all-ones mask and
refuses padding; the fused cross-entropy's wiring (shifted labels, num_items_in_batch, eval falls back to the stock
forward) against transformers' own loss, with a plain cross-entropy standing in for Liger's Triton kernel (which
needs a GPU; its loss on the GPU: docs/benchmarks/gpu-2026-12-05.md)."""

from __future__ import annotations

import sys
import types

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM  # noqa: E402

from train.rank import kernels  # noqa: E402

from .conftest import TINY_BERT, TINY_GPT2  # noqa: E402

VOCAB = 300


def _model(kind):
    torch.manual_seed(0)
    auto, over = (AutoModelForCausalLM, TINY_GPT2) if kind == "gpt2" else (AutoModelForMaskedLM, TINY_BERT)
    config = AutoConfig.for_model(kind, vocab_size=VOCAB, **over)
    config.attn_pdrop = config.resid_pdrop = config.embd_pdrop = 0.0  # gpt2: deterministic in train mode
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0  # bert
    return auto.from_config(config, attn_implementation="sdpa")


def _loss_and_grads(model, **inputs):
    model.zero_grad()
    loss = model(**inputs).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


class _SdpaSpy:
    """Records (attn_mask is None, is_causal) of each SDPA call made through transformers' sdpa function."""

    def __init__(self, monkeypatch):
        from transformers.integrations import sdpa_attention

        self.calls = []
        real = torch.nn.functional.scaled_dot_product_attention

        def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
            self.calls.append((attn_mask is None, bool(is_causal)))
            return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

        monkeypatch.setattr(sdpa_attention.torch.nn.functional, "scaled_dot_product_attention", spy)


@pytest.mark.parametrize("kind, causal", [("gpt2", True), ("bert", False)])
def test_unpadded_attention_is_the_same_function_without_a_mask(kind, causal, monkeypatch):
    model = _model(kind).train()
    ids = torch.randint(2, VOCAB, (3, 32))
    labels = ids.clone()
    if kind == "bert":
        labels[:, ::2] = -100
    ref_loss, ref_grads = _loss_and_grads(model, input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    kernels.use_unpadded_attention(model)
    assert model.config._attn_implementation == kernels.UNPADDED
    spy = _SdpaSpy(monkeypatch)
    loss, grads = _loss_and_grads(model, input_ids=ids, labels=labels)
    assert spy.calls and set(spy.calls) == {(True, causal)}  # no mask: flash/cuDNN kernels on a GPU
    assert torch.allclose(loss, ref_loss, rtol=1e-6, atol=1e-6)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        assert torch.allclose(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6), name
    # under torch.compile too (where transformers builds a 4-D mask for the stock sdpa: it cannot read the values)
    spy.calls.clear()
    compiled = torch.compile(model, backend="eager")
    assert torch.allclose(compiled(input_ids=ids, labels=labels).loss, ref_loss, rtol=1e-6, atol=1e-6)
    assert spy.calls and set(spy.calls) == {(True, causal)}
    kernels.restore_sdpa_name(model)
    assert model.config._attn_implementation == "sdpa"


def test_the_stock_sdpa_under_compile_gets_a_mask(monkeypatch):
    """Why the key exists: the stock path hands SDPA a materialised mask under torch.compile (transformers 5.24 with
    this torch) or a mask-testing host sync outside it; if this ever stops, unpadded_attention is moot."""
    model = _model("gpt2").train()
    ids = torch.randint(2, VOCAB, (2, 16))
    spy = _SdpaSpy(monkeypatch)
    torch.compile(model, backend="eager")(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids)
    assert spy.calls and not any(no_mask for no_mask, _ in spy.calls)


def test_unpadded_attention_needs_sdpa():
    torch.manual_seed(0)
    config = AutoConfig.for_model("gpt2", vocab_size=VOCAB, **TINY_GPT2)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    with pytest.raises(ValueError, match="sdpa"):
        kernels.use_unpadded_attention(model)


def test_the_collator_drops_an_all_ones_mask_and_refuses_padding():
    def base(examples):
        ids = torch.tensor([e["input_ids"] for e in examples])
        return {"input_ids": ids, "attention_mask": torch.tensor([e["mask"] for e in examples]), "labels": ids}

    collate = kernels.UnpaddedCollator(base)
    batch = collate([{"input_ids": [5, 6, 7], "mask": [1, 1, 1]}, {"input_ids": [8, 9, 10], "mask": [1, 1, 1]}])
    assert set(batch) == {"input_ids", "labels"}
    with pytest.raises(kernels.PaddedBatchError, match="1 padded"):
        collate([{"input_ids": [5, 6, 0], "mask": [1, 1, 0]}, {"input_ids": [8, 9, 10], "mask": [1, 1, 1]}])


def _reference_fused_loss(hidden, weight, bias, labels, num_items_in_batch):
    """What Liger's kernel computes, in plain torch: the shifted next-token cross-entropy over hidden @ weight.T."""
    logits = torch.nn.functional.linear(hidden, weight, bias).float()
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), shifted.reshape(-1),
                                             ignore_index=-100, reduction="sum" if num_items_in_batch else "mean")
    return loss / num_items_in_batch if num_items_in_batch else loss


def _liger_importable(monkeypatch):
    """use_fused_cross_entropy imports liger_kernel at build time; a CPU venv may lack it (its kernels are Triton)."""
    monkeypatch.setitem(sys.modules, "liger_kernel",
                        sys.modules.get("liger_kernel") or types.ModuleType("liger_kernel"))


@pytest.mark.parametrize("num_items", [None, 50])
def test_fused_cross_entropy_wiring_matches_the_stock_loss(num_items, monkeypatch):
    model = _model("gpt2").train()
    ids = torch.randint(2, VOCAB, (3, 32))
    labels = ids.clone()
    labels[0, :5] = -100
    extra = {"num_items_in_batch": torch.tensor(num_items)} if num_items else {}
    ref_loss, ref_grads = _loss_and_grads(model, input_ids=ids, labels=labels, **extra)
    seen = []

    def stand_in(hidden, weight, bias, labels_, n):
        seen.append((tuple(hidden.shape), weight is model.lm_head.weight, n))
        return _reference_fused_loss(hidden, weight, bias, labels_, n)

    monkeypatch.setattr(kernels, "_fused_loss_eager", stand_in)
    _liger_importable(monkeypatch)
    name = type(model).__name__
    kernels.use_fused_cross_entropy(model)
    assert type(model).__name__ == name  # saved as the stock class
    out = model(input_ids=ids, labels=labels, **extra)
    assert out.logits is None and seen == [((3, 32, TINY_GPT2["n_embd"]), True, extra.get("num_items_in_batch"))]
    loss, grads = _loss_and_grads(model, input_ids=ids, labels=labels, **extra)
    assert torch.allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for n in ref_grads:
        assert torch.allclose(grads[n], ref_grads[n], rtol=1e-4, atol=1e-6), n
    model.eval()  # evaluation and generation keep the stock forward (logits)
    with torch.no_grad():
        assert model(input_ids=ids, labels=labels).logits.shape == (3, 32, VOCAB)


def test_fused_cross_entropy_needs_a_linear_head(monkeypatch):
    _liger_importable(monkeypatch)
    model = _model("gpt2")
    model.lm_head = torch.nn.Identity()
    with pytest.raises(TypeError, match="linear LM head"):
        kernels.use_fused_cross_entropy(model)


# ---------------------------------------------------------------------------------------------------------- float8
def test_float8_converts_the_blocks_linear_layers_only():
    bert = _model("bert")
    names = kernels.float8_module_names(bert)
    per_layer = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                 "intermediate.dense", "output.dense")
    assert names == [f"bert.encoder.layer.{i}.{p}" for i in range(TINY_BERT["num_hidden_layers"]) for p in per_layer]
    assert not [n for n in names if n.startswith("cls.")]  # the MLM head (masked rows, logits) stays bf16
    assert kernels.float8_module_names(_model("gpt2")) == []  # Conv1D blocks
    odd = _model("bert")
    odd.bert.encoder.layer[0].intermediate.dense = torch.nn.Linear(TINY_BERT["hidden_size"], 100)
    assert "bert.encoder.layer.0.intermediate.dense" not in kernels.float8_module_names(odd)  # 100 % 16 != 0


def test_float8_training_on_cpu_follows_the_full_precision_loss():
    """torchao's float8 recipes (emulated by torch's CPU _scaled_mm): same parameter names (saved files load as the
    stock model), the loss and gradients close to the unconverted model's (float8 rounds: e4m3 keeps 3 mantissa
    bits, so ~6 % per element, much less after the sums), and a few optimizer steps lower the loss as they do."""
    pytest.importorskip("torchao")
    ids = torch.randint(2, VOCAB, (4, 32))
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, torch.full_like(ids, -100))

    def five_steps(model):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for _ in range(5):
            opt.zero_grad()
            out = model(input_ids=ids, labels=labels)
            out.loss.backward()
            opt.step()
            losses.append(float(out.loss.detach()))
        return losses

    ref = _model("bert").train()
    ref_loss, ref_grads = _loss_and_grads(ref, input_ids=ids, labels=labels)
    ref_losses = five_steps(ref)
    assert ref_losses[-1] < ref_losses[0] - 0.1
    for recipe in kernels.FLOAT8_RECIPES:
        model = _model("bert").train()
        keys = list(model.state_dict())
        assert kernels.use_float8(model, recipe) == 2 * 6
        converted = [n for n, m in model.named_modules() if type(m).__name__ == "Float8Linear"]
        assert converted == kernels.float8_module_names(_model("bert"))
        assert list(model.state_dict()) == keys
        loss, grads = _loss_and_grads(model, input_ids=ids, labels=labels)
        assert loss != ref_loss  # it did run in float8
        assert abs(loss - ref_loss) < 0.01 * ref_loss, recipe
        for n in ("bert.encoder.layer.0.intermediate.dense.weight", "bert.embeddings.word_embeddings.weight"):
            cos = torch.nn.functional.cosine_similarity(grads[n].flatten(), ref_grads[n].flatten(), dim=0)
            assert cos > 0.98, (recipe, n, float(cos))
        losses = five_steps(model)
        assert abs(losses[-1] - ref_losses[-1]) < 0.02 * ref_losses[-1], (recipe, losses, ref_losses)


def test_float8_refuses_what_it_cannot_run(monkeypatch):
    with pytest.raises(ValueError, match="unknown float8 recipe"):
        kernels.use_float8(_model("bert"), "fast")
    # a GPU before Ada/Hopper, also when the model is still on the CPU (loaded from a directory): the rank's device
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(ValueError, match=r"compute capability 8.9 or more.*A100-SXM4-80GB is 8.0: set -e float8=none"):
        kernels.use_float8(_model("bert"), "tensorwise", torch.device("cuda", 0))
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "torchao", None)  # as if not installed: importing it raises ImportError
        m.setitem(sys.modules, "torchao.float8", None)
        with pytest.raises(ImportError, match="float8 needs torchao in the node venv.*site.yml"):
            kernels.use_float8(_model("bert"), "tensorwise")
    pytest.importorskip("torchao")
    with pytest.raises(ValueError, match="Conv1D"):
        kernels.use_float8(_model("gpt2"), "tensorwise")

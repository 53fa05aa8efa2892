"""train/rank/mlm_head.py: the LM head at masked positions gives the stock loss, and the model saves and loads as stock."""

from __future__ import annotations

import pytest

# the torch tier (pytest.ini): the node venv's torch stack; skipped where it is not installed (make unit-fast)
pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
from transformers import (AutoModelForMaskedLM, BertConfig, BertForMaskedLM, DataCollatorForLanguageModeling,
                          RobertaConfig, RobertaForMaskedLM)

from train.rank import mlm_head

from .conftest import TINY_BERT


class _Tok:
    """The few tokenizer attributes DataCollatorForLanguageModeling reads, for ids 0..vocab-1 (0 pad, 1 mask)."""

    def __init__(self, vocab):
        self.vocab = vocab
        self.mask_token, self.mask_token_id, self.pad_token, self.pad_token_id = "[MASK]", 1, "[PAD]", 0
        self._pad_token = "[PAD]"

    def __len__(self):
        return self.vocab

    def convert_tokens_to_ids(self, token):
        return 1

    def get_special_tokens_mask(self, ids, already_has_special_tokens=True):
        return [1 if i < 2 else 0 for i in ids]

    def pad(self, examples, return_tensors="pt", **kwargs):
        return {"input_ids": torch.tensor([e["input_ids"] for e in examples])}


def _models(kind, vocab=500):
    torch.manual_seed(0)
    if kind == "bert":
        model = BertForMaskedLM(BertConfig(vocab_size=vocab, **TINY_BERT))
    else:
        model = RobertaForMaskedLM(RobertaConfig(vocab_size=vocab, hidden_size=64, num_hidden_layers=2,
                                                 num_attention_heads=2, intermediate_size=128,
                                                 max_position_embeddings=80, pad_token_id=0))
    model.eval()  # no dropout: both forwards see the same network
    return model


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_same_loss_as_the_full_head_fp32(kind):
    vocab = 500
    model = _models(kind, vocab)
    torch.manual_seed(1)
    examples = [{"input_ids": torch.randint(2, vocab, (48,)).tolist()} for _ in range(6)]
    base = DataCollatorForLanguageModeling(_Tok(vocab), mlm=True, mlm_probability=0.15, return_tensors="pt")
    torch.manual_seed(2)
    batch = mlm_head.MaskedPositionsCollator(base, 0.15)(examples)
    masked = int((batch["labels"] != -100).sum())
    assert batch["masked_index"].shape == batch["masked_targets"].shape
    assert batch["masked_index"].numel() % mlm_head.MULTIPLE == 0 and batch["masked_index"].numel() >= masked
    assert int((batch["masked_targets"] != -100).sum()) == masked
    with torch.no_grad():
        full = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        mlm_head.use_masked_positions_head(model)
        assert type(model).__name__ == type(model).__mro__[2].__name__  # same class name as the stock one
        fast = model(**batch)
        stock_path = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss  # no index: the stock forward
    assert fast.logits.shape == (batch["masked_index"].numel(), vocab)
    assert abs(float(fast.loss) - float(full)) < 1e-6, (float(fast.loss), float(full))
    assert abs(float(stock_path) - float(full)) < 1e-6


def test_gradients_match_and_round_trip(tmp_path):
    vocab = 300
    model = _models("bert", vocab)
    reference = _models("bert", vocab)
    torch.manual_seed(3)
    examples = [{"input_ids": torch.randint(2, vocab, (32,)).tolist()} for _ in range(4)]
    base = DataCollatorForLanguageModeling(_Tok(vocab), mlm=True, mlm_probability=0.15, return_tensors="pt")
    batch = mlm_head.MaskedPositionsCollator(base, 0.15)(examples)
    reference(input_ids=batch["input_ids"], labels=batch["labels"]).loss.backward()
    mlm_head.use_masked_positions_head(model)
    model(**batch).loss.backward()
    for (name, a), (_, b) in zip(reference.named_parameters(), model.named_parameters()):  # noqa: B905
        assert torch.allclose(a.grad, b.grad, atol=1e-6, rtol=1e-5), name
    model.save_pretrained(tmp_path / "m")
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "m")
    assert type(loaded) is BertForMaskedLM
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):  # noqa: B905
        assert torch.equal(a, b), name


def test_padded_count_depends_on_the_shape_only():
    sizes = {mlm_head.padded_count(m, 128 * 512, 0.15) for m in range(9500, 10200, 7)}
    assert len(sizes) == 1 and sizes.pop() % mlm_head.MULTIPLE == 0
    assert mlm_head.padded_count(100, 100, 0.15) >= 100

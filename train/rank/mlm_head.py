"""The masked-LM prediction head computed only at the masked positions (job key ``mlm_head: masked``).

A BERT/RoBERTa masked LM spends a large share of a step in its prediction head: (tokens x hidden) @ (hidden x
vocab) for every token, although the loss only reads the ~15 % that were masked (labels != -100). Here the
collator lists the masked positions on the CPU (no GPU sync), the model runs its encoder as usual, gathers the
hidden states of those positions and runs the head and the cross-entropy on them alone. The loss is the same
(the mean over the masked tokens, as the stock ``CrossEntropyLoss()`` over all tokens with ignore_index -100); the
parameters, their names and the saved files are the stock model's, so ``AutoModelForMaskedLM.from_pretrained``
loads what it saves. It is faster than the full head (docs/benchmarks/h200-early-findings.md).

    collator = MaskedPositionsCollator(DataCollatorForLanguageModeling(tokenizer, mlm=True))
    use_masked_positions_head(model)          # in place: the forward reads masked_index / masked_targets
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from train.rank.patches import mix_in

IGNORE = -100
#: the padded count of masked positions is a multiple of this (GEMM-friendly; odd counts were the first suspect
#: of a `misaligned address` in a compiled LM-head GEMM, docs/benchmarks/h200-early-findings.md)
MULTIPLE = 64
#: ... and at least mean + SIGMAS standard deviations of the binomial count, so that every batch of one shape gets
#: the same padded size (one torch.compile graph, no recompiles for a changing count)
SIGMAS = 8.0


def padded_count(masked: int, tokens: int, probability: float) -> int:
    """How many rows the head computes for a batch with ``masked`` masked positions out of ``tokens``.

    Args:
        masked: masked positions in the batch (labels != -100).
        tokens: micro batch x sequence length.
        probability: the masking rate (mlm_probability).

    Returns:
        ceil(max(masked, tokens x p + SIGMAS x sqrt(tokens x p x (1 - p))) / MULTIPLE) x MULTIPLE: a size that only
        depends on the batch shape unless a batch has far more masked tokens than the binomial allows.
    """
    bound = tokens * probability + SIGMAS * math.sqrt(tokens * probability * (1.0 - probability))
    return max(MULTIPLE, int(math.ceil(max(masked, bound) / MULTIPLE)) * MULTIPLE)


class MaskedPositionsCollator:
    """Wraps a masked-LM collator: adds ``masked_index`` and ``masked_targets`` to each batch.

    ``masked_index`` (int64, shape (M,)) indexes the flattened (micro batch x seq) positions whose label is not
    -100, padded with index 0 up to :func:`padded_count`; ``masked_targets`` (int64, (M,)) holds their labels, -100
    for the padding rows (ignored by the loss). ``labels`` stays in the batch (the Trainer counts tokens from it).
    Built on the CPU, in the dataloader workers.
    """

    def __init__(self, base, probability: float = 0.15):
        self.base = base
        self.probability = float(probability)

    def __call__(self, examples):
        batch = self.base(examples)
        flat = batch["labels"].reshape(-1)
        index = torch.nonzero(flat != IGNORE, as_tuple=False).squeeze(1)
        size = padded_count(index.numel(), flat.numel(), self.probability)
        targets = torch.full((size,), IGNORE, dtype=torch.long)
        targets[: index.numel()] = flat[index]
        padded = torch.zeros(size, dtype=torch.long)
        padded[: index.numel()] = index
        batch["masked_index"] = padded
        batch["masked_targets"] = targets
        return batch


def _head(model):
    """The prediction head module of a BERT-like (``cls``) or RoBERTa-like (``lm_head``) masked LM."""
    for name in ("cls", "lm_head"):
        head = getattr(model, name, None)
        if isinstance(head, torch.nn.Module):
            return head
    raise TypeError(f"{type(model).__name__} has no `cls` or `lm_head` prediction head; use mlm_head full")


class _MaskedPositionsForward:
    """Mixin put in front of the model's class by :func:`use_masked_positions_head`."""

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, labels=None,
                masked_index=None, masked_targets=None, **kwargs):
        """With ``masked_index`` / ``masked_targets`` (from MaskedPositionsCollator): the encoder on every token,
        the head on the M listed positions only; returns MaskedLMOutput(loss = mean cross-entropy over the
        non-ignored targets, logits of shape (M, vocab)). Without them: the stock forward (full head)."""
        if masked_index is None:
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                   position_ids=position_ids, labels=labels, **kwargs)
        from transformers.modeling_outputs import MaskedLMOutput

        kwargs.pop("num_items_in_batch", None)  # the stock BERT/RoBERTa loss is a mean too
        kwargs.pop("return_dict", None)
        encoder = getattr(self, self.base_model_prefix)
        hidden = encoder(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                         position_ids=position_ids, return_dict=True, **kwargs)[0]        # (B, S, H)
        rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, masked_index)         # (M, H)
        logits = _head(self)(rows)                                                         # (M, V)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), masked_targets.view(-1), ignore_index=IGNORE)
        return MaskedLMOutput(loss=loss, logits=logits)


def use_masked_positions_head(model):
    """Make ``model`` (a BertForMaskedLM, RobertaForMaskedLM or another masked LM with ``cls`` / ``lm_head``) use
    the head at masked positions when a batch carries ``masked_index``. In place; returns the model.

    The model's class is replaced by a subclass of the same name (so ``save_pretrained`` writes the stock
    ``architectures`` and the stock weights); nothing else changes.

    Raises:
        TypeError: the model has no recognisable prediction head.
    """
    _head(model)
    return mix_in(model, _MaskedPositionsForward)

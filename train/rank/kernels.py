"""Which kernels a rank's model runs: attention without a mask for unpadded batches, the LM head's matmul fused
with its cross-entropy (Liger Kernel), and float8 matmuls (torchao). Each is a job key that the controller resolves
(train/controller/resolve.py) and pretrain passes as a flag; none changes what the model computes beyond rounding.
Importing this module changes nothing (torch is imported by the rank already; Liger and torchao only when asked for).

* :func:`use_unpadded_attention` with :class:`UnpaddedCollator` (job key ``unpadded_attention``): pretrain's blocks
  are all full (prepare_data cuts the corpus into blocks of max_seq_length), so their attention mask is all ones.
  transformers still builds a 4-D mask from it under torch.compile (it cannot read the mask's values there:
  masking_utils' ``_ignore_causal_mask_sdpa``, and with no mask it builds one for packed-sequence detection from the
  position ids), and SDPA with an explicit mask computes every block of the score matrix, the upper triangle of a
  causal mask too (on Hopper torch runs cuDNN's attention either way: its backward took 281 ms a GPT-2 small step
  with the mask on an H200, 126 ms without it on an H100); outside torch.compile it tests ``mask.all()``, a host sync per micro batch. GPT-2 small trained
  17 % faster without the mask, the same loss (docs/benchmarks/gpu-2026-12-05.md). Here the model's attention is transformers' own SDPA function registered under another name
  (:data:`UNPADDED`) for which no mask function exists, so the model makes no mask at all (masking_utils'
  "custom attention without equivalent mask creation") and SDPA runs with ``is_causal`` (causal LM) or no mask
  (masked LM). The collator drops the all-ones mask on the CPU and refuses a batch with padding.
* :func:`use_fused_cross_entropy` (job key ``fused_cross_entropy``): a causal LM's loss computed by Liger Kernel's
  fused linear cross-entropy from the last hidden states and the LM head's weight, chunk by chunk, without the
  (tokens x vocabulary) logits in fp32 that transformers' ``ForCausalLMLoss`` materialises: a third less peak GPU
  memory for GPT-2 small, but slower than the compiled stock loss (docs/benchmarks/gpu-2026-12-05.md), so opt-in.
* :func:`use_float8` (job key ``float8``): the ``nn.Linear`` layers of the model's repeated blocks run their matmuls
  in float8 through torchao's float8 training (``convert_to_float8_training``): the operands are scaled to float8 by
  the recipe's scales (one per tensor, or per row) and ``torch._scaled_mm`` multiplies them (the recipe
  ``rowwise_with_gw_hp`` keeps the weight gradient's matmul in high precision); the weights and the optimizer stay in
  their precision. It rounds more than bf16, and it was slower for BERT-base (docs/benchmarks/gpu-2026-12-06b.md),
  so opt-in.
"""

from __future__ import annotations

import torch

from train.common.job import CHOICES
from train.rank.patches import mix_in

#: the attention implementation name under which transformers' SDPA function runs without a mask
UNPADDED = "sdpa_unpadded"


class PaddedBatchError(ValueError):
    """A batch with padding reached a model whose attention runs without a mask."""


def register_unpadded_attention() -> str:
    """Register transformers' SDPA attention function as :data:`UNPADDED` (idempotent) and return the name.

    transformers' mask creation (masking_utils ``_preprocess_mask_arguments``) returns no mask for an attention
    implementation that has no entry in ``ALL_MASK_ATTENTION_FUNCTIONS``; the SDPA function then runs with
    ``is_causal=module.is_causal`` and no ``attn_mask``."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register(UNPADDED, sdpa_attention_forward)
    return UNPADDED


def use_unpadded_attention(model):
    """Make ``model`` (a transformers model whose ``config._attn_implementation`` is ``sdpa``) run its attention
    through :data:`UNPADDED`: the same SDPA call with no mask. In place; returns the model.

    Only for batches without padding (:class:`UnpaddedCollator` checks each one). transformers writes no attention
    implementation into a saved config.json, so checkpoints and the saved model load as ``sdpa``;
    :func:`restore_sdpa_name` puts the stock name back on the model in memory after training.

    Raises:
        ValueError: the model's attention implementation is not sdpa.
    """
    current = getattr(model.config, "_attn_implementation", None)
    if current == UNPADDED:
        return model
    if current != "sdpa":
        raise ValueError(f"unpadded attention needs the sdpa attention implementation, not {current!r}")
    model.set_attn_implementation(register_unpadded_attention())
    return model


def restore_sdpa_name(model) -> None:
    """Put ``sdpa`` back as the attention implementation of ``model`` (after training: what runs next, e.g. a
    generation with padded prompts, needs the mask again)."""
    if getattr(model.config, "_attn_implementation", None) == UNPADDED:
        model.set_attn_implementation("sdpa")


class UnpaddedCollator:
    """Wraps a collator: drops the ``attention_mask`` of each batch after checking on the CPU that it is all ones.

    Raises:
        PaddedBatchError: a batch has a padded position (mask 0): the model's attention would attend to it.
    """

    def __init__(self, base):
        self.base = base

    def __call__(self, examples):
        batch = self.base(examples)
        mask = batch.pop("attention_mask", None)
        if mask is not None and not bool(mask.all()):
            raise PaddedBatchError(
                f"a batch has {int((mask == 0).sum())} padded positions; attention without a mask needs full "
                "blocks (set unpadded_attention false for padded data)")
        return batch


# ---------------------------------------------------------------------------------------------- fused cross-entropy
def _fused_loss(hidden, weight, bias, labels, num_items_in_batch):
    """Liger's fused linear cross-entropy of a causal LM: mean (or sum / num_items_in_batch) over the shifted
    labels that are not -100. hidden (B, S, H), weight (V, H), bias (V,) or None, labels (B, S) -> scalar."""
    from liger_kernel.transformers.model.loss_utils import LigerForCausalLMLoss

    return LigerForCausalLMLoss(hidden_states=hidden, lm_head_weight=weight, labels=labels,
                                hidden_size=hidden.shape[-1], num_items_in_batch=num_items_in_batch, bias=bias)


class _FusedCrossEntropyForward:
    """Mixin put in front of a causal LM's class by :func:`use_fused_cross_entropy`."""

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        """Training with labels (grad enabled, ``self.training``): the base model's last hidden states (B, S, H) and
        the LM head's weight go to Liger's fused linear cross-entropy; returns CausalLMOutput(loss, logits=None).
        Otherwise the stock forward."""
        if labels is None or not self.training or not torch.is_grad_enabled():
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)
        from transformers.modeling_outputs import CausalLMOutput

        num_items = kwargs.pop("num_items_in_batch", None)
        kwargs.pop("return_dict", None)
        base = getattr(self, self.base_model_prefix)
        hidden = base(input_ids, attention_mask=attention_mask, return_dict=True, **kwargs)[0]   # (B, S, H)
        head = self.get_output_embeddings()
        loss = _fused_loss_eager(hidden, head.weight, head.bias, labels, num_items)
        return CausalLMOutput(loss=loss, logits=None)


# Liger's kernels run eagerly, as one graph break at the end of a compiled model (dynamo would otherwise trace into
# their Python chunk loop)
_fused_loss_eager = torch.compiler.disable(_fused_loss)


def use_fused_cross_entropy(model):
    """Make a causal LM (``model.get_output_embeddings()`` an ``nn.Linear``; its base model under
    ``base_model_prefix``) compute its training loss with Liger's fused linear cross-entropy (same loss as
    transformers' ForCausalLMLoss, ``num_items_in_batch`` honoured). In place, as mlm_head does: the class is
    replaced by a subclass of the same name, parameters and saved files unchanged; returns the model.

    Raises:
        TypeError: no linear output embedding or no base model.
        ImportError: liger_kernel is not installed.
    """
    import liger_kernel  # noqa: F401  (fail here, at build time, not at the first step)

    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear) or not isinstance(getattr(model, model.base_model_prefix, None),
                                                               torch.nn.Module):
        raise TypeError(f"{type(model).__name__} has no linear LM head over a base model; "
                        "set fused_cross_entropy false")
    return mix_in(model, _FusedCrossEntropyForward)


# ---------------------------------------------------------------------------------------------------------- float8
#: torchao's float8 recipes (``Float8LinearConfig.from_recipe_name``) that the job key ``float8`` can name
FLOAT8_RECIPES = tuple(c for c in CHOICES["float8"] if c != "none")


def float8_module_names(model) -> list[str]:
    """The fully qualified names of the ``nn.Linear`` modules :func:`use_float8` converts: those inside a repeated
    block (a path with a numeric part, an element of a ``ModuleList``: ``bert.encoder.layer.3.output.dense``,
    ``model.layers.0.mlp.up_proj``) whose in and out features are multiples of 16 (``torch._scaled_mm``'s tile).
    The heads, the embeddings and the pooler stay as they are: BERT's masked head runs on a varying number of rows,
    and an LM head's logits are where float8's rounding would cost most. GPT-2's blocks use transformers' Conv1D, not
    ``nn.Linear``: none of its modules qualify. Sorted as ``model.named_modules()`` gives them."""
    names = []
    for name, module in model.named_modules():
        if type(module) is not torch.nn.Linear:
            continue
        if not any(part.isdigit() for part in name.split(".")):
            continue
        if module.in_features % 16 or module.out_features % 16:
            continue
        names.append(name)
    return names


def use_float8(model, recipe: str, device=None):
    """Convert ``model``'s :func:`float8_module_names` in place to torchao's ``Float8Linear`` with the float8
    training recipe ``recipe`` (one of :data:`FLOAT8_RECIPES`; torchao's ``Float8LinearConfig.from_recipe_name``),
    for training on ``device`` (a ``torch.device``; None: the device of the model's parameters -- a model loaded
    from a directory is still on the CPU here, so the rank passes its own).
    Parameters, their names and saved files are unchanged (``Float8Linear`` subclasses ``nn.Linear`` and keeps
    its weight in the parameter's dtype); returns the number of modules converted.

    Run it before torch.compile: the casts to float8 are fused into the neighbouring kernels only when compiled.

    Raises:
        ValueError: an unknown recipe, a model with no module to convert, or one on a GPU older than compute
            capability 8.9 (``torch._scaled_mm`` has no float8 kernel there).
        ImportError: torchao is not installed (the message says how to install it).
    """
    if recipe not in FLOAT8_RECIPES:
        raise ValueError(f"unknown float8 recipe {recipe!r}; choose one of {', '.join(FLOAT8_RECIPES)}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        major, minor = torch.cuda.get_device_capability(device)
        raise ValueError(f"float8 matmuls need a GPU of compute capability 8.9 or more (Ada, Hopper, Blackwell); "
                         f"{torch.cuda.get_device_name(device)} is {major}.{minor}: set -e float8=none")
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as e:
        raise ImportError(f"float8 needs torchao in the node venv ({e}); add torchao==0.18.0 to "
                          "python_env_packages_extra in the inventory and run site.yml, or set -e float8=none") from None

    names = set(float8_module_names(model))
    if not names:
        raise ValueError(f"{type(model).__name__} has no nn.Linear layer in a repeated block whose sizes are "
                         "multiples of 16 to run in float8 (GPT-2's blocks are Conv1D); set -e float8=none")
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=lambda module, fqn: fqn in names)
    return len(names)

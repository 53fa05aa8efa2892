"""Every job key, declared once: its type, allowed values, default or ``auto`` policy, where it goes, one line of
help (standard library only). The rest is derived from :data:`KEYS`:

- the schema, choices and ranges that train.common.job validates a job with (and the coercion of ``-e`` strings);
- the defaults and the ``auto`` keys of train.controller.resolve, and the keys that apply to a user's script;
- the rank's command line (train.controller.resolve.argv) and the fields of train.rank.pretrain's ModelArguments;
- the key table of docs/training.md (``python -m train.common.keys table --write docs/training.md``; a fast test
  checks that the page holds the generated table).

Adding a key is one :class:`Key` here plus its behaviour (the code that reads ``job[name]`` or the rank's argument).

    python -m train.common.keys table                         # print the table (Markdown)
    python -m train.common.keys table --write docs/training.md   # replace the table between its markers
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

#: no value (Key.resumed_without, Key.script_default)
UNSET = "unset"

#: the default of a key the preset must give (its numbers live in the presets, train/presets/<model>.yml)
PRESET = "preset"

#: Where a key's value goes (Key.goes): the rank's TrainingArguments (HF Trainer), the rank's ModelArguments or
#: DataArguments (train.rank.pretrain), the data artifact (train.data.prepare_data, part of data_key), the DeepSpeed
#: config (train.controller.dsconfig), the controller's plan (train.controller.plan, memory, launch).
GOES = {
    "trainer": "TrainingArguments",
    "model": "pretrain's ModelArguments",
    "data": "the prepared data",
    "rank_data": "pretrain's DataArguments",
    "ds_config": "ds_config.json",
    "plan": "the plan",
}


@dataclass(frozen=True)
class Key:
    """One job key.

    Attributes:
        name: the key (``-e name=value``, the job file's field).
        kind: int, float, bool, str or dict: the type of a resolved value (``-e`` strings are coerced to it).
        help: one line for docs/training.md's table and the rank's ``--help``.
        goes: where the value is used, names of GOES (the first is the main one).
        default: the value when the preset leaves the key out; ``"auto"`` for the auto policy; PRESET when every
            preset must give it; None for nullable keys left unset.
        nullable: whether null (None; ``-e key=null``) is a value.
        choices: the allowed values of a str key (``"auto"`` not among them).
        low, high: the allowed range of a number (None: unbounded); ``low_open``/``high_open`` exclude the bound.
        auto: the ``auto`` policy in one line ("" when the key takes no ``auto``); train.controller.resolve applies it.
        fixed: set by the preset only (task, model_type, tokenizer_type): it defines what the preset is.
        script: applies to a user's script too (recorded in a script run's job.json).
        flag: the rank's argument (``--flag value``) where it differs from ``--name``; None for a key the rank does
            not get as its own argument (goes has no trainer/model/rank_data).
        off: the value the rank runs with when the flag is absent: a value equal to it is not passed.
        argv: the rank's arguments for the job when they are not simply ``--flag value``: (job) -> list of str.
        fix: how to fix an out-of-range value (the message's last part), when the generic one says too little.
        resume: ``-e`` may change it when a run is resumed (how long it goes on, how it logs, saves and restarts);
            any other key differing from the run's job.json is refused (another model, data or batch is another run).
        resumed_without: the value a resumed run whose job.json lacks the key keeps -- what the code ran before the
            key was added (its checkpoint's shapes and partitioning), not today's ``auto``; UNSET: the preset's.
        script_default: the value a user's script starts from (script mode) unless ``-e`` gives one: what the CPU and
            GPU paths ran before the presets' GPU defaults; UNSET: the preset's.
    """

    name: str
    kind: str
    help: str
    goes: tuple[str, ...]
    default: object = PRESET
    nullable: bool = False
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    auto: str = ""
    fixed: bool = False
    script: bool = False
    flag: str | None = ""
    off: object = None
    argv: Callable[[dict], list] | None = None
    fix: str = ""
    resume: bool = False
    resumed_without: object = UNSET
    script_default: object = UNSET

    def rank_flag(self) -> str | None:
        """The rank's argument name without ``--`` (e.g. ``attn_implementation`` for attention), or None."""
        if self.flag is None or not {"trainer", "model", "rank_data"} & set(self.goes):
            return None
        return self.flag or self.name

    def range_text(self) -> str:
        """The allowed range as an interval, e.g. ``[1, inf)``, ``(0, 1]``; "" for an unbounded or non-number key."""
        if self.low is None and self.high is None:
            return ""
        low = "-inf" if self.low is None else _number(self.low)
        high = "inf" if self.high is None else _number(self.high)
        return (f"{'(' if self.low_open or self.low is None else '['}{low}, {high}"
                f"{')' if self.high_open or self.high is None else ']'}")

    def out_of_range(self, value) -> str | None:
        """Why a number ``value`` is outside the range (the message's first part), or None when it is inside."""
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        low_bad = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        high_bad = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if not (low_bad or high_bad):
            return None
        if self.high is None:
            return f"{self.name} must be {'>' if self.low_open else '>='} {_number(self.low)}, got {value}"
        if self.kind == "int" and self.low is not None and self.high - self.low <= 5:
            values = [str(v) for v in range(int(self.low), int(self.high) + 1)]
            return f"{self.name} must be {', '.join(values[:-1])} or {values[-1]}, got {value}"
        return f"{self.name} must be in {self.range_text()}, got {value}"


def _number(value) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _num(value) -> str:
    """A number as the rank's argument: repr for floats (2e-4 -> '0.0002'), str otherwise."""
    return repr(value) if isinstance(value, float) else str(value)


# ------------------------------------------------------------------------------------ the rank's special arguments
def _model_config_argv(job):
    config = dict(job["model_config"])
    config["vocab_size"] = job["vocab_size"]
    import json

    return ["--config_overrides", json.dumps(config, separators=(",", ":"))]


def _precision_argv(job):
    # with autocast DeepSpeed's torch_autocast block casts instead of the Trainer's --bf16
    return [f"--{job['precision']}", "true"] if job["precision"] in ("bf16", "fp16") and not job["autocast"] else []


def _optimizer_argv(job):
    # deepspeed: ds_config's optimizer block; otherwise the Trainer builds this one (no optimizer block)
    return ["--optim", job["optimizer"]] if job["optimizer"] != "deepspeed" else []


def _torch_compile_argv(job):
    # one batch shape: one compile
    return ["--torch_compile", "true", "--dataloader_drop_last", "true"] if job["torch_compile"] else []


def _regional_argv(job):
    return ["--regional_compilation", "true"] if job["torch_compile"] and job["regional_compilation"] else []


def _checkpointing_argv(job):
    # non-reentrant checkpointing: works under torch.compile and with inputs that need no grad
    return (["--gradient_checkpointing", "true", "--gradient_checkpointing_kwargs", '{"use_reentrant":false}']
            if job["gradient_checkpointing"] else [])


def _accelerator_argv(job):
    # the NaN/inf filter of the logged loss tests every micro batch's loss on the host: a GPU sync each time
    return ["--logging_nan_inf_filter", "false"] if job["accelerator"] == "cuda" else []


def _workers_argv(job):
    workers = job["dataloader_num_workers"]
    return ["--dataloader_num_workers", str(workers)] + (["--dataloader_persistent_workers", "true"] if workers > 0
                                                         else [])


def _mlm_only(flag):
    return lambda job: [f"--{flag}", _num(job[flag])] if job["task"] == "mlm" else []


_AUTO_MEMORY = "cuda with the GPU memory known: the memory plan's (train/controller/memory.py)"

#: Every job key, in the job file's order.
KEYS: tuple[Key, ...] = (
    # ---- fixed by the preset: what the preset is
    Key("task", "str", "mlm (masked LM) or clm (causal LM)", ("model", "data"), choices=("mlm", "clm"), fixed=True,
        off="mlm", argv=lambda job: ["--task", job["task"]]),
    Key("model_type", "str", "transformers CONFIG_MAPPING key (bert, roberta, gpt2, llama)", ("model", "data"),
        fixed=True, argv=lambda job: ["--model_type", job["model_type"]]),
    Key("tokenizer_type", "str", "the tokenizer prepare_data trains when tokenizer_path is null", ("data",),
        choices=("wordpiece", "byte_bpe"), fixed=True),
    # ---- the model and its data
    Key("model_size", "str", "a size of the preset (its `sizes:` block): base, tiny, ...", ("plan",), default="base"),
    Key("model_config", "dict", "model config fields (transformers' names for model_type), merged key by key into "
        "the preset's", ("model",), argv=_model_config_argv),
    Key("vocab_size", "int", "tokenizer vocabulary asked of prepare_data (also the model's vocab_size)",
        ("data", "model"), low=512, flag=None),
    Key("pad_vocab_to_multiple_of", "int", "the model's vocabulary rounded up to a multiple of this (rows no token "
        "uses); 1: none", ("model",), default="auto", low=1, auto="128 on cuda, 1 on cpu", off=1,
        fix="set pad_vocab_to_multiple_of to 1 (no padding), 128, or auto", resumed_without=1),
    Key("lowercase", "bool", "lower-case text before tokenizing", ("data",)),
    Key("tokenizer_path", "str", "a ready tokenizer directory on the head; null: train one on the corpus", ("data",),
        default=None, nullable=True),
    Key("model_name_or_path", "str", "start from this local model directory; null: random weights", ("model",),
        default=None, nullable=True),
    Key("dataset_path", "str", "the corpus on the head (text, .txt dir, parquet/jsonl/csv, save_to_disk dir, "
        "hub:REPO[:CONFIG[:SPLIT]]); null: the stdlib's docs", ("data",), default=None, nullable=True),
    Key("text_column", "str", "the column holding the text (tables, saved data sets, hub)", ("data",),
        default="text"),
    Key("max_seq_length", "int", "tokens per sample (at most the model's positions)", ("data",), low=8),
    Key("mlm_probability", "float", "share of tokens masked (mlm; null for clm)", ("rank_data",), nullable=True,
        low=0, high=1, low_open=True, high_open=True, argv=_mlm_only("mlm_probability"),
        fix="set mlm_probability to e.g. 0.15"),
    # ---- batch, optimizer, schedule, checkpoints
    Key("per_device_train_batch_size", "int", "micro batch per rank", ("trainer", "ds_config"), low=1,
        auto=f"{_AUTO_MEMORY}; else cuda: the largest power of two of <= 65,536 tokens, cpu: 16 (dividing the "
        "global batch per rank)", script=True),
    Key("gradient_accumulation_steps", "int", "micro batches per optimizer step", ("trainer", "ds_config"), low=1,
        auto="train_batch_size / (micro batch x world size), 1 without a global batch", script=True),
    Key("train_batch_size", "int", "global batch (sequences): micro batch x accumulation x world size; null: none",
        ("ds_config",), default=None, nullable=True, low=1, script=True,
        fix="set train_batch_size to a positive number or null", script_default=None),
    Key("learning_rate", "float", "peak learning rate", ("trainer",), low=0, low_open=True, script=True),
    Key("weight_decay", "float", "AdamW weight decay", ("trainer",), low=0, script=True),
    Key("adam_beta1", "float", "AdamW beta1", ("trainer",), low=0, high=1, high_open=True, script=True,
        fix="set adam_beta1 to e.g. 0.9"),
    Key("adam_beta2", "float", "AdamW beta2", ("trainer",), low=0, high=1, high_open=True, script=True,
        fix="set adam_beta2 to e.g. 0.999"),
    Key("adam_epsilon", "float", "AdamW epsilon", ("trainer",), low=0, low_open=True, script=True),
    Key("max_grad_norm", "float", "gradient clipping norm (0: none)", ("trainer", "ds_config"), low=0, script=True),
    Key("warmup_steps", "int", "linear warm-up steps (at most max_steps); 0: none", ("trainer",), low=0,
        script=True, fix="set warmup_steps to 0 (no warm-up) or more"),
    Key("max_steps", "int", "optimizer steps", ("trainer",), low=1, script=True,
        fix="set max_steps to a positive number of optimizer steps", resume=True),
    Key("save_steps", "int", "a checkpoint every this many steps", ("trainer",), low=1, resume=True),
    Key("logging_steps", "int", "a progress line every this many steps", ("trainer",), low=1, resume=True),
    Key("save_total_limit", "int", "checkpoints kept on each node; null: every one", ("trainer",), nullable=True,
        low=1, fix="set save_total_limit to 1 or more, or null to keep every checkpoint", resume=True),
    Key("seed", "int", "random seed", ("trainer",), low=0, script=True),
    Key("dataloader_num_workers", "int", "data loader worker processes per rank", ("trainer",), low=0,
        argv=_workers_argv, resume=True),
    # ---- precision, ZeRO, kernels
    Key("precision", "str", "fp16 and bf16 need cuda", ("trainer", "ds_config"), default="auto",
        choices=("fp32", "fp16", "bf16"), auto="bf16 on cuda, fp32 on cpu", script=True, argv=_precision_argv),
    Key("accelerator", "str", "the inventory's accelerator (the playbook passes it)", ("plan", "ds_config"),
        choices=("cpu", "cuda"), script=True, argv=_accelerator_argv),
    Key("zero_stage", "int", "DeepSpeed ZeRO stage: templates/deepspeed/zero<N>.json", ("ds_config",), low=0, high=3,
        auto=f"{_AUTO_MEMORY}; else 2 on cpu or with an offload, 0 on cuda", script=True,
        fix="pick a stage that has a templates/deepspeed/zero<N>.json", script_default=2),
    Key("offload_optimizer", "str", "ZeRO optimizer offload (needs zero_stage >= 1)", ("ds_config",), default="auto",
        choices=("none", "cpu"), auto=f"{_AUTO_MEMORY} (cpu only when nothing else fits); else none", script=True),
    Key("offload_ratio", "float", "share of the optimizer states offloaded (< 1: ZeRO-3 with offload cpu)",
        ("ds_config",), default="auto", low=0, high=1, low_open=True, auto=f"{_AUTO_MEMORY}; else 1", script=True,
        fix="set -e offload_ratio=auto, 1 (all of them) or a share such as 0.5", resumed_without=1.0),
    Key("optimizer", "str", "adamw_torch_fused / adamw_torch: the Trainer's optimizer; deepspeed: DeepSpeed's AdamW "
        "(FusedAdam, DeepSpeedCPUAdam with offload)", ("trainer", "ds_config"), default="auto",
        choices=("adamw_torch_fused", "adamw_torch", "deepspeed"),
        auto="adamw_torch_fused on cuda without offload, else deepspeed", script=True, argv=_optimizer_argv, script_default="deepspeed"),
    Key("autocast", "bool", "DeepSpeed's torch_autocast (bf16) instead of its bf16 block", ("ds_config", "trainer"),
        default="auto", auto="true for bf16 with the Trainer's optimizer and ZeRO-0", script=True,
        argv=lambda job: [], script_default=False),
    Key("attention", "str", "transformers' attn_implementation", ("model",), default="sdpa",
        choices=("sdpa", "eager", "flash_attention_2", "flex_attention"), flag="attn_implementation"),
    Key("torch_compile", "bool", "torch.compile the model", ("trainer",), default="auto",
        auto="true on cuda (not with ZeRO-3), false on cpu", argv=_torch_compile_argv, script_default=False),
    Key("regional_compilation", "bool", "accelerate's regional compilation: each repeated block compiled once",
        ("model",), default="auto", auto="with torch_compile: for the masked MLM head, llama, or 24 layers or more",
        off=False, argv=_regional_argv, script_default=False),
    Key("gradient_checkpointing", "bool", "activation checkpointing (each layer recomputed in the backward)",
        ("trainer",), default="auto", auto=f"{_AUTO_MEMORY} (on when a micro batch needs it); else false",
        argv=_checkpointing_argv),
    Key("mlm_head", "str", "masked: the MLM head only at masked positions (the same loss)", ("model",),
        default="auto", choices=("masked", "full"), auto="masked on cuda for mlm, full otherwise", off="full",
        argv=_mlm_only("mlm_head"), script_default="full"),
    Key("unpadded_attention", "bool", "sdpa with no attention mask (the blocks are full): SDPA's causal flag or no "
        "mask", ("model",), default="auto", auto="true on cuda with attention sdpa", off=False),
    Key("fused_cross_entropy", "bool", "causal LM: the LM head's matmul and cross-entropy fused (Liger Kernel; less "
        "memory, slower)", ("model",), default="auto", auto="false", off=False),
    Key("float8", "str", "the blocks' nn.Linear matmuls in float8 (torchao's float8 training recipe of this name)",
        ("model", "ds_config"), default="auto", choices=("none", "tensorwise", "rowwise", "rowwise_with_gw_hp"),
        auto="none", off="none", resumed_without="none"),
    # ---- the run
    Key("run_name", "str", "the run's directory name; null: <model>-<size>-<UTC timestamp>", ("plan",), default=None,
        nullable=True, script=True),
    Key("report_to", "str", "tensorboard: event files in <output_dir>/runs/", ("trainer",), default="tensorboard",
        choices=("tensorboard", "none")),
    # ---- the restart policy (train/controller/restart.py; docs/checkpoints-and-failures.md, "Restarts")
    Key("max_restarts", "int", "restarts a failed run makes by itself from its newest complete checkpoint; 0: none",
        ("plan",), default=PRESET, low=0, script=True, fix="set max_restarts to 0 (no restart) or more", resume=True),
    Key("min_nodes", "int", "the fewest nodes a restart goes on with", ("plan",), default=PRESET, low=1, script=True,
        fix="set min_nodes to 1 or more", resume=True),
)

BY_NAME: dict[str, Key] = {key.name: key for key in KEYS}


def rank_argv(job: dict) -> list[str]:
    """The rank's arguments that come from the job's keys (train.rank.pretrain's flags), in KEYS order.

    A key's ``argv`` builds its own; otherwise ``--<rank_flag> <value>`` unless the value is None or the key's
    ``off`` value (what the rank runs with when the flag is absent). Keys without a rank flag give nothing.
    """
    out = []
    for key in KEYS:
        if key.argv is not None:
            out += key.argv(job)
            continue
        flag = key.rank_flag()
        value = job.get(key.name)
        if flag is None or value is None or value == key.off:
            continue
        out += [f"--{flag}", "true" if value is True else "false" if value is False else _num(value)]
    return out


def model_fields():
    """(name, type, dataclasses.field) of every key that goes to the rank's ModelArguments with a plain flag, for
    dataclasses.make_dataclass: default the key's ``off`` value, help and choices from its declaration."""
    import dataclasses

    types = {"int": int, "float": float, "bool": bool, "str": str}
    out = []
    for key in KEYS:
        if "model" not in key.goes or key.kind == "dict":
            continue
        flag = key.rank_flag()
        if flag is None:
            continue
        metadata = {"help": key.help}
        if key.choices and key.off is not None:
            metadata["choices"] = list(key.choices)
        typ = types[key.kind] if key.off is not None else (types[key.kind] | None)
        out.append((flag, typ, dataclasses.field(default=key.off, metadata=metadata)))
    return out


# ------------------------------------------------------------------------------------------- docs/training.md's table
TABLE_BEGIN = "<!-- job keys: generated by `python -m train.common.keys table --write docs/training.md` -->"
TABLE_END = "<!-- end of job keys -->"


def _shown(value) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return str(value).lower()
    return str(value)


def table() -> str:
    """docs/training.md's key table (Markdown, one row a key, KEYS order), between TABLE_BEGIN and TABLE_END."""
    rows = [TABLE_BEGIN, "", "| key | type and values | default | `auto` | goes to | what |", "|---|---|---|---|---|---|"]
    for key in KEYS:
        values = key.kind + (" or null" if key.nullable else "")
        if key.choices:
            values = " \\| ".join(f"`{c}`" for c in key.choices)
        if key.range_text():
            values += f" in {key.range_text()}"
        default = "preset (fixed)" if key.fixed else "preset" if key.default == PRESET else f"`{_shown(key.default)}`"
        goes = ", ".join(GOES[g] for g in key.goes)
        what = key.help + ("; -e may change it when a run is resumed" if key.resume else "")
        rows.append(f"| `{key.name}` | {values} | {default} | {key.auto or ''} | {goes} | {what} |")
    return "\n".join([*rows, "", TABLE_END])


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with the part from the line ``begin`` to the line ``end`` replaced by ``body`` (which holds both).

    Raises ValueError when the page lacks the markers."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"the page has no {begin!r} ... {end!r} block")
    return text[:start] + body + text[stop + len(end):]


def replace_table(text: str) -> str:
    """``text`` (a docs page) with the part from TABLE_BEGIN to TABLE_END replaced by :func:`table`.

    Raises ValueError when the page lacks the markers."""
    return replace_between(text, TABLE_BEGIN, TABLE_END, table())


def write_table(page: str, begin: str, end: str, body: str) -> int:
    """Replace the block from ``begin`` to ``end`` in the file ``page`` by ``body`` (a temp file, then os.replace:
    the page is never half-written). Returns the exit status: 0, or 2 with one line on stderr for a page that does
    not read or lacks the markers."""
    import os
    import tempfile

    try:
        with open(page, encoding="utf-8") as f:
            text = replace_between(f.read(), begin, end, body)
    except (OSError, ValueError) as exc:
        print(f"error: {exc} ({page}); add the two marker lines where the table goes", file=sys.stderr)
        return 2
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(page)), prefix=".table-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, page)
    return 0


def main(args=None) -> int:
    """``table`` prints the key table; ``table --write PAGE`` replaces it in PAGE (temp file + os.replace)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m train.common.keys", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["table"])
    parser.add_argument("--write", metavar="PAGE", help="replace the table between its markers in PAGE")
    opts = parser.parse_args(args)
    if not opts.write:
        print(table())
        return 0
    status = write_table(opts.write, TABLE_BEGIN, TABLE_END, table())
    if status == 0:
        print(f"wrote the table of {len(KEYS)} job keys to {opts.write}")
    return status


if __name__ == "__main__":
    sys.exit(main())

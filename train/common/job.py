"""The job: its schema, the coercion of `-e` strings, validation, and reading a job file (stdlib + PyYAML only).

A job is the one validated dict that describes a run; the controller resolves it (train.controller.resolve: preset
+ size + overrides + the ``auto`` policy) and writes it to job.json, which the head (data preparation) and every
rank read back with :func:`load_job`. A user mistake raises :class:`JobError`, whose message is one line
``<what is wrong> (<where>); <how to fix>``; the CLIs print it after ``error:`` with exit status 2.
"""

import hashlib
import json
import math
import os
import re
from pathlib import Path

from train.common.keys import KEYS

# The version of what train/data/prepare_data.py writes (tokenizer/, dataset/, prepare.json). The only definition: it
# goes into data_key (so an old artifact gets a new key) and into prepare.json's format_version (so prepare_data
# rebuilds an old one). Bump it when prepare_data writes something different for the same inputs.
# 2: prepare.json records vocab_size_requested next to the vocab_size the tokenizer reached.
DATA_FORMAT_VERSION = 2


# The job's keys, each declared once in train.common.keys (type, values, default or auto policy, where it goes, help);
# the tables below are derived from those declarations.
# Keys a preset fixes: they define what the preset *is*, so they can't be overridden.
FIXED_KEYS = tuple(key.name for key in KEYS if key.fixed)


# Overridable keys -> (kind, nullable). Kinds: int, float, bool, str, dict. Order = order in the job file.
SCHEMA = {key.name: (key.kind, key.nullable) for key in KEYS if not key.fixed}


# Keys written by resolve() that nobody sets: `model` (the preset name) and `data_key`.
DERIVED_KEYS = ("model", "data_key")


# str keys -> their allowed values ("auto" aside: precision's is resolved by resolve_precision, the others' by
# train.controller.resolve).
CHOICES = {key.name: key.choices for key in KEYS if key.choices}


# Per model family: config field names for positions / width / heads, and the positions a sequence can't use
# (RoBERTa offsets positions by padding_idx + 1 = 2). Families not listed skip these checks.
FAMILIES = {
    "bert": {"positions": "max_position_embeddings", "offset": 0, "hidden": "hidden_size",
             "heads": "num_attention_heads"},
    "roberta": {"positions": "max_position_embeddings", "offset": 2, "hidden": "hidden_size",
                "heads": "num_attention_heads"},
    "gpt2": {"positions": "n_positions", "offset": 0, "hidden": "n_embd", "heads": "n_head"},
    "llama": {"positions": "max_position_embeddings", "offset": 0, "hidden": "hidden_size",
              "heads": "num_attention_heads"},
}


# Model types whose blocks use transformers' Conv1D instead of nn.Linear: float8 (train/rank/kernels.py) converts
# nn.Linear only, so it has nothing to run there.
CONV1D_MODEL_TYPES = ("gpt2",)


def float8_refusal(job):
    """Why the job cannot run float8 (job key float8), as (what is wrong, how to fix), or None when it can: the one
    rule that validate() refuses with and that train.controller.resolve's ``auto`` stays inside. Reads the job's
    model_type and zero_stage (resolved: no "auto")."""
    if job["model_type"] in CONV1D_MODEL_TYPES:
        return (f"float8 runs the nn.Linear layers of a model's blocks in float8; {job['model_type']}'s blocks are "
                "transformers' Conv1D", "set -e float8=none (or auto)")
    if job["zero_stage"] == 3:
        return ("float8 (torchao's float8 training, built for PyTorch's FSDP2) is not run with DeepSpeed's ZeRO-3, "
                "whose hooks partition and gather each layer's weight",
                "set -e float8=none (or auto), or a zero_stage of 0-2")
    return None


# Inputs that determine train/data/prepare_data.py's artifact (the masking rate doesn't: masking happens at train time).
DATA_KEY_FIELDS = ("task", "model_type", "tokenizer_type", "vocab_size", "lowercase", "tokenizer_path",
                   "dataset_path", "text_column", "max_seq_length")


_RUN_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


_TRUE = ("true", "yes", "on", "1")


_FALSE = ("false", "no", "off", "0")


_NULL = ("null", "none", "~", "")


class JobError(ValueError):
    """A user mistake in a preset, an override or a job file.

    str(err) is the one-line message `<what> (<where>); <fix>` that the CLIs print after `error: `.
    """

    def __init__(self, what, where, fix):
        self.what, self.where, self.fix = what, where, fix
        super().__init__(f"{what} ({where}); {fix}")


def coerce(key, value, where):
    """Convert `value` to the kind SCHEMA gives `key`; strings as Ansible `-e key=value` passes them are parsed.

    "100" -> 100 (int keys also take "5e4" -> 50000), "2e-4" -> 0.0002, "false"/"no"/"off"/"0" -> False,
    "true"/"yes"/"on"/"1" -> True, '{"a": 1}' -> dict, "null"/"none"/"" -> None for nullable keys.
    Raises JobError (naming `where`) when the value can't be converted; bools are never taken as numbers.
    """
    kind, nullable = SCHEMA[key]
    if nullable and (value is None or (isinstance(value, str) and value.strip().lower() in _NULL)):
        return None
    text = value.strip() if isinstance(value, str) else None
    bad = JobError(f"{key} must be {_KIND_WORDS[kind]}{' or null' if nullable else ''}, got {value!r}", where,
                   f"give {key} {_EXAMPLES[kind]}")
    if kind == "int":
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        if text is not None:
            try:
                return int(text)
            except ValueError:
                pass
            try:
                number = float(text)
            except ValueError:
                raise bad from None
            if math.isfinite(number) and number.is_integer():
                return int(number)
        raise bad
    if kind == "float":
        if isinstance(value, bool):
            raise bad
        if isinstance(value, (int, float)):
            number = float(value)
        elif text is not None:
            try:
                number = float(text)
            except ValueError:
                raise bad from None
        else:
            raise bad
        if not math.isfinite(number):
            raise bad
        return number
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if text is not None and text.lower() in _TRUE:
            return True
        if text is not None and text.lower() in _FALSE:
            return False
        raise bad
    if kind == "str":
        if isinstance(value, str) and text:
            return value
        raise bad
    if kind == "dict":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise bad from None
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return dict(value)
        raise bad
    raise AssertionError(kind)


_KIND_WORDS = {"int": "an integer", "float": "a number", "bool": "a boolean", "str": "a non-empty string",
               "dict": "a mapping (JSON object)"}


_EXAMPLES = {"int": "a whole number, e.g. 100", "float": "a number, e.g. 2e-4", "bool": "true or false",
             "str": "a non-empty string", "dict": """a JSON object, e.g. '{"num_hidden_layers": 4}'"""}


def resolve_precision(job, origin):
    """Replace precision "auto" in ``job`` (in place) with bf16 on cuda, fp32 on cpu; JobError for an unknown one."""
    prec = job["precision"]
    allowed = ("auto", *CHOICES["precision"])
    if prec not in allowed:
        raise JobError(f"precision must be one of {', '.join(allowed)}, got {prec!r}",
                       origin.get("precision", "precision"), "use auto (bf16 on cuda, fp32 on cpu)")
    if prec == "auto" and job.get("accelerator") in CHOICES["accelerator"]:
        job["precision"] = "bf16" if job["accelerator"] == "cuda" else "fp32"


def data_key(job):
    """Short stable hash (16 hex chars) of everything that determines the prepared data (DATA_KEY_FIELDS).

    Changes with max_seq_length, the tokenizer settings, dataset_path (normalised), task or model family; not with
    training hyper-parameters such as max_steps or learning_rate. The playbook names the artifact dir after it.
    """
    fields = {key: job.get(key) for key in DATA_KEY_FIELDS}
    for key in ("dataset_path", "tokenizer_path"):
        if fields[key] is not None:
            fields[key] = os.path.normpath(fields[key])
    fields["format"] = DATA_FORMAT_VERSION
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def validate(job, origin=None):
    """Check types, choices, ranges and cross-key rules of a resolved job; return None or raise JobError.

    `origin` maps a key to where its value came from (for the message); defaults to the key name.
    """
    origin = origin or {}

    def where(key):
        return origin.get(key, key)

    def fail(key, what, fix):
        raise JobError(what, where(key), fix)

    for key, (kind, nullable) in SCHEMA.items():
        if key not in job:
            fail(key, f"missing job key {key}", "re-run `python -m train.controller.resolve resolve`")
        if not _is_kind(job[key], kind, nullable):
            fail(key, f"{key} must be {_KIND_WORDS[kind]}{' or null' if nullable else ''}, got {job[key]!r}",
                 f"give {key} {_EXAMPLES[kind]}")
    for key in sorted(KEYS, key=lambda k: k.name != "accelerator"):  # first: without it precision stays "auto"
        if key.choices and job.get(key.name) not in key.choices:
            listed = ", ".join(str(c) for c in key.choices)
            fail(key.name, f"{key.name} must be one of {listed}{' or auto' if key.auto else ''}, got "
                 f"{job.get(key.name)!r}",
                 f"set -e {key.name}=auto or one of: {listed}" if key.auto else f"set {key.name} to one of: {listed}")
    if not isinstance(job.get("model_type"), str) or not job["model_type"]:
        fail("model_type", "model_type must be a transformers model type such as bert", "fix the preset")

    for key in KEYS:
        why = key.out_of_range(job.get(key.name))
        if why:
            fail(key.name, why, key.fix or _range_fix(key))
    if job["warmup_steps"] > job["max_steps"]:
        fail("warmup_steps", f"warmup_steps {job['warmup_steps']} exceeds max_steps {job['max_steps']}: the "
             "learning rate would never reach its peak",
             f"set -e warmup_steps=<= {job['max_steps']} (e.g. {job['max_steps'] // 10}) or raise max_steps")
    if job["task"] == "mlm":
        prob = job["mlm_probability"]
        if prob is None:
            fail("mlm_probability", f"mlm_probability must be in (0, 1) for task mlm, got {prob}",
                 "set mlm_probability to e.g. 0.15")
    elif job["mlm_probability"] is not None:
        fail("mlm_probability", f"mlm_probability applies to masked LM only; {job['model_type']} is causal (clm)",
             "drop mlm_probability (or set it to null)")
    check_precision(job["precision"], job["accelerator"], where("precision"))
    if job["autocast"] and job["precision"] != "bf16":
        fail("autocast", f"autocast (DeepSpeed torch_autocast) runs bf16; the job's precision is {job['precision']}",
             "set -e autocast=false (fp16 uses DeepSpeed's fp16 block with loss scaling) or -e precision=bf16")
    if job["offload_optimizer"] != "none" and job["optimizer"] != "deepspeed":
        fail("optimizer", f"offload_optimizer {job['offload_optimizer']} needs DeepSpeed's optimizer "
             f"(DeepSpeedCPUAdam), the job's optimizer is {job['optimizer']}",
             "set -e optimizer=deepspeed (or auto), or -e offload_optimizer=none")
    if job["mlm_head"] == "masked" and job["task"] != "mlm":
        fail("mlm_head", f"mlm_head masked applies to masked LM only; {job['model_type']} is causal (clm)",
             "set -e mlm_head=full (or auto)")
    if job["unpadded_attention"] and job["attention"] != "sdpa":
        fail("unpadded_attention", f"unpadded_attention runs transformers' sdpa attention without a mask; the job's "
             f"attention is {job['attention']}", "set -e unpadded_attention=false (or auto), or -e attention=sdpa")
    if job["fused_cross_entropy"] and (job["task"] != "clm" or job["accelerator"] != "cuda"):
        fail("fused_cross_entropy", "fused_cross_entropy (Liger Kernel's Triton kernels) applies to causal LMs on "
             f"cuda; the job is {job['task']} on {job['accelerator']}", "set -e fused_cross_entropy=false (or auto)")
    refused = float8_refusal(job)
    if job["float8"] != "none" and refused:
        fail("float8", *refused)
    if job["torch_compile"] and job["accelerator"] != "cuda":
        fail("torch_compile", "torch_compile needs accelerator cuda (on cpu it only adds start-up time)",
             "set -e torch_compile=false (or auto)")
    if job["regional_compilation"] and not job["torch_compile"]:
        fix = ("set -e regional_compilation=false (or auto): torch.compile runs on cuda only"
               if job["accelerator"] != "cuda"
               else "set -e torch_compile=true, or -e regional_compilation=false (or auto)")
        fail("regional_compilation", "regional_compilation is a way of running torch.compile, and torch_compile is "
             "false", fix)
    if job["offload_optimizer"] != "none" and job["zero_stage"] == 0:
        fail("offload_optimizer", "offload_optimizer needs ZeRO stage 1, 2 or 3, zero_stage is 0",
             "set -e zero_stage=2 or -e offload_optimizer=none")
    ratio = job["offload_ratio"]
    if ratio < 1.0 and (job["offload_optimizer"] == "none" or job["zero_stage"] != 3):
        fail("offload_ratio", f"offload_ratio {ratio} (a partial offload, DeepSpeed's offload_optimizer.ratio) needs "
             f"ZeRO stage 3 with offload_optimizer cpu; the job has zero_stage {job['zero_stage']} and "
             f"offload_optimizer {job['offload_optimizer']}",
             "set -e zero_stage=3 -e offload_optimizer=cpu (or auto), or -e offload_ratio=auto")
    if job["run_name"] is not None and not _RUN_NAME_RE.match(job["run_name"]):
        fail("run_name", f"run_name {job['run_name']!r} is not a safe directory name",
             "use letters, digits, '.', '_' and '-' (up to 100, starting with a letter or digit)")
    _validate_model_config(job, where)


def _range_fix(key):
    """The generic fix for a number outside its key's range (Key.fix gives a better one where it says more)."""
    if key.high is None:
        return (f"set {key.name} to a positive number" if key.low == 0 and key.low_open
                else f"set {key.name} to {key.low} or more")
    return f"set {key.name} to a value in {key.range_text()}"


def precision_of_flags(bf16, fp16, where):
    """The job precision a Trainer runs with for TrainingArguments' `--bf16` / `--fp16` flags (booleans).

    Returns "bf16", "fp16" or "fp32" (neither flag). Raises JobError (naming `where`) when both are set: the HF
    Trainer and DeepSpeed run one of them.
    """
    if bf16 and fp16:
        raise JobError("both --fp16 and --bf16 are enabled", where,
                       "keep one (bf16 on GPUs of compute capability >= 8.0, fp16 otherwise)")
    return "bf16" if bf16 else "fp16" if fp16 else "fp32"


def check_precision(precision, accelerator, where):
    """The one precision rule: fp16 and bf16 need accelerator cuda (a CPU runs fp32).

    `precision` is a resolved precision (fp32|fp16|bf16), `accelerator` cpu|cuda. Returns None; raises JobError
    naming `where` otherwise.
    """
    if precision in ("fp16", "bf16") and accelerator != "cuda":
        raise JobError(f"precision {precision} needs accelerator cuda, the job's accelerator is {accelerator}",
                       where, "use precision auto or fp32 on cpu")


def _is_kind(value, kind, nullable):
    if value is None:
        return nullable
    if kind == "float":
        return isinstance(value, float)
    return type(value) is {"int": int, "bool": bool, "str": str, "dict": dict}[kind] and value != ""


#: model_config fields whose kind the name tells (transformers' names: BERT's hidden_dropout_prob, GPT-2's attn_pdrop,
#: Llama's attention_dropout; num_hidden_layers, intermediate_size, n_embd, ...): checked here, before anything is
#: staged, instead of by the rank's transformers config after staging. null leaves a field to transformers.
_PROBABILITY_FIELD = re.compile(r"dropout|pdrop|_prob$")
_COUNT_FIELD = re.compile(r"^num_|_size$|^n_(embd|layer|head|positions|inner|ctx)$|^max_position_embeddings$")


def _validate_model_config(job, where):
    config = job["model_config"]
    for field, value in config.items():
        if isinstance(value, (dict, list)):
            raise JobError(f"model_config.{field} must be a scalar, got {value!r}", where("model_config"),
                           "give model_config fields as numbers, strings, booleans or null")
        if value is None:
            continue
        number = _is_kind(value, "int", False) or _is_kind(value, "float", False)  # bools are neither
        if _PROBABILITY_FIELD.search(field) and not (number and 0 <= value <= 1):
            raise JobError(f"model_config.{field} must be a probability, a number from 0 to 1, got {value!r}",
                           where("model_config"),
                           f"give a number from 0 to 1, unquoted, e.g. -e '{{\"model_config\": {{\"{field}\": 0.1}}}}'")
        if _COUNT_FIELD.search(field) and not (_is_kind(value, "int", False) and value >= 1):
            raise JobError(f"model_config.{field} must be an integer >= 1, got {value!r}", where("model_config"),
                           "give a whole number of 1 or more, unquoted (JSON)")
    family = FAMILIES.get(job["model_type"])
    if family is None:
        return
    positions = config.get(family["positions"])
    if isinstance(positions, int) and not isinstance(positions, bool):
        usable = positions - family["offset"]
        if job["max_seq_length"] > usable:
            raise JobError(f"max_seq_length {job['max_seq_length']} exceeds the {usable} usable positions of "
                           f"model_config.{family['positions']}={positions}",
                           where("max_seq_length"),
                           f"set -e max_seq_length=<= {usable} or raise model_config.{family['positions']}")
    hidden, heads = config.get(family["hidden"]), config.get(family["heads"])
    if isinstance(hidden, int) and isinstance(heads, int) and (heads < 1 or hidden % heads):
        raise JobError(f"model_config.{family['hidden']} {hidden} is not divisible by "
                       f"model_config.{family['heads']} {heads}", where("model_config"),
                       "pick a head count that divides the hidden size")


def load_job(path):
    """Read a job JSON written by `resolve` and validate it again (it may have been edited by hand).

    Returns the job dict. Raises JobError when the file is unreadable, has unknown or missing keys, fails
    validation, or its data_key no longer matches its data fields.
    """
    shown = str(path)
    try:
        job = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise JobError(f"cannot read job file: {' '.join(str(exc).split())}", shown,
                       "write it with `python -m train.controller.resolve resolve`") from None
    if not isinstance(job, dict):
        raise JobError("job file is not a JSON object", shown, "write it with `python -m train.controller.resolve resolve`")
    known = set(DERIVED_KEYS) | set(FIXED_KEYS) | set(SCHEMA)
    for key in job:
        if key not in known:
            raise JobError(f"unknown job key {key!r}", shown, f"job keys: {', '.join(sorted(known))}")
    for key in (*DERIVED_KEYS, *FIXED_KEYS):
        if key not in job:
            raise JobError(f"missing job key {key}", shown, "re-run `python -m train.controller.resolve resolve`")
    origin = {key: f"{shown}: {key}" for key in job}
    resolve_precision(job, origin)
    validate(job, origin)
    if job["data_key"] != data_key(job):
        raise JobError("data_key does not match the job's data settings (edited by hand?)", f"{shown}: data_key",
                       "re-run `python -m train.controller.resolve resolve` instead of editing the job file")
    return job

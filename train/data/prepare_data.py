"""Prepare a training data artifact once, on the head node: raw text -> tokenizer + tokenized, grouped blocks.

    python -m train.data.prepare_data --job JOB.json --out ARTIFACT_DIR [--force] [--rehash] [--world-size N] [--progress-file F]
    python -m train.data.prepare_data --verify ARTIFACT_DIR [--rehash]
    python -m train.data.prepare_data --manifest DIR [--beside] [--rehash]   (seal a directory staged as a tree:
        the checkpoint of -e resume=, a user script's data with --beside: its MANIFEST is DIR.MANIFEST)
    python -m train.data.prepare_data --verify DIR --beside [--rehash]

Steps (the shape of transformers' run_mlm.py data section, done ahead of time so no rank tokenizes at start-up):

1. read the job's raw text (train/data/corpus.py: the stdlib's pydoc topics by default, a text file, a directory of
   .txt files, a .parquet / .jsonl / .json / .csv file or directory of them (the job's ``text_column``), a
   ``datasets`` save_to_disk directory, or ``hub:REPO_ID[:CONFIG[:SPLIT]]`` loaded from the Hugging Face hub) into an
   Arrow table;
2. tokenizer: loaded from the job's ``tokenizer_path`` when that is a local directory, otherwise trained on the corpus
   with the ``tokenizers`` library -- WordPiece with BERT's specials and post-processor, or byte-level BPE with
   RoBERTa's (task mlm) or GPT-2's (task clm) specials -- and saved as a PreTrainedTokenizerFast;
3. tokenize every document (``datasets.map``), concatenate and cut into blocks of ``max_seq_length`` (run_mlm.py's
   ``group_texts``; each batch of 1000 documents drops its remainder);
4. ``save_to_disk``, then ``prepare.json`` and ``MANIFEST`` (written last).

Everything is written into a temporary directory beside ARTIFACT_DIR and moved into place at the end
(train/data/artifact.py). When ARTIFACT_DIR's MANIFEST verifies and its prepare.json records the same data settings and
source fingerprint, nothing is done and the last line says ``up to date``.

The job file is read and validated by train.common.job.load_job (the one job schema: the same keys, types and bounds as
``python -m train.controller.resolve resolve``); prepare_data uses task, tokenizer_type (wordpiece | byte_bpe), vocab_size,
lowercase, tokenizer_path, dataset_path, text_column and max_seq_length. A trained tokenizer can reach fewer entries
than vocab_size asks (a small corpus has fewer distinct words and merges): the size reached is printed against the
one asked, with a ``warning:`` line below VOCAB_WARN_FRACTION, and prepare.json records both (``vocab_size``: the
real size, which train/rank/pretrain.py builds the model with; ``vocab_size_requested``).

A corpus too small for the job is warned about (``batch_report``), built or up to date: one optimizer step takes a
global batch of per_device_train_batch_size x gradient_accumulation_steps x ``--world-size`` (default 1; the
playbook passes the number of ranks) blocks, and a ``warning:`` line says so when the prepared blocks are fewer than
one global batch or than MIN_STEPS_PER_EPOCH steps' worth.

Progress: every line goes to stdout as ``prepare [<seconds>s] ...`` and, with ``--progress-file F``, is appended to
F as it is printed (train.yml runs this with ``async`` and its ``prepare_data_watch`` action relays F's lines while
the preparation runs). The long steps (reading, training the tokenizer, tokenizing, grouping) say how far they
are: their first batch, then at most every PROGRESS_EVERY_S seconds, and their end (``tokenizing: 3000 of 12000
documents (25%)``).

Nothing is downloaded (HF_HUB_OFFLINE defaults to 1) unless dataset_path is a ``hub:`` name; that one needs network
on the head, with HF_HUB_OFFLINE and HF_DATASETS_OFFLINE unset.
Exit status: 0 done / up to date / verified; 1 verification failed; 2 bad input (one line ``error: ...; fix``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from train.data import artifact, corpus
from train.data.corpus import DataError
from train.common import cli
from train.common.job import DATA_FORMAT_VERSION, JobError, load_job

VOCAB_WARN_FRACTION = 0.9  # warn when a trained tokenizer reaches less than this share of the vocab_size asked
MIN_STEPS_PER_EPOCH = 10  # warn when the blocks make fewer optimizer steps than this per pass over the data
MAP_BATCH = 1000  # documents per datasets.map batch (and per group_texts window, as in run_mlm.py)
PROGRESS_EVERY_S = 5.0  # a long step's progress line at most this often (besides its first and last)
WORDPIECE_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
GPT2_SPECIALS = ["<|endoftext|>", "<pad>"]

#: the line a preparation or a seal that succeeded ends with on stdout: the sha256 of the MANIFEST the head keeps, which
#: each worker's copy is checked against (roles/train_stage reads it from the command's output: no second look at the
#: file)
MANIFEST_LINE = "MANIFEST sha256 {sha256} {path}"

_T0 = time.monotonic()
_PROGRESS_FILE: str | None = None  # --progress-file: every line is appended there too


def manifest_line(manifest: Path) -> str:
    """MANIFEST_LINE for the file ``manifest`` (its sha256, artifact.sha256_file). Raises OSError when it can't be
    read."""
    return MANIFEST_LINE.format(sha256=artifact.sha256_file(manifest), path=manifest)


def say(msg: str) -> None:
    """Print ``prepare [<seconds since start>s] <msg>`` on stdout, flushed (and append it to --progress-file)."""
    line = f"prepare [{time.monotonic() - _T0:6.1f}s] {msg}"
    print(line, flush=True)
    if _PROGRESS_FILE:
        with open(_PROGRESS_FILE, "a", encoding="utf-8") as f:
            f.write(line + "\n")


class Progress:
    """How far one long step is, said as ``<what>: <done> of <total> <unit> (<pct>%)`` (``<done> <unit> so far``
    without a total): at the first :meth:`add` (when there is a total), then at most every PROGRESS_EVERY_S
    seconds, and at :meth:`end`."""

    def __init__(self, what: str, total: int | None = None, unit: str = "documents"):
        self.what, self.total, self.unit = what, total, unit
        self.done, self._said = 0, None
        self._last = None if total else time.monotonic()  # no total: the first line after PROGRESS_EVERY_S

    def _say(self) -> None:
        if self.total:
            done = min(self.done, self.total)
            say(f"{self.what}: {done} of {self.total} {self.unit} ({100 * done // self.total}%)")
        else:
            say(f"{self.what}: {self.done} {self.unit} so far")
        self._said, self._last = self.done, time.monotonic()

    def add(self, n: int) -> None:
        """Count ``n`` more done; say so when it is the first batch or PROGRESS_EVERY_S have passed."""
        self.done += n
        if self._last is None or time.monotonic() - self._last >= PROGRESS_EVERY_S:
            self._say()

    def end(self) -> None:
        """Say the final count (unless it was the last one said)."""
        if self._said != self.done:
            self._say()


# ------------------------------------------------------------------------------------------------------------ job
def data_settings(job: dict) -> dict:
    """The job keys that decide the artifact's content, from a job validated by train.common.job.load_job.

    Returns:
        {"task", "tokenizer": {"kind" (wordpiece|bpe), "name_or_path" (None: train one), "vocab_size" (None when a
        tokenizer is given), "lowercase"}, "max_seq_length", "dataset_path", "text_column"}.
    """
    name_or_path = job.get("tokenizer_path") or None
    return {
        "task": job["task"],
        "tokenizer": {
            "kind": {"byte_bpe": "bpe"}.get(job["tokenizer_type"], job["tokenizer_type"]),
            "name_or_path": name_or_path,
            "vocab_size": job["vocab_size"] if name_or_path is None else None,
            "lowercase": bool(job["lowercase"]),
        },
        "max_seq_length": job["max_seq_length"],
        "dataset_path": job.get("dataset_path"),
        "text_column": job.get("text_column") or "text",
    }


def vocab_report(reached: int, requested: int | None) -> tuple[str, bool]:
    """The line comparing a tokenizer's vocabulary with the vocab_size asked, and whether it is a warning.

    Args:
        reached: len(tokenizer), entries including special tokens.
        requested: the job's vocab_size, or None for a given (not trained) tokenizer.

    Returns:
        (line, warn): warn is True when reached < VOCAB_WARN_FRACTION x requested; the line then says why and
        what to do.
    """
    if not requested:
        return f"vocabulary: {reached} tokens (the given tokenizer's)", False
    share = reached / requested
    line = f"vocabulary: {reached} tokens reached of vocab_size {requested} asked ({100 * share:.0f}%)"
    if share >= VOCAB_WARN_FRACTION:
        return line, False
    return (f"warning: the tokenizer reached only {reached} of the {requested} tokens vocab_size asks "
            f"({100 * share:.0f}%): the corpus has too little distinct text for that vocabulary. The model is built "
            f"with the {reached} it has; give more text (-e dataset_path=...) or ask for -e vocab_size=<= {reached}"), True


def batch_report(*, blocks: int, documents: int, corpus_tokens: int, block_length: int, micro: int, accum: int,
                 world_size: int, max_steps: int) -> tuple[str, bool]:
    """The line comparing the prepared data with what the job's optimizer steps eat, and whether it is a warning.

    Args:
        blocks: prepared samples (blocks of ``block_length`` tokens); documents / corpus_tokens: what the corpus
            held before grouping (documents, tokens).
        micro, accum, world_size: per_device_train_batch_size, gradient_accumulation_steps and ranks; one optimizer
            step takes global = micro x accum x world_size blocks.
        max_steps: the job's optimizer steps.

    Returns:
        (line, warn): warn is True when blocks < global, or blocks < MIN_STEPS_PER_EPOCH x global (fewer than that
        many steps per epoch); the line then starts with ``warning:`` and says how much text there is, how much a
        step eats, how many passes max_steps makes, and what to change.
    """
    glob = micro * accum * world_size
    per_epoch = blocks / glob
    epochs = max_steps * glob / blocks if blocks else float("inf")
    step = f"one optimizer step takes a global batch of {glob} blocks (micro {micro} x accumulation {accum} x " \
           f"world size {world_size})"
    have = (f"{documents} document{'s' if documents != 1 else ''}, {corpus_tokens} tokens -> {blocks} "
            f"block{'s' if blocks != 1 else ''} of {block_length} tokens")
    passes = f"max_steps {max_steps} goes over the same text {epochs:.1f} times"
    fix = ("give more text (-e dataset_path=...), or lower per_device_train_batch_size / gradient_accumulation_steps "
           "/ max_steps")
    if blocks < glob:
        return (f"warning: the corpus is smaller than one global batch: {have}, but {step}; {passes}. {fix[0].upper()}"
                f"{fix[1:]}"), True
    if per_epoch < MIN_STEPS_PER_EPOCH:
        return (f"warning: the corpus makes only {per_epoch:.1f} optimizer steps per epoch (fewer than "
                f"{MIN_STEPS_PER_EPOCH}): {have}, and {step}; {passes}. {fix[0].upper()}{fix[1:]}"), True
    return (f"batches: {blocks} blocks = {per_epoch:.1f} optimizer steps per epoch at a global batch of {glob} "
            f"(micro {micro} x accumulation {accum} x world size {world_size}); max_steps {max_steps} = "
            f"{epochs:.2f} epochs"), False


# ------------------------------------------------------------------------------------------------------ tokenizer
def _train_tokenizer(settings: dict, texts):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    t = settings["tokenizer"]
    vocab, lowercase, seq = t["vocab_size"], t["lowercase"], settings["max_seq_length"]
    if t["kind"] == "wordpiece":  # BERT
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
        trainer = trainers.WordPieceTrainer(vocab_size=vocab, special_tokens=WORDPIECE_SPECIALS, show_progress=False)
        tok.train_from_iterator(texts, trainer=trainer)
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
        )
        specials = {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                    "mask_token": "[MASK]"}
    else:  # byte-level BPE: RoBERTa specials for mlm, GPT-2's for clm
        tok = Tokenizer(models.BPE())
        if lowercase:
            tok.normalizer = normalizers.Lowercase()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        if settings["task"] == "mlm":
            special_list = ROBERTA_SPECIALS[:-1] + [AddedToken("<mask>", lstrip=True, special=True)]
        else:
            special_list = GPT2_SPECIALS
        trainer = trainers.BpeTrainer(
            vocab_size=vocab, min_frequency=2, special_tokens=special_list,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
        )
        tok.train_from_iterator(texts, trainer=trainer)
        if settings["task"] == "mlm":
            tok.post_processor = processors.RobertaProcessing(
                ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                trim_offsets=True, add_prefix_space=False,
            )
            specials = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
                        "unk_token": "<unk>", "pad_token": "<pad>",
                        "mask_token": AddedToken("<mask>", lstrip=True, special=True)}
        else:
            tok.post_processor = processors.ByteLevel(trim_offsets=False)
            specials = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
                        "pad_token": "<pad>"}
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=seq, **specials)


def _load_tokenizer(settings: dict):
    from transformers import AutoTokenizer

    path = settings["tokenizer"]["name_or_path"]
    if not Path(path).is_dir():
        raise DataError(
            f"tokenizer_path {path!r} is not a local directory (nothing is downloaded); "
            "point -e tokenizer_path= at a saved tokenizer directory, or set it to null to train one on the corpus"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - any failure here means the directory is not a usable tokenizer
        raise DataError(f"cannot load the tokenizer in {path} ({type(e).__name__}: {str(e).splitlines()[0][:160]}); "
                        "save one there with tokenizer.save_pretrained") from None
    if settings["task"] == "mlm" and tokenizer.mask_token is None:
        raise DataError(f"the tokenizer in {path} has no mask token, which task mlm needs; "
                        "use a BERT/RoBERTa-style tokenizer or set tokenizer_path to null")
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise DataError(f"the tokenizer in {path} has neither a pad nor an eos token; add a pad token to it")
        tokenizer.pad_token = tokenizer.eos_token  # GPT-2 convention
    return tokenizer


def _appends_eos(tokenizer) -> bool:
    """True when the tokenizer adds no specials itself (GPT-2): then each document gets an eos appended."""
    sample = "hello world"
    return (
        tokenizer.eos_token_id is not None
        and tokenizer(sample)["input_ids"] == tokenizer(sample, add_special_tokens=False)["input_ids"]
    )


# -------------------------------------------------------------------------------------------------------- prepare
def _fingerprint_settings(settings: dict, source: corpus.Source) -> dict:
    s = json.loads(json.dumps(settings))
    s["dataset_path"] = source.path
    if not source.reads_column:
        s["text_column"] = None
    name = s["tokenizer"]["name_or_path"]
    if name is not None and Path(name).is_dir():  # a given tokenizer is part of the data: hash its files too
        s["tokenizer"]["name_or_path"] = str(Path(name).resolve())
        s["tokenizer"]["fingerprint"] = corpus.fingerprint_tree(Path(name).resolve())
    return s


def up_to_date(out: Path, settings: dict, fingerprint: str, rehash: bool = False) -> tuple[bool, str]:
    """Whether the artifact at ``out`` can be kept: (True, reason) when its MANIFEST verifies and its prepare.json
    has DATA_FORMAT_VERSION, the same recorded data settings and the same source fingerprint; else (False, why).
    The MANIFEST check is artifact.verify's quick one (no hashing when nothing changed since the last passed
    verification) unless ``rehash``."""
    if not out.exists():
        return False, "no artifact yet"
    ok, why = artifact.verify(out, quick=not rehash)
    if not ok:
        return False, f"existing artifact is invalid ({why})"
    try:
        meta = json.loads((out / "prepare.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False, "existing prepare.json is unreadable"
    if meta.get("format_version") != DATA_FORMAT_VERSION:
        return False, "artifact format changed"
    if meta.get("settings") != settings:
        return False, "data settings changed"
    if meta.get("source", {}).get("fingerprint") != fingerprint:
        return False, "source data changed"
    return True, why


def _unwrap(e: BaseException) -> DataError | None:
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, DataError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def build(settings: dict, source: corpus.Source, fingerprint: str, stage: Path) -> dict:
    """Write ``stage``/tokenizer and ``stage``/dataset (blocks of max_seq_length token ids) from the source.

    Returns:
        {"trained" (bool), "tokenizer", "eos_appended" (bool), "corpus_tokens" (int), "documents" (int)}.

    Raises:
        DataError: no text in the corpus, a tokenizer directory that is unusable, or not one full block.
    """
    import datasets
    import transformers

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    transformers.logging.set_verbosity_error()
    work = stage / "_work"
    work.mkdir()
    if source.kind in ("table_file", "table_dir"):  # load_dataset's Arrow copy of the user's files: scratch, not cache
        source.cache_dir = str(work / "load")

    # 1. raw documents -> Arrow (one streaming pass over the source; later passes read the Arrow table)
    if next(corpus.documents(source), None) is None:
        raise DataError(f"the corpus ({source.description}) holds no text; add text or point dataset_path elsewhere")
    say(f"reading {source.description}")
    gen_kwargs = {"source": source}
    reading = Progress(f"reading {source.description}")
    _READING[:] = [reading]
    try:
        raw = datasets.Dataset.from_generator(
            _doc_rows, gen_kwargs=gen_kwargs, cache_dir=str(work / "raw"), fingerprint=fingerprint[:32],
            features=datasets.Features({"text": datasets.Value("string")}),
        )
    except Exception as e:  # datasets wraps errors raised inside the generator
        err = _unwrap(e)
        if err is not None:
            raise err from None
        raise
    reading.end()
    _READING[:] = []
    n_docs = len(raw)
    n_chars = sum(len(t) for b in raw.iter(batch_size=MAP_BATCH) for t in b["text"])
    say(f"read {n_docs} documents, {n_chars} characters")

    # 2. tokenizer
    t = settings["tokenizer"]
    if t["name_or_path"] is not None:
        say(f"loading tokenizer from {t['name_or_path']}")
        tokenizer = _load_tokenizer(settings)
        trained = False
    else:
        say(f"training a {t['kind']} tokenizer (vocab_size {t['vocab_size']}, lowercase {t['lowercase']})")
        training = Progress("training the tokenizer on", n_docs)

        def texts():
            for b in raw.iter(batch_size=MAP_BATCH):
                training.add(len(b["text"]))
                yield from b["text"]

        tokenizer = _train_tokenizer(settings, texts())
        training.end()
        trained = True
    tokenizer.model_max_length = settings["max_seq_length"]
    tokenizer.save_pretrained(stage / "tokenizer")
    say(f"tokenizer: {type(tokenizer).__name__}, {len(tokenizer)} tokens, specials {tokenizer.all_special_tokens}")
    line, _warn = vocab_report(len(tokenizer), t["vocab_size"] if trained else None)
    say(line)

    # 3. tokenize, then group into blocks (run_mlm.py's tokenize_function + group_texts)
    mlm = settings["task"] == "mlm"
    eos = tokenizer.eos_token_id if _appends_eos(tokenizer) else None
    seq = settings["max_seq_length"]

    tokenizing = Progress("tokenizing", n_docs)
    grouping = Progress(f"grouping into blocks of {seq}", n_docs)

    def tokenize(batch):
        tokenizing.add(len(batch["text"]))
        enc = tokenizer(batch["text"], return_special_tokens_mask=mlm, return_attention_mask=True, verbose=False)
        out = {k: enc[k] for k in ("input_ids", "attention_mask") + (("special_tokens_mask",) if mlm else ())}
        if eos is not None:
            for k, extra in (("input_ids", eos), ("attention_mask", 1), ("special_tokens_mask", 1)):
                if k in out:
                    out[k] = [ids + [extra] for ids in out[k]]
        return out

    def group_texts(examples):
        grouping.add(len(examples["input_ids"]))
        concatenated = {k: [t for seq_ in examples[k] for t in seq_] for k in examples}
        total = len(concatenated["input_ids"]) // seq * seq
        return {k: [v[i : i + seq] for i in range(0, total, seq)] for k, v in concatenated.items()}

    say(f"tokenizing {len(raw)} documents")
    tokenized = raw.map(tokenize, batched=True, batch_size=MAP_BATCH, remove_columns=["text"],
                        cache_file_name=str(work / "tokenized.arrow"), desc="tokenize")
    tokenizing.end()
    corpus_tokens = sum(len(ids) for b in tokenized.iter(batch_size=MAP_BATCH) for ids in b["input_ids"])
    say(f"grouping {corpus_tokens} tokens into blocks of {seq}")
    grouped = tokenized.map(group_texts, batched=True, batch_size=MAP_BATCH,
                            cache_file_name=str(work / "grouped.arrow"), desc=f"group into blocks of {seq}")
    grouping.end()
    if len(grouped) == 0:
        raise DataError(
            f"the corpus gives {corpus_tokens} tokens, not one block of max_seq_length {seq}; "
            "add text or lower max_seq_length"
        )

    # 4. save
    say(f"saving {len(grouped)} blocks")
    grouped.save_to_disk(str(stage / "dataset"))
    del raw, tokenized, grouped
    shutil.rmtree(work)
    return {
        "trained": trained,
        "tokenizer": tokenizer,
        "eos_appended": eos is not None,
        "corpus_tokens": corpus_tokens,
        "documents": n_docs,
    }


_READING: list[Progress] = []  # the reading step's Progress, for _doc_rows (datasets passes only picklable kwargs)


def _doc_rows(source):
    for text in corpus.documents(source):
        if _READING:
            _READING[0].add(1)
        yield {"text": text}


def _say_batches(job: dict, meta: dict, world_size: int) -> None:
    line, _warn = batch_report(
        blocks=meta["blocks"], documents=meta.get("source", {}).get("documents", 0),
        corpus_tokens=meta.get("corpus_tokens", meta["blocks"] * meta["block_length"]),
        block_length=meta["block_length"], micro=job["per_device_train_batch_size"],
        accum=job["gradient_accumulation_steps"], world_size=world_size, max_steps=job["max_steps"])
    say(line)


def prepare(job_path: str, out: Path, force: bool = False, world_size: int = 1, rehash: bool = False) -> int:
    """Build (or find up to date) the artifact of the job file ``job_path`` at ``out``; returns 0 after printing
    MANIFEST_LINE for its MANIFEST (the last line on stdout).

    ``world_size`` (ranks, >= 1) only sizes the global batch in the corpus-size report (batch_report); it is not
    part of the artifact. The source's fingerprint is reused from the last run when its files kept their names,
    sizes and mtimes (corpus.cached_fingerprint), and the artifact is not hashed again when unchanged since it last
    verified (artifact.verify quick); ``rehash`` hashes both anyway.

    Raises:
        JobError: the job file is missing, unreadable or invalid (train.common.job.load_job).
        DataError: a problem with the data the user can fix (missing, empty, not UTF-8, too short, a missing text
            column, a hub data set that cannot be loaded, ...).
    """
    job = load_job(job_path)
    settings = data_settings(job)
    source = corpus.open_source(settings["dataset_path"], settings["text_column"])
    if source.kind != "hub":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing else here downloads; make sure nothing tries
    stamp = out.parent / f".{out.name}.source.json"  # beside the artifact, on the head's local disk
    fp = None if rehash or force else corpus.cached_fingerprint(source, stamp)
    hashed_at = None  # set when hashed now: recorded in the stamp once the artifact is up to date or built
    if fp is None:
        say(f"fingerprinting {source.description}")
        hashed_at = time.time_ns()
        fp = corpus.fingerprint(source)
    else:
        say(f"{source.description}: unchanged since fingerprinted (file names, sizes, mtimes; {stamp.name})")
    recorded = _fingerprint_settings(settings, source)
    if not force:
        fresh, why = up_to_date(out, recorded, fp, rehash=rehash)
        if fresh:
            _say_batches(job, json.loads((out / "prepare.json").read_text(encoding="utf-8")), world_size)
            say(f"{out} is up to date ({why}; same data settings and source); nothing to do")
            if hashed_at is not None:
                corpus.record_fingerprint(source, stamp, fp, hashed_at)
            print(manifest_line(artifact.manifest_path(out)), flush=True)
            return 0
        say(f"building {out}: {why}")
    stage = artifact.staging_dir(out)
    try:
        t0 = time.monotonic()
        info = build(settings, source, fp, stage)
        import datasets
        import tokenizers
        import transformers

        ds = datasets.load_from_disk(str(stage / "dataset"))
        blocks = len(ds)
        tok = info["tokenizer"]
        meta = {
            "format_version": DATA_FORMAT_VERSION,
            "settings": recorded,
            "source": {**source.to_json(fp), "documents": info["documents"]},
            "task": settings["task"],
            "blocks": blocks,
            "block_length": settings["max_seq_length"],
            "tokens": blocks * settings["max_seq_length"],
            "corpus_tokens": info["corpus_tokens"],
            "vocab_size": len(tok),
            "vocab_size_requested": settings["tokenizer"]["vocab_size"],
            "columns": ds.column_names,
            "tokenizer": {
                "trained": info["trained"],
                "kind": settings["tokenizer"]["kind"],
                "class": type(tok).__name__,
                "special_tokens": {k: str(v) for k, v in tok.special_tokens_map.items()},
                "pad_token_id": tok.pad_token_id,
                "eos_appended_per_document": info["eos_appended"],
            },
            "versions": {
                "python": sys.version.split()[0],
                "datasets": datasets.__version__,
                "tokenizers": tokenizers.__version__,
                "transformers": transformers.__version__,
            },
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "elapsed_s": round(time.monotonic() - t0, 2),
        }
        del ds
        with open(stage / "prepare.json", "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.write("\n")
        artifact.write_manifest(stage)
        artifact.publish(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if hashed_at is not None:
        corpus.record_fingerprint(source, stamp, fp, hashed_at)
    _say_batches(job, meta, world_size)
    say(f"built {out}: {blocks} blocks x {settings['max_seq_length']} tokens = {meta['tokens']} tokens, "
        f"vocab {meta['vocab_size']}" + (f" of {meta['vocab_size_requested']} asked" if meta['vocab_size_requested']
                                         else ""))
    print(manifest_line(artifact.manifest_path(out)), flush=True)
    return 0


# ------------------------------------------------------------------------------------------------------------ CLI
class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default prints the usage block too)
        print(f"error: {message}; see `python -m train.data.prepare_data --help`", file=sys.stderr)
        sys.exit(2)


def seal(root: Path, rehash: bool = False, beside: bool = False) -> int:
    """Give the directory ``root`` a MANIFEST of its files (artifact.write_manifest; with ``beside`` the file
    ``<root>.MANIFEST`` next to it, artifact.manifest_path), unless the one it has verifies
    (artifact.verify, quick unless ``rehash``), then verify it so that the verified stamp is written (the next
    check of an unchanged directory hashes nothing). Prints ``kept: ...`` or ``written: ...`` then MANIFEST_LINE on
    stdout, or one ``FAILED: ...`` line on stderr. Returns 0, or 1 when ``root`` is not a directory, a file can't be read, or the
    MANIFEST there is not one this module wrote (a user's own file of that name is never overwritten)."""
    if not root.is_dir():
        print(f"FAILED: {root}: not a directory; give the directory to seal", file=sys.stderr)
        return 1
    manifest = artifact.manifest_path(root, beside)
    ok, why = artifact.verify(root, quick=not rehash, manifest=manifest)
    if ok:
        print(f"kept: {manifest}: {why}")
        print(manifest_line(manifest))
        return 0
    if why.endswith("is malformed"):
        print(f"FAILED: {manifest} is not a MANIFEST this tool wrote ({why}), so it is not overwritten: if it is "
              f"your own file, seal with --beside (the MANIFEST then goes to {artifact.manifest_path(root, True)}), "
              "else remove it and seal again", file=sys.stderr)
        return 1
    try:
        artifact.write_manifest(root, manifest)
        ok, checked = artifact.verify(root, manifest=manifest)
    except OSError as e:
        print(f"FAILED: {root}: {e}", file=sys.stderr)
        return 1
    if not ok:  # a file changed while it was hashed: the caller's copy is not settled
        print(f"FAILED: {root}: {checked} right after writing the MANIFEST (a file changed meanwhile?)", file=sys.stderr)
        return 1
    print(f"written: {manifest} ({checked}; was: {why})")
    print(manifest_line(manifest))
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see the module docstring); returns the exit status 0, 1 (verify failed) or 2 (bad input,
    one ``error:`` line on stderr)."""
    p = _Parser(prog="python -m train.data.prepare_data", description=__doc__.split("\n\n")[0])
    p.add_argument("--job", help="resolved job (JSON, from `python -m train.controller.resolve resolve`)")
    p.add_argument("--out", help="artifact directory to create or refresh")
    p.add_argument("--force", action="store_true", help="rebuild even when the artifact is up to date")
    p.add_argument("--verify", metavar="ARTIFACT",
                   help="only check ARTIFACT against its MANIFEST (exit 0 or 1); files unchanged (name, size, mtime) "
                        "since its last passed check are not hashed again unless --rehash")
    p.add_argument("--manifest", metavar="DIR",
                   help="give DIR a MANIFEST of its files (the checkpoint a run resumes from, on the head, before it "
                        "is staged onto the workers): kept when DIR verifies against the MANIFEST it has, written "
                        "anew otherwise (exit 0, or 1 when DIR is not a directory or can't be read)")
    p.add_argument("--beside", action="store_true",
                   help="with --manifest/--verify: the MANIFEST is the file DIR.MANIFEST beside DIR, not DIR/MANIFEST "
                        "(a directory that must hold only its own files: a user script's data)")
    p.add_argument("--rehash", action="store_true",
                   help="hash the source and the artifact even where no file changed (name, size, mtime) since they "
                        "were last hashed")
    p.add_argument("--world-size", type=int, default=1, metavar="N",
                   help="ranks the job runs on (default 1): sizes the global batch in the corpus-size warning")
    p.add_argument("--progress-file", metavar="F",
                   help="also append every progress line to F as it is printed (train.yml follows it)")
    args = p.parse_args(argv)
    global _PROGRESS_FILE
    _PROGRESS_FILE = args.progress_file
    if _PROGRESS_FILE:
        Path(_PROGRESS_FILE).write_text("", encoding="utf-8")  # this run's lines only
    if args.world_size < 1:
        p.error(f"--world-size must be at least 1, got {args.world_size}")
    if args.verify:
        if args.job or args.out or args.manifest:
            p.error("--verify takes no --job/--out/--manifest")
        ok, why = artifact.verify(Path(args.verify), quick=not args.rehash,
                                  manifest=artifact.manifest_path(Path(args.verify), args.beside))
        print(f"{'ok' if ok else 'FAILED'}: {args.verify}: {why}", file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    if args.beside and not (args.manifest or args.verify):
        p.error("--beside goes with --manifest DIR or --verify DIR")
    if args.manifest:
        if args.job or args.out:
            p.error("--manifest takes no --job/--out")
        return seal(Path(args.manifest), rehash=args.rehash, beside=args.beside)
    if not args.job or not args.out:
        p.error("--job and --out are both required (or --verify ARTIFACT, or --manifest DIR)")
    try:
        return cli.run(lambda: prepare(args.job, Path(args.out).resolve(), force=args.force,
                                       world_size=args.world_size, rehash=args.rehash), DataError, JobError)
    except KeyboardInterrupt:
        print("error: interrupted; nothing was written, run the command again", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""train/data/prepare_data.py: raw text -> tokenizer + grouped Arrow blocks + prepare.json + MANIFEST, atomically.

Real corpora (the stdlib's pydoc topics), real tokenizer training, real save_to_disk / load_from_disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from .conftest import SEQ, one_line_error, prepare_or_fail, run_prepare, write_job

pytestmark = pytest.mark.torch  # test tiers: pytest.ini




def _pydoc_paragraphs(n: int) -> list[str]:
    from pydoc_data.topics import topics

    paras = [" ".join(p.split()) for t in sorted(topics) for p in topics[t].split("\n\n") if p.strip()]
    return paras[:n]


# ----------------------------------------------------------------------------------------------------- sources
def test_default_corpus_is_pydoc_topics(bert_artifact):
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    meta = json.loads((bert_artifact / "prepare.json").read_text())
    assert meta["source"]["kind"] == "pydoc_topics" and meta["source"]["documents"] > 1000
    assert len(meta["source"]["fingerprint"]) == 64
    ds = load_from_disk(str(bert_artifact / "dataset"))
    assert len(ds) == meta["blocks"] > 1000
    assert meta["tokens"] == meta["blocks"] * SEQ
    assert meta["corpus_tokens"] >= meta["tokens"]
    assert set(ds.column_names) == {"input_ids", "attention_mask", "special_tokens_mask"}
    assert {len(r) for r in ds[:50]["input_ids"]} == {SEQ}
    tok = AutoTokenizer.from_pretrained(str(bert_artifact / "tokenizer"))
    assert meta["vocab_size"] == len(tok) <= 2000
    text = tok.decode(ds[0]["input_ids"])
    assert text.startswith("[CLS]") and "[SEP]" in text  # documents are [CLS] ... [SEP], then concatenated
    # real English from the docs, lower-cased by BERT's normaliser
    assert "statement" in tok.decode([i for r in ds[:200]["input_ids"] for i in r])
    layout = sorted(p.name for p in bert_artifact.iterdir())
    assert layout == ["MANIFEST", "dataset", "prepare.json", "tokenizer"]
    assert not [p for p in bert_artifact.parent.iterdir() if p.name.startswith(".artifact")], "temp dir left over"


def test_text_directory_source(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    paras = _pydoc_paragraphs(400)
    (corpus / "a.txt").write_text("\n\n".join(paras[:200]), encoding="utf-8")
    (corpus / "sub" / "b.txt").write_text("\n\n".join(paras[200:]), encoding="utf-8")
    (corpus / "ignored.md").write_text("not a .txt file " * 1000, encoding="utf-8")
    job = write_job(tmp_path / "job.json", dataset_path=str(corpus), vocab_size=600, max_seq_length=32)
    prepare_or_fail(job, tmp_path / "art")
    meta = json.loads((tmp_path / "art" / "prepare.json").read_text())
    assert meta["source"]["kind"] == "text_dir" and meta["source"]["path"] == str(corpus)
    assert meta["source"]["documents"] == 400
    assert meta["blocks"] > 100 and meta["tokens"] == meta["blocks"] * 32


def test_an_unchanged_source_is_not_hashed_again_and_a_changed_one_rebuilds(tmp_path):
    """The source's fingerprint is reused while its files keep their names, sizes and mtimes (the second run says
    so and does not say "fingerprinting"); a file appended to rebuilds; a same-size edit with its mtime put back is
    found by --rehash (rebuilt: source data changed)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    paras = _pydoc_paragraphs(300)
    (corpus / "a.txt").write_text("\n\n".join(paras[:150]), encoding="utf-8")
    (corpus / "b.txt").write_text("\n\n".join(paras[150:]), encoding="utf-8")
    old = time.time() - 60
    for f in corpus.iterdir():
        os.utime(f, (old, old))
    job = write_job(tmp_path / "job.json", dataset_path=str(corpus), vocab_size=600, max_seq_length=32)
    art = tmp_path / "art"
    first = prepare_or_fail(job, art)
    assert "fingerprinting" in first.stdout and (tmp_path / ".art.source.json").is_file(), first.stdout
    again = prepare_or_fail(job, art)
    assert "fingerprinting" not in again.stdout and "unchanged since fingerprinted" in again.stdout, again.stdout
    assert "is up to date" in again.stdout
    # built or found up to date, the last line is the MANIFEST's sha256 (roles/train_stage's head_manifest)
    digest = hashlib.sha256((art / "MANIFEST").read_bytes()).hexdigest()
    for res in (first, again):
        assert res.stdout.splitlines()[-1] == f"MANIFEST sha256 {digest} {art}/MANIFEST", res.stdout

    b = corpus / "b.txt"
    st = b.stat()
    a = corpus / "a.txt"
    with open(a, "a", encoding="utf-8") as f:  # longer, the old mtime put back: the size alone gives it away
        f.write("\n\nAnother paragraph at the end of the first file of the corpus.")
    os.utime(a, (old, old))
    assert "source data changed" in prepare_or_fail(job, art).stdout
    text = b.read_text(encoding="utf-8")
    b.write_text(text.replace("the", "THE", 1), encoding="utf-8")  # same size
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "is up to date" in prepare_or_fail(job, art).stdout  # the quick check cannot see it
    found = run_prepare("--job", job, "--out", art, "--rehash")
    assert found.returncode == 0 and "fingerprinting" in found.stdout and "source data changed" in found.stdout, \
        found.stdout

    with open(b, "a", encoding="utf-8") as f:
        f.write("\n\nOne more paragraph of text at the end of the corpus.")
    grown = prepare_or_fail(job, art)
    assert "fingerprinting" in grown.stdout and "source data changed" in grown.stdout, grown.stdout


def test_text_file_and_saved_dataset_sources_give_the_same_blocks(tmp_path):
    from datasets import Dataset, DatasetDict, load_from_disk
    from transformers import AutoTokenizer

    paras = _pydoc_paragraphs(300)
    (tmp_path / "corpus.txt").write_text("\n\n".join(paras) + "\n", encoding="utf-8")
    saved = tmp_path / "saved"
    DatasetDict({"train": Dataset.from_dict({"body": paras, "id": list(range(len(paras)))})}).save_to_disk(str(saved))

    prepare_or_fail(write_job(tmp_path / "j1.json", dataset_path=str(tmp_path / "corpus.txt"), vocab_size=600),
                    tmp_path / "from_file")
    prepare_or_fail(write_job(tmp_path / "j2.json", dataset_path=str(saved), text_column="body", vocab_size=600),
                    tmp_path / "from_saved")
    m1 = json.loads((tmp_path / "from_file" / "prepare.json").read_text())
    m2 = json.loads((tmp_path / "from_saved" / "prepare.json").read_text())
    assert (m1["source"]["kind"], m2["source"]["kind"]) == ("text_file", "saved_dataset")
    assert m2["source"]["text_column"] == "body"
    # same documents -> the same blocks of text, whichever way they were stored (token ids may differ: the
    # tokenizers trainers break frequency ties in hash order, which changes from process to process)
    assert m1["blocks"] == m2["blocks"] > 0
    texts = []
    for name in ("from_file", "from_saved"):
        tok = AutoTokenizer.from_pretrained(str(tmp_path / name / "tokenizer"))
        texts.append(tok.batch_decode(load_from_disk(str(tmp_path / name / "dataset"))[:]["input_ids"]))
    assert texts[0] == texts[1]
    assert not list(saved.rglob("cache-*")), "prepare must not write cache files into the user's dataset"

    proc = run_prepare("--job", write_job(tmp_path / "j3.json", dataset_path=str(saved), text_column="nope"),
                       "--out", tmp_path / "bad")
    one_line_error(proc, "'nope'", "text_column")
    assert not (tmp_path / "bad").exists()


# ------------------------------------------------------------------------------------------ manifest, up to date
def test_verify_detects_a_changed_file(bert_artifact, tmp_path):
    assert run_prepare("--verify", bert_artifact).returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(bert_artifact, copy)
    assert run_prepare("--verify", copy).returncode == 0
    lines = (copy / "MANIFEST").read_text().splitlines()
    assert len(lines) >= 6 and lines == sorted(lines, key=lambda ln: ln.split("  ", 1)[1])
    assert {ln.split("  ", 1)[1] for ln in lines} >= {"prepare.json", "tokenizer/tokenizer.json",
                                                     "dataset/state.json"}
    arrow = next((copy / "dataset").glob("*.arrow"))
    data = bytearray(arrow.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit
    arrow.write_bytes(bytes(data))
    proc = run_prepare("--verify", copy)
    assert proc.returncode == 1 and "sha256 mismatch" in proc.stderr and arrow.name in proc.stderr
    # an extra file is caught too
    shutil.copy(bert_artifact / "dataset" / arrow.name, arrow)
    assert run_prepare("--verify", copy).returncode == 0
    (copy / "tokenizer" / "stray.txt").write_text("x")
    proc = run_prepare("--verify", copy)
    assert proc.returncode == 1 and "not in MANIFEST" in proc.stderr


def test_a_verified_artifact_is_not_hashed_again_until_a_file_changes(bert_artifact, tmp_path):
    """train/data/artifact.py's stamp: once verified, an artifact whose files keep their sizes and mtimes passes
    --verify without hashing (the reason says so); a file touched since is hashed again; a bit flipped with its
    mtime put back (what the quick check cannot see) is caught by --rehash, and that failure drops the stamp."""
    from train.data import artifact

    copy = tmp_path / "copy"
    shutil.copytree(bert_artifact, copy)
    old = time.time() - 60  # data written a minute ago (one written within 2 s of a verification is always hashed)
    for f in copy.rglob("*"):
        os.utime(f, (old, old))
    stamp = artifact.stamp_path(copy)
    assert stamp == tmp_path / ".copy.verified.json" and not stamp.exists()
    first = run_prepare("--verify", copy)
    assert first.returncode == 0 and "files verified" in first.stdout and stamp.is_file(), first.stdout
    again = run_prepare("--verify", copy)
    assert again.returncode == 0 and "files unchanged since verified" in again.stdout, again.stdout
    assert "files verified" in run_prepare("--verify", copy, "--rehash").stdout

    arrow = next((copy / "dataset").glob("*.arrow"))
    st = arrow.stat()
    with open(arrow, "ab") as f:  # one byte more, the old mtime put back: the size alone gives it away
        f.write(b"x")
    os.utime(arrow, ns=(st.st_atime_ns, st.st_mtime_ns))
    grown = run_prepare("--verify", copy)
    assert grown.returncode == 1 and "sha256 mismatch" in grown.stderr, grown.stdout + grown.stderr
    shutil.copy2(bert_artifact / "dataset" / arrow.name, arrow)
    os.utime(arrow, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "files verified" in run_prepare("--verify", copy).stdout
    data = bytearray(arrow.read_bytes())
    data[len(data) // 2] ^= 0x01
    arrow.write_bytes(bytes(data))
    os.utime(arrow, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime: the quick check is blind
    assert "files unchanged since verified" in run_prepare("--verify", copy).stdout
    caught = run_prepare("--verify", copy, "--rehash")
    assert caught.returncode == 1 and "sha256 mismatch" in caught.stderr and not stamp.exists(), caught.stderr
    assert run_prepare("--verify", copy).returncode == 1  # no stamp: hashed, still wrong

    shutil.copy2(bert_artifact / "dataset" / arrow.name, arrow)  # repaired
    soon = time.time() + 3600  # a file whose mtime is not 2 s older than a verification's start is hashed again
    os.utime(copy / "prepare.json", (soon, soon))
    for _ in range(2):
        proc = run_prepare("--verify", copy)
        assert proc.returncode == 0 and "files verified" in proc.stdout, proc.stdout


def test_second_prepare_is_a_noop_and_changes_rebuild(tmp_path):
    paras = _pydoc_paragraphs(300)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(paras), encoding="utf-8")
    job = write_job(tmp_path / "job.json", dataset_path=str(corpus), vocab_size=600, max_seq_length=32)
    out = tmp_path / "art"
    prepare_or_fail(job, out)
    stamp = {p: p.stat().st_mtime_ns for p in out.rglob("*")}

    proc = prepare_or_fail(job, out)
    assert "up to date" in proc.stdout.strip().splitlines()[-2]  # the last progress line; then MANIFEST_LINE
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == stamp, "a no-op must not touch the artifact"

    # a different data setting rebuilds (the old artifact is replaced whole)
    job2 = write_job(tmp_path / "job2.json", dataset_path=str(corpus), vocab_size=600, max_seq_length=16)
    proc = prepare_or_fail(job2, out)
    assert "up to date" not in proc.stdout and json.loads((out / "prepare.json").read_text())["block_length"] == 16
    # so does a change in the source text
    corpus.write_text("\n\n".join(paras[:200]), encoding="utf-8")
    proc = prepare_or_fail(job2, out)
    assert "source data changed" in proc.stdout
    # and a damaged artifact
    (out / "prepare.json").write_text("{}")
    proc = prepare_or_fail(job2, out)
    assert "invalid" in proc.stdout and run_prepare("--verify", out).returncode == 0
    # no staging directory or temporary file is left; only the two stamps (artifact verified, source fingerprinted)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [".art.source.json",
                                                                                     ".art.verified.json"]


# ------------------------------------------------------------------------------------------------- tokenizers
@pytest.mark.parametrize("kind,task", [("wordpiece", "mlm"), ("byte_bpe", "mlm"), ("byte_bpe", "clm")])
def test_tokenizers_reload_and_round_trip(kind, task, tmp_path, bert_artifact, gpt2_artifact):
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    if kind == "wordpiece":
        art = bert_artifact
    elif task == "clm":
        art = gpt2_artifact
    else:
        corpus = tmp_path / "c.txt"
        corpus.write_text("\n\n".join(_pydoc_paragraphs(600)), encoding="utf-8")
        art = tmp_path / "art"
        prepare_or_fail(write_job(tmp_path / "j.json", model_type="roberta", tokenizer_type="byte_bpe",
                                  vocab_size=800, lowercase=False, dataset_path=str(corpus)), art)
    tok = AutoTokenizer.from_pretrained(str(art / "tokenizer"))
    assert tok.is_fast and tok.pad_token_id is not None
    text = "The if statement is used for conditional execution."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if kind == "wordpiece":
        assert tok.decode(ids) == text.lower()  # lowercase=True in the shared job
        assert tok.mask_token == "[MASK]" and tok.cls_token == "[CLS]" and tok.sep_token == "[SEP]"
        full = tok(text)["input_ids"]
        assert full[0] == tok.cls_token_id and full[-1] == tok.sep_token_id
    else:
        assert tok.decode(ids) == text  # byte-level BPE is lossless
        odd = "naïve café — ünïcødé"
        assert tok.decode(tok(odd)["input_ids"], skip_special_tokens=True) == odd
        if task == "mlm":  # RoBERTa: <s> ... </s>, <mask>
            full = tok(text)["input_ids"]
            assert (tok.convert_ids_to_tokens(full[0]), tok.convert_ids_to_tokens(full[-1])) == ("<s>", "</s>")
            assert tok.mask_token == "<mask>"
        else:  # GPT-2: no specials added; an <|endoftext|> ends every document in the blocks
            assert tok(text)["input_ids"] == ids and tok.eos_token == "<|endoftext|>"
            assert tok.pad_token == "<pad>" and tok.pad_token_id != tok.eos_token_id
            blocks = load_from_disk(str(art / "dataset"))[:100]["input_ids"]
            assert sum(r.count(tok.eos_token_id) for r in blocks) > 10
            assert json.loads((art / "prepare.json").read_text())["tokenizer"]["eos_appended_per_document"]
    # the saved tokenizer in a tokenizer_path dir is reused as is (no training)
    job = write_job(tmp_path / "reuse.json", tokenizer_path=str(art / "tokenizer"),
                    task=task, tokenizer_type=kind, dataset_path=str(_write_small_corpus(tmp_path)))
    prepare_or_fail(job, tmp_path / "reused")
    meta = json.loads((tmp_path / "reused" / "prepare.json").read_text())
    assert meta["tokenizer"]["trained"] is False and meta["vocab_size"] == len(tok)
    assert (tmp_path / "reused" / "tokenizer" / "tokenizer.json").read_text() == \
        (art / "tokenizer" / "tokenizer.json").read_text()


def test_vocabulary_reached_is_printed_recorded_and_warned_about(tmp_path):
    """A small corpus cannot fill vocab_size 30522 (the blog's BERT): prepare says so, records both sizes."""
    from transformers import AutoTokenizer

    job = write_job(tmp_path / "job.json", dataset_path=str(_write_small_corpus(tmp_path)), vocab_size=30522)
    proc = prepare_or_fail(job, tmp_path / "art")
    meta = json.loads((tmp_path / "art" / "prepare.json").read_text())
    reached = len(AutoTokenizer.from_pretrained(str(tmp_path / "art" / "tokenizer")))
    assert meta["vocab_size"] == reached < 0.9 * 30522 and meta["vocab_size_requested"] == 30522
    warnings = [ln for ln in proc.stdout.splitlines() if "warning:" in ln and "tokenizer" in ln]
    assert len(warnings) == 1, proc.stdout
    assert f"only {reached} of the 30522" in warnings[0] and "vocab_size" in warnings[0]


def test_vocab_report_warns_below_ninety_percent():
    from train.data.prepare_data import vocab_report

    assert vocab_report(2000, 2000) == ("vocabulary: 2000 tokens reached of vocab_size 2000 asked (100%)", False)
    assert vocab_report(1850, 2000)[1] is False
    line, warn = vocab_report(5600, 30522)
    assert warn and line.startswith("warning:") and "5600" in line and "30522" in line and "18%" in line
    assert vocab_report(1234, None) == ("vocabulary: 1234 tokens (the given tokenizer's)", False)


def test_a_corpus_smaller_than_the_job_is_warned_about(tmp_path):
    """A few blocks against a global batch of micro x accum x world size get a warning line saying how much
    text there is and how much a step takes -- when built, and again when up to date (the world size may change)."""
    from .conftest import job_dict

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(_pydoc_paragraphs(30)), encoding="utf-8")
    job = write_job(tmp_path / "job.json", dataset_path=str(corpus), vocab_size=600, max_seq_length=32)
    micro, accum, steps = (job_dict(vocab_size=600)[k] for k in
                           ("per_device_train_batch_size", "gradient_accumulation_steps", "max_steps"))
    out = tmp_path / "art"
    proc = run_prepare("--job", job, "--out", out, "--world-size", "64")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    meta = json.loads((out / "prepare.json").read_text())
    blocks, docs, tokens = meta["blocks"], meta["source"]["documents"], meta["corpus_tokens"]
    glob = micro * accum * 64
    assert 0 < blocks < glob, (blocks, glob)
    warn = [ln.split("] ", 1)[1] for ln in proc.stdout.splitlines() if "warning:" in ln and "global batch" in ln]
    assert len(warn) == 1, proc.stdout
    assert warn[0].startswith("warning: the corpus is smaller than one global batch: ")
    assert f"{docs} documents, {tokens} tokens -> {blocks} blocks of 32 tokens" in warn[0]
    assert f"a global batch of {glob} blocks (micro {micro} x accumulation {accum} x world size 64)" in warn[0]
    assert f"max_steps {steps} goes over the same text {steps * glob / blocks:.1f} times" in warn[0]
    assert "-e dataset_path=" in warn[0]

    # up to date, one rank: enough for a batch, not for 10 steps an epoch
    assert blocks >= micro * accum and blocks < 10 * micro * accum, blocks
    proc = run_prepare("--job", job, "--out", out)
    assert proc.returncode == 0 and "up to date" in proc.stdout.splitlines()[-2], proc.stdout
    warn = [ln.split("] ", 1)[1] for ln in proc.stdout.splitlines() if "warning:" in ln]
    assert len(warn) == 1, proc.stdout
    assert warn[0].startswith(f"warning: the corpus makes only {blocks / (micro * accum):.1f} optimizer steps per "
                              f"epoch (fewer than 10): {docs} documents, {tokens} tokens -> {blocks} blocks"), warn[0]
    assert f"(micro {micro} x accumulation {accum} x world size 1)" in warn[0]


def test_no_corpus_size_warning_for_enough_data(bert_artifact, tmp_path):
    job = write_job(tmp_path / "job.json")  # the one bert_artifact was built from
    proc = run_prepare("--job", job, "--out", bert_artifact, "--world-size", "2")
    assert proc.returncode == 0 and "up to date" in proc.stdout, proc.stdout + proc.stderr
    assert "warning:" not in proc.stdout, proc.stdout
    assert [ln for ln in proc.stdout.splitlines() if "] batches: " in ln and "world size 2)" in ln], proc.stdout


def test_batch_report_thresholds():
    from train.data.prepare_data import MIN_STEPS_PER_EPOCH, batch_report

    common = dict(documents=1, corpus_tokens=500, block_length=64, max_steps=60)
    line, warn = batch_report(blocks=7, micro=8, accum=1, world_size=2, **common)
    assert warn and line == (
        "warning: the corpus is smaller than one global batch: 1 document, 500 tokens -> 7 blocks of 64 tokens, but "
        "one optimizer step takes a global batch of 16 blocks (micro 8 x accumulation 1 x world size 2); max_steps "
        "60 goes over the same text 137.1 times. Give more text (-e dataset_path=...), or lower "
        "per_device_train_batch_size / gradient_accumulation_steps / max_steps")
    line, warn = batch_report(blocks=100, micro=4, accum=2, world_size=2, **common)  # global 16: 6.25 steps/epoch
    assert warn and line.startswith("warning: the corpus makes only 6.2 optimizer steps per epoch (fewer than 10)")
    assert "global batch of 16 blocks (micro 4 x accumulation 2 x world size 2)" in line
    assert batch_report(blocks=16 * MIN_STEPS_PER_EPOCH, micro=4, accum=2, world_size=2, **common)[1] is False
    assert batch_report(blocks=16 * MIN_STEPS_PER_EPOCH - 1, micro=4, accum=2, world_size=2, **common)[1] is True
    line, warn = batch_report(blocks=1600, micro=4, accum=2, world_size=2, **common)
    assert not warn and line == ("batches: 1600 blocks = 100.0 optimizer steps per epoch at a global batch of 16 "
                                 "(micro 4 x accumulation 2 x world size 2); max_steps 60 = 0.60 epochs")


def _write_small_corpus(tmp_path: Path) -> Path:
    p = tmp_path / "small.txt"
    p.write_text("\n\n".join(_pydoc_paragraphs(80)), encoding="utf-8")
    return p


# ------------------------------------------------------------------------------------------------- bad input
def test_bad_input_exits_2_with_one_line(tmp_path):
    missing = tmp_path / "nowhere"
    proc = run_prepare("--job", write_job(tmp_path / "j1.json", dataset_path=str(missing)), "--out", tmp_path / "o")
    one_line_error(proc, str(missing), "does not exist")

    empty = tmp_path / "empty.txt"
    empty.write_text("\n   \n\n", encoding="utf-8")
    proc = run_prepare("--job", write_job(tmp_path / "j2.json", dataset_path=str(empty)), "--out", tmp_path / "o")
    one_line_error(proc, "no text")

    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"hello\n\xff\xfe\x00 world\n")
    proc = run_prepare("--job", write_job(tmp_path / "j3.json", dataset_path=str(binary)), "--out", tmp_path / "o")
    one_line_error(proc, "not UTF-8")

    no_txt = tmp_path / "dir"
    no_txt.mkdir()
    (no_txt / "x.md").write_text("# notes\n")
    proc = run_prepare("--job", write_job(tmp_path / "j4.json", dataset_path=str(no_txt)), "--out", tmp_path / "o")
    one_line_error(proc, "no .txt, .parquet, .jsonl, .json or .csv files")

    if os.geteuid() != 0:  # root reads anything; the permission check only bites for other users
        locked = tmp_path / "locked.txt"
        locked.write_text("text")
        locked.chmod(0)
        proc = run_prepare("--job", write_job(tmp_path / "j5.json", dataset_path=str(locked)), "--out", tmp_path / "o")
        one_line_error(proc, "permission")

    short = tmp_path / "short.txt"
    short.write_text("just a few words\n", encoding="utf-8")
    proc = run_prepare("--job", write_job(tmp_path / "j6.json", dataset_path=str(short)), "--out", tmp_path / "o")
    one_line_error(proc, "max_seq_length")

    proc = run_prepare("--job", tmp_path / "missing.json", "--out", tmp_path / "o")
    one_line_error(proc, "missing.json")
    proc = run_prepare("--job", write_job(tmp_path / "j7.json", tokenizer_type="sentencepiece"),
                       "--out", tmp_path / "o")
    one_line_error(proc, "tokenizer_type")
    proc = run_prepare("--job", write_job(tmp_path / "j8.json", tokenizer_path="bert-base-uncased"),
                       "--out", tmp_path / "o")
    one_line_error(proc, "not a local directory")
    proc = run_prepare("--bogus")
    one_line_error(proc, "--bogus")
    proc = run_prepare("--job", tmp_path / "j7.json", "--out", tmp_path / "o", "--world-size", "0")
    one_line_error(proc, "--world-size must be at least 1, got 0")
    proc = run_prepare("--job", tmp_path / "j7.json", "--out", tmp_path / "o", "--world-size", "two")
    one_line_error(proc, "--world-size", "'two'")
    assert not (tmp_path / "o").exists(), "nothing is published on failure"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.")], "temp dirs are cleaned up"



@pytest.mark.skipif(not (Path(__file__).resolve().parents[1] / "job.py").is_file(), reason="train/common/job.py absent")
def test_reads_the_job_train_job_writes(tmp_path):
    """The real job file (train.controller.resolve resolve, flat keys): roberta -> byte-level BPE with RoBERTa's specials."""
    import subprocess
    import sys

    from transformers import AutoTokenizer

    from .conftest import REPO

    overrides = {"model_size": "tiny", "accelerator": "cpu", "vocab_size": 1000, "max_seq_length": 64}
    subprocess.run([sys.executable, "-m", "train.common.job", "resolve", "--model", "roberta", "--overrides",
                    json.dumps(overrides), "--out", str(tmp_path / "job.json")], cwd=REPO, check=True)
    prepare_or_fail(tmp_path / "job.json", tmp_path / "art")
    meta = json.loads((tmp_path / "art" / "prepare.json").read_text())
    assert meta["settings"]["tokenizer"] == {"kind": "bpe", "name_or_path": None, "vocab_size": 1000,
                                             "lowercase": False}
    assert meta["block_length"] == 64 and meta["task"] == "mlm"
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "art" / "tokenizer"))
    assert (tok.cls_token, tok.sep_token, tok.mask_token, tok.pad_token) == ("<s>", "</s>", "<mask>", "<pad>")


def test_progress_lines_say_how_far_each_long_step_is_and_reach_the_progress_file(tmp_path):
    """--progress-file gets every line as it is printed (train.yml's follower relays them), and the long steps
    say how far they are: reading, training the tokenizer, tokenizing and grouping, each up to its total."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(_pydoc_paragraphs(2500)), encoding="utf-8")
    job = write_job(tmp_path / "job.json", dataset_path=str(corpus), vocab_size=600, max_seq_length=32)
    progress = tmp_path / "prepare.log"
    progress.write_text("an earlier attempt's line\n")
    proc = run_prepare("--job", str(job), "--out", str(tmp_path / "art"), "--progress-file", str(progress))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = progress.read_text().splitlines()
    assert lines == [ln for ln in proc.stdout.splitlines() if ln.startswith("prepare [")], (lines, proc.stdout)
    text = "\n".join(lines)
    for step in ("training the tokenizer on", "tokenizing", "grouping into blocks of 32"):
        assert f"{step}: 1000 of 2500 documents (40%)" in text, text  # the first batch, at once
        assert f"{step}: 2500 of 2500 documents (100%)" in text, text  # and the end
    assert "reading" in text and "read 2500 documents" in text
    assert "FAILED" not in text

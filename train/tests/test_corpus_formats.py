"""train/data/corpus.py's table and hub sources, through train/data/prepare_data.py: parquet / JSON Lines / CSV files (and
directories of them) read with datasets.load_dataset, ``hub:REPO[:CONFIG[:SPLIT]]`` names, their errors and their
fingerprints. Files are made by the tests; the hub is never reached (offline is forced where it would be)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import PYTHON, REPO, one_line_error, write_job

pytestmark = pytest.mark.torch  # test tiers: pytest.ini


def _paras(n: int) -> list[str]:
    from pydoc_data.topics import topics

    paras = [" ".join(p.split()) for t in sorted(topics) for p in topics[t].split("\n\n") if p.strip()]
    return paras[:n]


def _run(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, **(env or {}))
    return subprocess.run([PYTHON, "-m", "train.data.prepare_data", *map(str, args)], check=False, cwd=REPO, text=True,
                          capture_output=True, timeout=300, env=full)


def _ok(job: Path, out: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = _run("--job", job, "--out", out, env=env)
    assert proc.returncode == 0, f"prepare_data failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc




def _texts(art: Path) -> list[str]:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(art / "tokenizer"))
    return tok.batch_decode(load_from_disk(str(art / "dataset"))[:]["input_ids"])


def _write_tables(d: Path, paras: list[str]) -> dict[str, Path]:
    """The same rows (body, id) as parquet, JSON Lines, a JSON array and CSV files under d."""
    from datasets import Dataset

    d.mkdir(parents=True, exist_ok=True)
    ds = Dataset.from_dict({"id": list(range(len(paras))), "body": paras})
    paths = {"parquet": d / "c.parquet", "jsonl": d / "c.jsonl", "json": d / "c.json", "csv": d / "c.csv"}
    ds.to_parquet(str(paths["parquet"]))
    ds.to_json(str(paths["jsonl"]), lines=True)
    paths["json"].write_text(json.dumps([{"id": i, "body": p} for i, p in enumerate(paras)]), encoding="utf-8")
    ds.to_csv(str(paths["csv"]), index=False)
    return paths


# ------------------------------------------------------------------------------------------------ table sources
def test_parquet_jsonl_json_csv_give_the_blocks_a_text_file_gives(tmp_path):
    paras = _paras(300)
    (tmp_path / "corpus.txt").write_text("\n\n".join(paras) + "\n", encoding="utf-8")
    tables = _write_tables(tmp_path / "tables", paras)
    cache = tmp_path / "hf-datasets-cache"  # load_dataset must write into prepare's scratch dir, not the cache
    env = {"HF_DATASETS_CACHE": str(cache)}

    _ok(write_job(tmp_path / "txt.json", dataset_path=str(tmp_path / "corpus.txt"), vocab_size=600),
        tmp_path / "art-txt", env)
    want = _texts(tmp_path / "art-txt")
    assert want
    for name, path in tables.items():
        job = write_job(tmp_path / f"{name}.json", dataset_path=str(path), text_column="body", vocab_size=600)
        _ok(job, tmp_path / f"art-{name}", env)
        meta = json.loads((tmp_path / f"art-{name}" / "prepare.json").read_text())
        fmt = {"jsonl": "json"}.get(name, name)
        assert meta["source"]["kind"] == "table_file" and meta["source"]["format"] == fmt, meta["source"]
        assert meta["source"]["path"] == str(path) and meta["source"]["text_column"] == "body"
        assert meta["settings"]["text_column"] == "body"
        assert meta["source"]["documents"] == 300
        assert _texts(tmp_path / f"art-{name}") == want, name
    assert not cache.exists() or not list(cache.rglob("*.arrow")), "load_dataset wrote outside prepare's scratch"
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == ["c.csv", "c.json", "c.jsonl", "c.parquet"]


def test_directory_of_parquet_shards_reads_them_all_in_name_order(tmp_path):
    from datasets import Dataset

    paras = _paras(300)
    (tmp_path / "corpus.txt").write_text("\n\n".join(paras) + "\n", encoding="utf-8")
    shards = tmp_path / "shards"
    (shards / "sub").mkdir(parents=True)
    Dataset.from_dict({"text": paras[:150]}).to_parquet(str(shards / "a-00000.parquet"))
    Dataset.from_dict({"text": paras[150:]}).to_parquet(str(shards / "sub" / "b-00001.parquet"))
    (shards / "README.md").write_text("not data\n")
    _ok(write_job(tmp_path / "txt.json", dataset_path=str(tmp_path / "corpus.txt"), vocab_size=600),
        tmp_path / "art-txt")
    _ok(write_job(tmp_path / "dir.json", dataset_path=str(shards), vocab_size=600), tmp_path / "art-dir")
    meta = json.loads((tmp_path / "art-dir" / "prepare.json").read_text())
    assert (meta["source"]["kind"], meta["source"]["format"], meta["source"]["files"]) == ("table_dir", "parquet", 2)
    assert meta["source"]["documents"] == 300
    assert _texts(tmp_path / "art-dir") == _texts(tmp_path / "art-txt")


def test_a_changed_table_file_rebuilds_and_an_unchanged_one_does_not(tmp_path):
    from datasets import Dataset

    paras = _paras(300)
    shards = tmp_path / "shards"
    shards.mkdir()
    Dataset.from_dict({"text": paras[:150]}).to_json(str(shards / "a.jsonl"), lines=True)
    Dataset.from_dict({"text": paras[150:]}).to_json(str(shards / "b.jsonl"), lines=True)
    old = time.time() - 60  # written a minute ago (a file written within 2 s of its hashing is always re-hashed)
    for f in shards.iterdir():
        os.utime(f, (old, old))
    job = write_job(tmp_path / "job.json", dataset_path=str(shards), vocab_size=600)
    out = tmp_path / "art"
    _ok(job, out)
    assert "up to date" in _ok(job, out).stdout.strip().splitlines()[-2]
    # same size, same mtime, one character different: the quick check (names, sizes, mtimes) cannot see it, the
    # content hash of --rehash (train_stage_rehash_data) does
    b = shards / "b.jsonl"
    st = b.stat()
    data = b.read_text(encoding="utf-8")
    i = data.index("the")
    b.write_text(data[:i] + "THE" + data[i + 3:], encoding="utf-8")
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "up to date" in _ok(job, out).stdout.strip().splitlines()[-2]
    proc = _run("--job", job, "--out", out, "--rehash")
    assert proc.returncode == 0 and "source data changed" in proc.stdout, proc.stdout
    # an edit that changes the mtime (any editor, any copy) is found without it
    b.write_text(data, encoding="utf-8")
    proc = _ok(job, out)
    assert "source data changed" in proc.stdout, proc.stdout
    # a new shard rebuilds too
    Dataset.from_dict({"text": paras[:10]}).to_json(str(shards / "c.jsonl"), lines=True)
    proc = _ok(job, out)
    assert "source data changed" in proc.stdout
    assert json.loads((out / "prepare.json").read_text())["source"]["documents"] == 310
    # and so does another text_column
    Dataset.from_dict({"text": paras[:100], "other": paras[100:200]}).to_json(str(shards / "c.jsonl"), lines=True)
    for f in ("a.jsonl", "b.jsonl"):
        (shards / f).unlink()
    proc = _ok(write_job(tmp_path / "job2.json", dataset_path=str(shards), text_column="other", vocab_size=600), out)
    assert "up to date" not in proc.stdout
    assert json.loads((out / "prepare.json").read_text())["settings"]["text_column"] == "other"


def test_missing_text_column_names_the_columns_there_are(tmp_path):
    tables = _write_tables(tmp_path / "tables", _paras(20))
    for name in ("csv", "parquet", "jsonl"):
        job = write_job(tmp_path / f"{name}.json", dataset_path=str(tables[name]), vocab_size=600)  # text_column text
        proc = _run("--job", job, "--out", tmp_path / "out")
        line = one_line_error(proc, "text_column 'text'", str(tables[name]), "columns: ", "-e text_column=")
        assert "id" in line and "body" in line, line
    assert not (tmp_path / "out").exists()


def test_bad_table_files_and_mixed_directories_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": broken\n', encoding="utf-8")
    proc = _run("--job", write_job(tmp_path / "j1.json", dataset_path=str(bad)), "--out", tmp_path / "out")
    one_line_error(proc, "cannot read", str(bad), "json")

    notparquet = tmp_path / "x.parquet"
    notparquet.write_text("this is not parquet\n", encoding="utf-8")
    proc = _run("--job", write_job(tmp_path / "j2.json", dataset_path=str(notparquet)), "--out", tmp_path / "out")
    one_line_error(proc, "cannot read", "parquet")

    numbers = tmp_path / "numbers.csv"
    numbers.write_text("text,n\n1,2\n3,4\n", encoding="utf-8")
    proc = _run("--job", write_job(tmp_path / "j3.json", dataset_path=str(numbers)), "--out", tmp_path / "out")
    one_line_error(proc, "not text", "text_column")

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "a.txt").write_text("some text\n", encoding="utf-8")
    (mixed / "b.csv").write_text("text\nmore text\n", encoding="utf-8")
    proc = _run("--job", write_job(tmp_path / "j4.json", dataset_path=str(mixed)), "--out", tmp_path / "out")
    one_line_error(proc, "mixes file formats", "1 .csv", "1 .txt", str(mixed))
    assert not (tmp_path / "out").exists()


# -------------------------------------------------------------------------------------------------- hub sources
@pytest.mark.parametrize("spec,want", [
    ("hub:Salesforce/wikitext:wikitext-2-raw-v1", {"repo": "Salesforce/wikitext", "config": "wikitext-2-raw-v1",
                                                   "split": "train"}),
    ("hub:stas/openwebtext-10k", {"repo": "stas/openwebtext-10k", "config": None, "split": "train"}),
    ("hub:imdb::unsupervised", {"repo": "imdb", "config": None, "split": "unsupervised"}),
    ("hub:Salesforce/wikitext:wikitext-103-raw-v1:train[:10%]",
     {"repo": "Salesforce/wikitext", "config": "wikitext-103-raw-v1", "split": "train[:10%]"}),
])
def test_parse_hub_forms(spec, want):
    from train.data import corpus

    assert corpus.parse_hub(spec) == want
    src = corpus.open_source(spec)
    assert src.kind == "hub" and src.hub == want and src.reads_column
    assert src.path == f"hub:{want['repo']}:{want['config'] or ''}:{want['split']}"


@pytest.mark.parametrize("spec", ["hub:", "hub:/etc/passwd", "hub:a/b/c", "hub: :x"])
def test_malformed_hub_names_are_refused(spec):
    from train.data import corpus

    with pytest.raises(corpus.DataError, match=r"hub:REPO_ID\[:CONFIG\[:SPLIT\]\]"):
        corpus.open_source(spec)


@pytest.mark.parametrize("offline_var", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_hub_name_offline_is_one_line_naming_the_fix(tmp_path, offline_var):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env.update({offline_var: "1", "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_CACHE": str(tmp_path / "hf" / "ds")})
    job = write_job(tmp_path / "job.json", dataset_path="hub:Salesforce/wikitext:wikitext-2-raw-v1")
    proc = subprocess.run([PYTHON, "-m", "train.data.prepare_data", "--job", str(job), "--out", str(tmp_path / "out")],
                          check=False, cwd=REPO, text=True, capture_output=True, timeout=300, env=env)
    line = one_line_error(proc, f"{offline_var}=1", "Salesforce/wikitext", "hub:Salesforce/wikitext:wikitext-2-raw-v1",
                           "save_to_disk", "-e dataset_path=", "HF_HUB_OFFLINE and HF_DATASETS_OFFLINE")
    assert "load_dataset('Salesforce/wikitext', 'wikitext-2-raw-v1', split='train')" in line, line
    assert not (tmp_path / "out").exists()


def test_a_hub_that_does_not_resolve_fails_at_once_from_the_cache_naming_the_fix(tmp_path):
    """No offline variable set, but the hub's host name does not resolve (an air-gapped head): prepare_data looks in
    the datasets cache only (no retries: huggingface_hub's back-off alone is ~24 s) and says why and how to fix it."""
    from train.data import corpus

    assert "nosuch.invalid does not resolve here" in corpus.hub_unresolvable("https://nosuch.invalid")
    assert corpus.hub_unresolvable("http://localhost:1") is None
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env.update({"HF_ENDPOINT": "https://nosuch.invalid", "HF_HOME": str(tmp_path / "hf"),
                "HF_DATASETS_CACHE": str(tmp_path / "hf" / "ds")})
    job = write_job(tmp_path / "job.json", dataset_path="hub:Salesforce/wikitext:wikitext-2-raw-v1")
    proc = subprocess.run([PYTHON, "-m", "train.data.prepare_data", "--job", str(job), "--out", str(tmp_path / "out")],
                          check=False, cwd=REPO, text=True, capture_output=True, timeout=300, env=env)
    line = one_line_error(proc, "cannot reach the Hugging Face hub to load Salesforce/wikitext",
                          "nosuch.invalid does not resolve here", "not in the datasets cache", "save_to_disk",
                          "-e dataset_path=")
    assert "Retrying" not in proc.stdout + proc.stderr, line
    assert not (tmp_path / "out").exists()


def test_hub_source_is_prepared_and_fingerprinted_from_what_load_dataset_returns(tmp_path, monkeypatch):
    """No network here: corpus.load_hub is replaced by a stand-in returning a Dataset, as load_dataset would.
    prepare() must not force HF_HUB_OFFLINE for a hub name, and must rebuild when the hub split changes."""
    from datasets import Dataset

    from train.data import corpus, prepare_data

    paras = _paras(300)
    seen = {}
    current = {"ds": Dataset.from_dict({"body": paras, "n": list(range(300))})}

    def fake_load_hub(source):
        seen["offline"] = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("HF_DATASETS_OFFLINE"))
        seen["hub"] = source.hub
        return corpus._check_column(current["ds"], source, "the stand-in")

    monkeypatch.setattr(corpus, "load_hub", fake_load_hub)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    job = write_job(tmp_path / "job.json", dataset_path="hub:someone/corpus:en:train[:50%]", text_column="body",
                    vocab_size=600)
    out = tmp_path / "art"
    assert prepare_data.prepare(str(job), out) == 0
    assert seen == {"offline": (None, None), "hub": {"repo": "someone/corpus", "config": "en", "split": "train[:50%]"}}
    meta = json.loads((out / "prepare.json").read_text())
    assert meta["source"]["kind"] == "hub" and meta["source"]["documents"] == 300
    assert meta["source"]["path"] == "hub:someone/corpus:en:train[:50%]" and meta["source"]["text_column"] == "body"
    assert meta["settings"]["dataset_path"] == "hub:someone/corpus:en:train[:50%]"
    before = (out / "prepare.json").read_text()
    assert prepare_data.prepare(str(job), out) == 0
    assert (out / "prepare.json").read_text() == before, "same hub split: up to date, untouched"
    # the hub data set changed (new revision -> another datasets fingerprint): rebuilt
    current["ds"] = Dataset.from_dict({"body": paras[:200], "n": list(range(200))})
    assert prepare_data.prepare(str(job), out) == 0
    assert json.loads((out / "prepare.json").read_text())["source"]["documents"] == 200
    assert "HF_HUB_OFFLINE" not in os.environ

    # a missing column on a hub data set: the columns are named
    bad = write_job(tmp_path / "bad.json", dataset_path="hub:someone/corpus", vocab_size=600)
    with pytest.raises(corpus.DataError, match=r"text_column 'text' is not a column of .*\(columns: body, n\)"):
        prepare_data.prepare(str(bad), tmp_path / "bad-art")


def test_hub_fingerprint_follows_the_loaded_split():
    from datasets import Dataset

    from train.data import corpus

    def fp(ds, column="text"):
        src = corpus.open_source("hub:a/b", column)
        src.loaded = ds
        return corpus.fingerprint(src)

    one = Dataset.from_dict({"text": ["alpha", "beta"], "t2": ["x", "y"]})
    assert fp(one) == fp(Dataset.from_dict({"text": ["alpha", "beta"], "t2": ["x", "y"]}))
    assert fp(one) != fp(Dataset.from_dict({"text": ["alpha", "gamma"], "t2": ["x", "y"]}))
    assert fp(one) != fp(one, "t2")


def test_a_missing_path_that_looks_like_a_hub_name_suggests_the_hub_form(tmp_path):
    job = write_job(tmp_path / "job.json", dataset_path="Salesforce/wikitext")
    line = one_line_error(_run("--job", job, "--out", tmp_path / "out"), "does not exist",
                           "dataset_path=hub:Salesforce/wikitext")
    assert ".parquet" in line and "save_to_disk" in line

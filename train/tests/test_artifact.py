"""A directory sealed with a MANIFEST (train/data/artifact.py, ``prepare_data --manifest``): what the staging tree
checks every node's copy against -- the prepared data and the checkpoint a run resumes from. Standard library
only: the fast tier."""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from train.data import artifact

REPO = Path(__file__).resolve().parents[2]


def make_checkpoint(root: Path, ranks: int = 6) -> Path:
    """A checkpoint-shaped directory: a tag directory of per-rank shards of different sizes, and top-level files."""
    tag = root / "checkpoint-40" / "global_step40"
    tag.mkdir(parents=True)
    for r in range(ranks):
        (tag / f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt").write_bytes(os.urandom(1000 + 7919 * r))
        (root / "checkpoint-40" / f"rng_state_{r}.pth").write_bytes(os.urandom(64 + r))
    (root / "checkpoint-40" / "latest").write_text("global_step40")
    return root / "checkpoint-40"


def seal(path, *more):
    return subprocess.run([sys.executable, "-m", "train.data.prepare_data", "--manifest", str(path), *more],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_hash_files_gives_each_files_sha256_in_the_order_asked(tmp_path):
    ckpt = make_checkpoint(tmp_path, ranks=12)
    rels = sorted(str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_file())
    rels = rels[::-1]  # an order that is not the file system's
    expected = [hashlib.sha256((ckpt / rel).read_bytes()).hexdigest() for rel in rels]
    assert artifact.HASH_THREADS >= 1
    assert artifact.hash_files(ckpt, rels) == expected
    assert artifact.hash_files(ckpt, rels[:1]) == expected[:1] and artifact.hash_files(ckpt, []) == []


def test_seal_writes_a_manifest_of_every_file_then_keeps_it_while_nothing_changes(tmp_path):
    ckpt = make_checkpoint(tmp_path)
    first = seal(ckpt)
    assert first.returncode == 0 and first.stdout.startswith(f"written: {ckpt}/MANIFEST"), first
    lines = (ckpt / "MANIFEST").read_text().splitlines()
    listed = {line.split("  ", 1)[1]: line.split("  ", 1)[0] for line in lines}
    files = {str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_file() and p.name != "MANIFEST"}
    assert set(listed) == files and len(files) == 13
    assert all(hashlib.sha256((ckpt / rel).read_bytes()).hexdigest() == digest for rel, digest in listed.items())
    assert artifact.stamp_path(ckpt).is_file()  # verified once written: a later unchanged check hashes nothing
    written = (ckpt / "MANIFEST").stat().st_mtime_ns
    again = seal(ckpt)
    assert again.returncode == 0 and again.stdout.startswith("kept: "), again
    assert (ckpt / "MANIFEST").stat().st_mtime_ns == written
    # both end with the MANIFEST's sha256, which roles/train_stage hands the workers (no second read of the file)
    digest = hashlib.sha256((ckpt / "MANIFEST").read_bytes()).hexdigest()
    for res in (first, again):
        assert res.stdout.splitlines()[-1] == f"MANIFEST sha256 {digest} {ckpt}/MANIFEST", res.stdout


def test_seal_writes_the_manifest_anew_when_a_file_changed_or_went(tmp_path):
    ckpt = make_checkpoint(tmp_path)
    assert seal(ckpt).returncode == 0
    shard = ckpt / "global_step40" / "zero_pp_rank_3_mp_rank_00_optim_states.pt"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    changed = seal(ckpt, "--rehash")
    assert changed.returncode == 0 and "written" in changed.stdout and \
        "sha256 mismatch: global_step40/zero_pp_rank_3_mp_rank_00_optim_states.pt" in changed.stdout, changed
    assert artifact.verify(ckpt) == (True, "13 files verified")
    (ckpt / "rng_state_5.pth").unlink()
    gone = seal(ckpt)
    assert gone.returncode == 0 and "file listed in MANIFEST is missing: rng_state_5.pth" in gone.stdout, gone
    assert "rng_state_5.pth" not in (ckpt / "MANIFEST").read_text()


def test_a_copy_with_one_flipped_byte_among_many_files_does_not_verify(tmp_path):
    ckpt = make_checkpoint(tmp_path / "head", ranks=16)
    assert seal(ckpt).returncode == 0
    copy = tmp_path / "worker" / ckpt.name
    copy.parent.mkdir()
    subprocess.run(["cp", "-a", str(ckpt), str(copy)], check=True)
    assert artifact.verify(copy) == (True, "33 files verified")
    victim = copy / "global_step40" / "zero_pp_rank_11_mp_rank_00_optim_states.pt"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01
    victim.write_bytes(bytes(data))
    assert artifact.verify(copy) == (False, "sha256 mismatch: global_step40/zero_pp_rank_11_mp_rank_00_optim_states.pt")
    checked = subprocess.run([sys.executable, "-m", "train.data.prepare_data", "--verify", str(copy)], cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 1 and "sha256 mismatch" in checked.stderr


def test_seal_of_what_is_not_a_directory_fails_with_one_line(tmp_path):
    res = seal(tmp_path / "nowhere")
    assert res.returncode == 1 and res.stderr.strip() == \
        f"FAILED: {tmp_path / 'nowhere'}: not a directory; give the directory to seal", res
    # a user's own file named MANIFEST is never overwritten by a seal without --beside
    data = tmp_path / "mine"
    data.mkdir()
    (data / "MANIFEST").write_text("my own notes\n")
    (data / "train.txt").write_text("text\n")
    kept = seal(data)
    assert kept.returncode == 1 and "is not a MANIFEST this tool wrote" in kept.stderr and "--beside" in kept.stderr
    assert (data / "MANIFEST").read_text() == "my own notes\n"
    both = subprocess.run([sys.executable, "-m", "train.data.prepare_data", "--manifest", str(tmp_path), "--verify",
                           str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and "--verify takes no --job/--out/--manifest" in both.stderr, both


def test_a_user_scripts_data_is_sealed_with_its_manifest_beside_it_and_nothing_written_inside(tmp_path):
    """--beside: a user script may read its data directory whole, so the MANIFEST is <dir>.MANIFEST; a user's own
    file named MANIFEST inside is data like any other (listed, checked), and the directory gains no file."""
    data = tmp_path / "corpus"
    (data / "part").mkdir(parents=True)
    (data / "train.txt").write_text("one line of text\n" * 50)
    (data / "part" / "valid.txt").write_text("another\n")
    (data / "MANIFEST").write_text("the user's own file\n")
    before = sorted(p.name for p in data.rglob("*"))
    res = seal(data, "--beside")
    assert res.returncode == 0 and res.stdout.startswith(f"written: {tmp_path / 'corpus.MANIFEST'}"), res
    assert sorted(p.name for p in data.rglob("*")) == before
    listed = sorted(line.split("  ", 1)[1] for line in (tmp_path / "corpus.MANIFEST").read_text().splitlines())
    assert listed == ["MANIFEST", "part/valid.txt", "train.txt"]
    check = [sys.executable, "-m", "train.data.prepare_data", "--verify", str(data), "--beside", "--rehash"]
    assert subprocess.run(check, cwd=REPO, capture_output=True, text=True, timeout=120).returncode == 0
    (data / "MANIFEST").write_text("the user's own file, changed\n")
    changed = subprocess.run(check, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert changed.returncode == 1 and "sha256 mismatch: MANIFEST" in changed.stderr, changed
    lone = subprocess.run([sys.executable, "-m", "train.data.prepare_data", "--beside"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert lone.returncode == 2 and "--beside goes with --manifest DIR or --verify DIR" in lone.stderr

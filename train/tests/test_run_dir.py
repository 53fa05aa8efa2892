"""train/node/run_dir.py: a run directory made ready for a launch in one step (real files in tmp_path)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train.node import run_dir

REPO = Path(__file__).resolve().parents[2]


def test_a_new_run_directory_is_created_with_its_files(tmp_path):
    run, out = tmp_path / "runs" / "r1", tmp_path / "runs" / "r1" / "output"
    got = run_dir.prepare(run, out, {"job.json": '{"a": 1}\n', "ds_config.json": "{}\n"})
    assert got == {"changed": True, "created": True, "removed": [], "written": ["job.json", "ds_config.json"]}
    assert (run / "job.json").read_text() == '{"a": 1}\n' and (run / "ds_config.json").read_text() == "{}\n"
    assert oct((run / "job.json").stat().st_mode & 0o777) == "0o644"
    assert not [p.name for p in run.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_an_earlier_attempts_records_go_and_its_checkpoints_stay(tmp_path):
    run, out = tmp_path / "r1", tmp_path / "r1" / "output"
    (run / "ranks").mkdir(parents=True)
    (run / "ranks" / "rank-0.json").write_text('{"end": null}')
    out.mkdir()
    (out / "progress.jsonl").write_text('{"step": 5}\n')
    (out / "metrics.json").write_text("{}")
    (out / "checkpoint-5").mkdir()
    (run / "job.json").write_text("old")
    got = run_dir.prepare(run, out, {"job.json": "new"})
    assert got["changed"] and not got["created"] and got["written"] == ["job.json"]
    assert sorted(got["removed"]) == sorted([str(run / "ranks"), str(out / "progress.jsonl"), str(out / "metrics.json")])
    assert not (run / "ranks").exists() and not (out / "progress.jsonl").exists() and not (out / "metrics.json").exists()
    assert (out / "checkpoint-5").is_dir() and (run / "job.json").read_text() == "new"


def test_the_same_files_again_change_nothing(tmp_path):
    run = tmp_path / "r1"
    files = {"job.json": "j", "ds_config.json": "d"}
    run_dir.prepare(run, run / "output", files)
    before = (run / "job.json").stat().st_mtime_ns
    assert run_dir.prepare(run, run / "output", files) == {"changed": False, "created": False, "removed": [],
                                                           "written": []}
    assert (run / "job.json").stat().st_mtime_ns == before


@pytest.mark.parametrize("name", ["../job.json", "a/b", "", ".."])
def test_a_name_outside_the_run_directory_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match="is not a file name"):
        run_dir.prepare(tmp_path / "r", tmp_path / "r" / "o", {name: "x"})
    assert not (tmp_path / "job.json").exists()


def test_the_command_line_reads_stdin_and_says_what_changed(tmp_path):
    cmd = [sys.executable, "-m", "train.node.run_dir", "--run-dir", str(tmp_path / "r"), "--output-dir",
           str(tmp_path / "r" / "output")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.run(cmd, input=json.dumps({"job.json": "{}"}), capture_output=True, text=True, env=env, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["written"] == ["job.json"]
    bad = subprocess.run(cmd, input="[1]", capture_output=True, text=True, env=env, cwd=REPO)
    assert bad.returncode == 2 and bad.stderr.startswith(f"error: {tmp_path / 'r'}: stdin must be one JSON object")


def test_modes_are_set_whatever_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        run = tmp_path / "runs" / "r1"
        run_dir.prepare(run, run / "output", {"job.json": "j"})
    finally:
        os.umask(old)
    assert oct(run.stat().st_mode & 0o777) == "0o755" and oct(run.parent.stat().st_mode & 0o777) == "0o755"
    assert oct((run / "job.json").stat().st_mode & 0o777) == "0o644"
    (run / "job.json").chmod(0o600)
    assert run_dir.prepare(run, run / "output", {"job.json": "j"})["written"] == ["job.json"]
    assert oct((run / "job.json").stat().st_mode & 0o777) == "0o644"


def test_a_file_in_place_of_the_run_directory_is_one_line_that_says_what_to_do(tmp_path):
    (tmp_path / "r").write_text("not a directory")
    p = subprocess.run([sys.executable, "-m", "train.node.run_dir", "--run-dir", str(tmp_path / "r"), "--output-dir",
                        str(tmp_path / "r" / "output")], input="{}", capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"cannot make the run directory {tmp_path / 'r'} ready (File exists" in p.stderr
    assert "-e run_name=" in p.stderr


def test_an_earlier_attempts_passed_variables_and_the_paths_asked_for_go(tmp_path):
    """passthrough.env (the variables an earlier attempt's shell passed: train_launch writes this attempt's after
    the staging) and --remove's paths (one node's .deepspeed_env of an earlier version) are removed."""
    run, code = tmp_path / "runs" / "r1", tmp_path / "code"
    run.mkdir(parents=True)
    code.mkdir()
    (run / "passthrough.env").write_text("HF_TOKEN=old\n")
    (code / ".deepspeed_env").write_text("HF_TOKEN=old\n")
    p = subprocess.run([sys.executable, "-m", "train.node.run_dir", "--run-dir", str(run), "--output-dir",
                        str(run / "output"), "--remove", str(code / ".deepspeed_env")], input="{}",
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["changed"] and sorted(got["removed"]) == sorted([str(run / "passthrough.env"),
                                                                str(code / ".deepspeed_env")])
    assert not (run / "passthrough.env").exists() and not (code / ".deepspeed_env").exists()
    p = subprocess.run([sys.executable, "-m", "train.node.run_dir", "--run-dir", str(run), "--output-dir",
                        str(run / "output"), "--remove", ".deepspeed_env"], input="{}", capture_output=True,
                       text=True, cwd=REPO)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--remove takes absolute paths" in p.stderr

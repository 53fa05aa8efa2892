"""The GPU benchmark's two helpers (`make bench`, molecule/gpu/bench.sh; standard library only).

    python -m train.tools.bench pad-tokenizer SRC_DIR DST_DIR --size 30522
    python -m train.tools.bench report --runs RUNS.json --out docs/benchmarks [--commit C] [--stem NAME] [--note TEXT]...

pad-tokenizer: a copy of a saved tokenizer whose vocabulary is padded to ``--size`` entries with tokens the text
never produces (``[unused<i>]``), so the model has a full-size embedding and LM head (BERT-base's 30,522 /
GPT-2's 50,257) while prepare_data's tokenizer, trained on the small built-in corpus, reaches ~5.6 k.

report: reads each run's job.json, metrics.json, perf.json (train/rank/perf.py's PerfCallback), train.log and the
playbook start time from RUNS.json (a list of {"label", "run_name", "command", "playbook_start_unix_s",
"playbook_end_unix_s", "run_dirs": [dirs to look in], optionally "series": a name}), and writes
OUT/gpu-<date>.json and OUT/gpu-<date>.md.

Data-parallel scaling (``scaling``): the runs of one ``series`` are the same preset at several world
sizes with the same per-GPU batch (micro batch x accumulation), i.e. weak scaling; for each run
efficiency = (samples/s / world size) / (samples/s / world size of the series' smallest run), speedup = samples/s /
that run's samples/s (the usual weak-scaling definitions, e.g. NVIDIA DeepLearningExamples' "weak scaling"
tables: throughput at N GPUs over N x the 1-GPU throughput).

MFU: train.common.flops (6 N + 12 L h s FLOPs per token, N = metrics.json n_parameters, over the GPU's measured
dense bf16 rate), from perf.json's steady-state tokens/s.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import time
from pathlib import Path

from train.common import flops

_LOG_TIME = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]")
#: ansible.posix.profile_tasks' line under each task header: "... (0:00:00.851)       0:00:12.480 ****"
_PROFILE_LINE = re.compile(r"\((\d+):(\d\d):(\d\d(?:\.\d+)?)\)\s+(\d+):(\d\d):(\d\d(?:\.\d+)?)\s+\*+\s*$")
_TASK = re.compile(r"^TASK \[(.+?)\] \*+\s*$")
_IMPORT = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)\s*$")
#: the task of roles/train_launch that starts DeepSpeed's launcher (launcher=pdsh, the one-node default)
LAUNCH_TASK = "Launch deepspeed from the head node"


def pad_tokenizer(src: str | Path, dst: str | Path, size: int) -> int:
    """Copy the tokenizer in ``src`` to ``dst`` with its model vocabulary padded to ``size`` entries.

    Args:
        src: a saved tokenizer directory with tokenizer.json (WordPiece or BPE model).
        dst: the directory to write (created).
        size: the vocabulary size wanted (>= the current one).

    Returns:
        the new vocabulary size (entries in tokenizer.json's model vocab plus added tokens outside it).

    Raises:
        ValueError: no tokenizer.json, a model type without a ``vocab`` mapping, or size below the current size.
    """
    src, dst = Path(src), Path(dst)
    data = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = data.get("model", {}).get("vocab")
    if not isinstance(vocab, dict):
        raise ValueError(f"{src}/tokenizer.json has no model.vocab mapping (model {data.get('model', {}).get('type')})")
    ids = set(vocab.values()) | {t["id"] for t in data.get("added_tokens", [])}
    if size < len(ids):
        raise ValueError(f"--size {size} is below the tokenizer's {len(ids)} entries")
    next_id, i = max(ids) + 1, 0
    while len(ids) < size:
        token = f"[unused{i}]"
        i += 1
        if token in vocab:
            continue
        vocab[token] = next_id
        ids.add(next_id)
        next_id += 1
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "tokenizer.json" and f.name != "vocab.txt":
            (dst / f.name).write_bytes(f.read_bytes())
    (dst / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return len(ids)


def _log_start(log: Path) -> float | None:
    """Unix time of the first ``[YYYY-mm-dd HH:MM:SS,mmm]`` stamp in a train.log (DeepSpeed's launcher, local
    time of the machine that wrote it), or None."""
    if not log.is_file():
        return None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines()[:200]:
        m = _LOG_TIME.search(line)
        if m:
            return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
    return None


def prelaunch_tasks(log_text: str, top: int = 8) -> dict | None:
    """What a train.yml run spent before DeepSpeed's launcher started, from its output with the
    ``ansible.posix.profile_tasks`` callback on (each task header followed by the time since the playbook began).

    Returns:
        {"prelaunch_s": profile_tasks' time since the playbook started at the start of the launch task (LAUNCH_TASK),
        "tasks": number of tasks before it, "slowest": [[task name, seconds], ...] the ``top`` longest of them}, or
        None when the log has no profile_tasks lines or no launch task.
    """
    starts: list[tuple[str, float]] = []
    name = None
    for line in log_text.splitlines():
        m = _TASK.match(line)
        if m:
            name = m.group(1)
            continue
        m = _PROFILE_LINE.search(line)
        if m and name is not None:
            h, mi, se = m.group(4, 5, 6)
            starts.append((name, int(h) * 3600 + int(mi) * 60 + float(se)))
            name = None
    launch = next((i for i, (n, _) in enumerate(starts) if LAUNCH_TASK in n), None)
    if launch is None:
        return None
    durations = [(starts[i][0], round(starts[i + 1][1] - starts[i][1], 2)) for i in range(launch)]
    slowest = sorted(durations, key=lambda d: -d[1])[:top]
    return {"prelaunch_s": round(starts[launch][1], 2), "tasks": launch, "slowest": [list(d) for d in slowest]}


def import_profile(text: str, root: str = "train.rank.pretrain", top: int = 12) -> dict | None:
    """Where importing ``root`` spends its time, from a ``python -X importtime -c 'import ROOT'`` log (stderr):
    {"total_s": ROOT's cumulative time, "top": [[module, cumulative seconds], ...] the ``top`` largest of the
    modules ROOT imports directly (each with everything it pulled in first)}, or None when ROOT is not in the log.
    importtime prints a module's imports before it, one indentation level (2 spaces) deeper; times in microseconds.
    """
    rows = []
    for line in text.splitlines():
        m = _IMPORT.match(line)
        if m:
            rows.append((len(m.group(3)), m.group(4), int(m.group(2)) / 1e6))
    at = next((i for i, r in enumerate(rows) if r[1] == root), None)
    if at is None:
        return None
    depth = rows[at][0]
    children = []
    for indent, name, seconds in reversed(rows[:at]):
        if indent <= depth:
            break  # the module imported before ROOT
        if indent == depth + 2:
            children.append((name, seconds))
    largest = sorted(children, key=lambda r: -r[1])[:top]
    return {"total_s": round(rows[at][2], 2), "top": [[n, round(t, 2)] for n, t in largest]}


def _find(name: str, dirs: list[str]) -> Path | None:
    for d in dirs:
        for candidate in (Path(d) / name, Path(d) / "output" / name):
            if candidate.is_file():
                return candidate
    return None


def _load(name: str, dirs: list[str]) -> dict:
    path = _find(name, dirs)
    return json.loads(path.read_text(encoding="utf-8")) if path else {}


#: the start-up phases of a row: (name, perf.json "startup" key it ends at); each starts where the one before ends,
#: the first at the launcher's first log line (the DeepSpeed launcher's start)
STARTUP_PHASES = (("launcher to rank process", "process_start"), ("imports", "imports_done"),
                  ("arguments, device, process group", "arguments_parsed"), ("data", "data_loaded"),
                  ("model", "model_built"), ("Trainer", "trainer_built"),
                  ("DeepSpeed init, optimizer, dataloader", "train_begin"), ("first optimizer step", "first_step_end"))


def startup_phases(startup: dict, launch: float | None) -> list[list]:
    """[[phase, seconds], ...] from perf.json's "startup" times (Unix s) and the launcher's start; a phase whose
    ends are unknown is left out."""
    out, before = [], launch
    for name, key in STARTUP_PHASES:
        at = startup.get(key)
        if isinstance(at, (int, float)):
            if isinstance(before, (int, float)):
                out.append([name, round(at - before, 2)])
            before = at
    return out


def run_row(run: dict) -> dict:
    """One benchmark row from a run's files (see the module docstring); missing values are None."""
    dirs = run["run_dirs"]
    job, metrics, perf = _load("job.json", dirs), _load("metrics.json", dirs), _load("perf.json", dirs)
    config = job.get("model_config", {})
    layers, hidden = flops.model_shape(config)
    seq = perf.get("block_length") or metrics.get("block_length")
    n = metrics.get("n_parameters")
    sps = perf.get("steady_samples_per_second")
    tps = perf.get("steady_tokens_per_second")
    mfu = flops.mfu(tps, n, layers, hidden, seq, perf.get("gpu"))
    first = perf.get("first_step_end_unix_s")
    launch = _log_start(_find("train.log", dirs) or Path("/nonexistent"))
    start = run.get("playbook_start_unix_s")
    profile = _find("profile.txt", dirs)
    playbook_log = Path(run["playbook_log"]) if run.get("playbook_log") else None
    prelaunch = (prelaunch_tasks(playbook_log.read_text(encoding="utf-8", errors="replace"))
                 if playbook_log and playbook_log.is_file() else None)
    return {
        "label": run["label"], "command": run["command"], "run_name": run["run_name"], "series": run.get("series"),
        "world_size": metrics.get("world_size"), "samples_per_second": sps, "tokens_per_second": tps, "mfu": round(mfu, 4) if mfu is not None else None,
        "steady_steps": perf.get("steady_steps"), "steady_seconds": perf.get("steady_seconds"),
        "n_parameters": n, "vocab_size": metrics.get("vocab_size"), "layers": layers, "hidden": hidden,
        "seq": seq, "global_batch": perf.get("global_batch"),
        "micro_batch": perf.get("per_device_train_batch_size"), "accumulation": perf.get("gradient_accumulation_steps"),
        "precision": job.get("precision"), "autocast": job.get("autocast"), "optimizer": job.get("optimizer"),
        "zero_stage": job.get("zero_stage"), "offload_optimizer": job.get("offload_optimizer"),
        "torch_compile": job.get("torch_compile"), "regional_compilation": job.get("regional_compilation"),
        "startup_phases": startup_phases(perf.get("startup") or {}, launch),
        "mlm_head": job.get("mlm_head"), "attention": job.get("attention"),
        "kernels": {k: job.get(k) for k in ("unpadded_attention", "fused_cross_entropy", "float8")
                    if k in job},
        "peak_memory_allocated_gib": _gib(perf.get("peak_memory_allocated_bytes")),
        "peak_memory_reserved_gib": _gib(perf.get("peak_memory_reserved_bytes")),
        "playbook_start_to_first_step_s": round(first - start, 1) if first and start else None,
        "launcher_start_to_first_step_s": round(first - launch, 1) if first and launch else None,
        "playbook_wall_s": round(run["playbook_end_unix_s"] - start, 1) if run.get("playbook_end_unix_s") and start
        else None,
        "steps": metrics.get("steps"), "first_loss": metrics.get("first_loss"), "last_loss": metrics.get("last_loss"),
        "gpu": perf.get("gpu"), "versions": metrics.get("versions"),
        # what the user saw: the progress line at the last step (the last interval's rate) and the summary's
        # steady rate (metrics.json: first to last logged step), beside perf.json's GPU-synchronised window above
        "progress_last_samples_per_second": _last_progress_rate(_find("progress.jsonl", dirs)),
        # a run resumed with -e resume=: its first attempt's steady rate (train_launch moved that attempt's files to
        # attempt-1/), which the progress line after the resume is compared with
        "before_resume_samples_per_second": _load(f"{RESUMED_FROM}/perf.json", dirs).get("steady_samples_per_second"),
        "summary_steady_samples_per_second": metrics.get("steady_samples_per_second"),
        "summary_average_samples_per_second": metrics.get("train_samples_per_second"),
        "profile": profile.read_text(encoding="utf-8") if profile else None,
        "profile_window": perf.get("profile"),
        "prelaunch": prelaunch,
    }


#: where a resumed run's first attempt's files are under outputs/<run>/ (roles/train_launch: attempt-<n>/)
RESUMED_FROM = "attempt-1"


def _last_progress_rate(path: Path | None) -> float | None:
    """samples_per_second of the last step record of a progress.jsonl (train/rank/callbacks.py), None without one."""
    if path is None:
        return None
    rate = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "event" not in record and record.get("samples_per_second") is not None:
            rate = record["samples_per_second"]
    return rate


def scaling(rows: list[dict]) -> list[dict]:
    """Weak-scaling rows of every series (see the module docstring) from run_row dicts.

    Rows without a ``series``, a world size or a steady samples/s are left out; of several rows of one series and
    world size (a call repeated on the same machine) the last one counts. Returns, per series in order of
    first appearance and by world size: {"series", "world_size", "samples_per_second", "per_gpu" (samples/s per
    rank), "speedup", "efficiency" (fractions, not rounded), "per_gpu_batch" (micro x accumulation),
    "label", "base_world_size", "note"}. A run whose per-GPU batch differs from the base run's gets no efficiency (None) and a note:
    a different batch per GPU is not the same work per GPU."""
    series: dict[str, dict[int, dict]] = {}
    for r in rows:
        if r.get("series") and r.get("world_size") and r.get("samples_per_second"):
            series.setdefault(r["series"], {})[r["world_size"]] = r
    out = []
    for name, by_world in series.items():
        runs = [by_world[w] for w in sorted(by_world)]
        base = runs[0]
        base_per_gpu = base["samples_per_second"] / base["world_size"]

        def batch(r):
            return (r.get("micro_batch"), r.get("accumulation"))

        for r in runs:
            per_gpu = r["samples_per_second"] / r["world_size"]
            same = batch(r) == batch(base)
            out.append({
                "series": name, "world_size": r["world_size"], "label": r["label"],
                "samples_per_second": r["samples_per_second"], "per_gpu": round(per_gpu, 2),
                "per_gpu_batch": f"{r.get('micro_batch')} x {r.get('accumulation')}",
                # not rounded here: the table and the target line each round once (rounding twice turned
                # 0.61349 into "61.4 %")
                "speedup": r["samples_per_second"] / base["samples_per_second"] if same else None,
                "efficiency": per_gpu / base_per_gpu if same else None,
                "base_world_size": base["world_size"],
                "note": None if same else (f"per-GPU batch {batch(r)[0]} x {batch(r)[1]} differs from the "
                                           f"{base['world_size']}-rank run's {batch(base)[0]} x {batch(base)[1]}"),
            })
    return out


def _gib(value):
    return round(value / 2**30, 1) if isinstance(value, (int, float)) else None


def _fmt(value, spec=""):
    return "—" if value is None else format(value, spec)


def _peak_text(report: dict) -> str:
    """", here X TFLOP/s for <gpu> (<source>)" for the report's GPU; "" when the report has none (older reports, or
    a GPU not in train/common/flops.py PEAKS: every MFU is then "—")."""
    peak = report.get("mfu_peak")
    if not peak:
        return f" ({report.get('gpu')} is not in its table: no MFU)" if report.get("gpu") else ""
    return f", here {peak['flops'] / 1e12:,.1f} TFLOP/s for {peak['gpu']} ({peak['source']})"


def markdown(report: dict) -> str:
    """The table and notes of a report dict (report())."""
    lines = [f"# GPU benchmark {report['date']}: {report['gpu']}", "",
             f"Command: `{report['command']}` at commit {report['commit']}. {report['mfu_formula']}{_peak_text(report)}; N counts every "
             "parameter (embeddings included), s = tokens per sample. Steady state: between the end of step "
             "max_steps/4 (a resumed run: a quarter into the steps after its checkpoint's) and the last step, the GPU "
             "synchronised at both ends.", "",
             "| run | samples/s | tokens/s | MFU | micro x accum (global) | peak GPU memory (alloc / reserved) | "
             "playbook start → first step end | launcher start → first step end | N, vocab | "
             "progress line at the last step / summary steady / Trainer's average (samples/s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["runs"]:
        mfu = f"{100 * r['mfu']:.1f} %" if r["mfu"] is not None else "—"
        lines.append(
            f"| {r['label']} | {_fmt(r['samples_per_second'], ',.1f')} | {_fmt(r['tokens_per_second'], ',.0f')} | "
            f"{mfu} | {r['micro_batch']} x {r['accumulation']} ({r['global_batch']}) | "
            f"{_fmt(r['peak_memory_allocated_gib'])} / {_fmt(r['peak_memory_reserved_gib'])} GiB | "
            f"{_fmt(r['playbook_start_to_first_step_s'])} s | {_fmt(r['launcher_start_to_first_step_s'])} s | "
            f"{_fmt(r['n_parameters'] / 1e6 if r['n_parameters'] else None, '.1f')} M, {r['vocab_size']} | "
            f"{_fmt(r.get('progress_last_samples_per_second'), ',.1f')} / "
            f"{_fmt(r.get('summary_steady_samples_per_second'), ',.1f')} / "
            f"{_fmt(r.get('summary_average_samples_per_second'), ',.1f')} |")
    lines += ["", "Settings per run:", ""]
    for r in report["runs"]:
        lines.append(f"- {r['label']}: `{r['command']}` — {r['precision']}{' via torch_autocast' if r['autocast'] else ''}, "
                     f"optimizer {r['optimizer']}, ZeRO-{r['zero_stage']}, offload {r['offload_optimizer']}, "
                     f"compile {r['torch_compile']}{' (regional)' if r.get('regional_compilation') else ''}, "
                     f"MLM head {r['mlm_head']}, {r['attention']}"
                     + "".join(f", {k} {v}" for k, v in (r.get("kernels") or {}).items()) + "; loss "
                     f"{r['first_loss']} → {r['last_loss']} in {r['steps']} steps")
    lines += ["", f"Versions: {json.dumps(report['versions'])}", ""]
    if report.get("targets"):
        lines += ["Targets:", ""] + [f"- {t}" for t in report["targets"]] + [""]
    if report.get("scaling"):
        lines += ["Data-parallel scaling (same per-GPU batch at every world size; efficiency = samples/s per GPU / "
                  "the series' smallest run's):", "",
                  "| series | GPUs | samples/s | per GPU | micro x accum | speedup | efficiency |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in report["scaling"]:
            eff = f"{100 * r['efficiency']:.1f} %" if r["efficiency"] is not None else f"— ({r['note']})"
            lines.append(f"| {r['series']} | {r['world_size']} | {r['samples_per_second']:,.1f} | "
                         f"{r['per_gpu']:,.1f} | {r['per_gpu_batch']} | {_fmt(r['speedup'], '.2f')}{'x' if r['speedup'] is not None else ''} | {eff} |")
        lines.append("")
    phased = [r for r in report["runs"] if r.get("startup_phases")]
    if phased:
        lines += ["Start-up, launcher start -> first step end (seconds per phase, rank 0):", ""]
        for r in phased:
            lines.append(f"- {r['label']}: " + ", ".join(f"{name} {sec:.1f}" for name, sec in r["startup_phases"]))
        lines.append("")
    pre = [r for r in report["runs"] if r.get("prelaunch")]
    if pre:
        lines += ["train.yml before the launcher (ansible.posix.profile_tasks: playbook start -> start of the "
                  "launch task; the slowest tasks):", ""]
        for r in pre:
            p = r["prelaunch"]
            lines.append(f"- {r['label']}: {p['prelaunch_s']:.1f} s in {p['tasks']} tasks; " + ", ".join(
                f"{name} {sec:.1f}" for name, sec in p["slowest"]))
        lines.append("")
    if report.get("imports"):
        imp = report["imports"]
        lines += [f"Rank imports (`python -X importtime -c 'import train.rank.pretrain'` in the node venv on the GPU "
                  f"machine): {imp['total_s']:.1f} s, largest top-level: "
                  + ", ".join(f"{name} {sec:.2f}" for name, sec in imp["top"]), ""]
    profiled = [r for r in report["runs"] if r.get("profile_window")]
    if profiled:
        lines += ["GPU busy in the profiled steps (kernel time / wall time, torch.profiler):", ""]
        for r in profiled:
            w = r["profile_window"]
            lines.append(f"- {r['label']}: steps {w['steps'][0]}..{w['steps'][1]}, {w['wall_s']} s wall, "
                         f"{w['gpu_kernel_s']} s of kernels ({_busy(w)})" + _idle(w))
        lines.append("")
    if report.get("notes"):
        lines += ["Notes:", ""] + [f"- {n}" for n in report["notes"]] + [""]
    return "\n".join(lines)


def _idle(window: dict) -> str:
    """The idle time's largest shares by the host op running then (perf.idle_gaps), or "" (older perf.json)."""
    shares = window.get("idle_by_host_op")
    if not shares:
        return ""
    return (f"; idle {window['gpu_idle_s']} s, while the host ran: "
            + ", ".join(f"{name} {us / 1e3:.1f} ms" for name, us in shares[:4]))


def _busy(window: dict) -> str:
    wall, busy = window.get("wall_s"), window.get("gpu_kernel_s")
    return f"{100 * busy / wall:.0f} % busy" if wall and busy is not None else "—"


def report(runs: list[dict], *, command: str, commit: str, notes: list[str] | None = None,
           imports: dict | None = None) -> dict:
    """The benchmark dict: one row per run (run_row), the GPU, versions, the MFU formula and the targets checked.

    Targets: :func:`targets_of`.
    """
    rows = [run_row(r) for r in runs]
    scaled = scaling(rows)
    targets = targets_of(rows, scaled)
    gpu = next((r["gpu"] for r in rows if r["gpu"]), None)
    versions = next((r["versions"] for r in rows if r["versions"]), None)
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "gpu": gpu,
            "command": command, "commit": commit, "mfu_formula": flops.MFU_FORMULA, "peak_flops": flops.peak_flops(gpu),
            "mfu_peak": flops.peak_of(gpu),
            "versions": versions, "runs": rows, "scaling": scaled, "targets": targets, "notes": notes or [],
            "imports": imports}


#: the blog's recipe as the bench runs it: fp16, ZeRO-2, the whole optimizer on the CPU (DeepSpeed's ZeRO-Offload)
BLOG_RECIPE = {"precision": "fp16", "zero_stage": 2, "offload_optimizer": "cpu"}
#: the label of a run whose torch.compile caches were filled by the run before (molecule/gpu/bench.sh's bert-warm)
WARM = "compile caches warm"


def targets_of(rows: list[dict], scaled: list[dict] | None = None) -> list[str]:
    """The targets checked in every docs/benchmarks/gpu-<date>.md, one line each, "name: value — met|missed"
    (or "— not checked" with the reason):

    * bert defaults >= 1,350 samples/s (62.5 % MFU on an H200), and >= 15x the blog's recipe in the same report --
      only against a row that ran the blog's recipe (:data:`BLOG_RECIPE`; with ``zero_stage`` auto and
      ``offload_optimizer=cpu`` the memory plan may choose ZeRO-3 with part of the optimizer offloaded, which is not
      the blog's);
    * gpt2 defaults >= 450 k tokens/s;
    * start-up: a run with torch.compile's caches warm (label containing :data:`WARM`): playbook start -> first
      optimizer step end <= 20 s and launcher start -> first step end <= 10 s; bert defaults with a cold compile:
      its first optimizer step (the compile) <= 20 s;
    * each run's progress line at its last step within 10 % of its steady rate, and a resumed run's within 10 % of
      its first attempt's steady rate (``before_resume_samples_per_second``);
    * each scaling series' efficiency at its largest world size >= 95 % (``scaled``: :func:`scaling`'s rows).

    ``rows``: :func:`run_row` dicts (samples_per_second, tokens_per_second, label, precision, zero_stage,
    offload_optimizer, playbook_start_to_first_step_s, launcher_start_to_first_step_s, startup_phases,
    progress_last_samples_per_second; None where unknown).
    """
    by = {r["label"]: r for r in rows}
    targets = []
    bert, blog, gpt2 = by.get("bert defaults"), by.get("bert, the blog's recipe"), by.get("gpt2 defaults")

    def check(name, value, ok):
        targets.append(f"{name}: {value} — {'met' if ok else 'missed'}")

    if bert and bert["samples_per_second"]:
        check("bert defaults >= 1,350 samples/s", f"{bert['samples_per_second']:,.1f}", bert["samples_per_second"] >= 1350)
        if blog and blog["samples_per_second"]:
            ratio = bert["samples_per_second"] / blog["samples_per_second"]
            differs = {k: blog.get(k) for k, v in BLOG_RECIPE.items() if blog.get(k) != v}
            if differs:
                ran = ", ".join(f"{k} {v}" for k, v in differs.items())
                targets.append(f">= 15x the blog's recipe: {ratio:.1f}x against a row that ran {ran}, not the blog's "
                               f"{', '.join(f'{k} {v}' for k, v in BLOG_RECIPE.items())} — not checked")
            else:
                check(">= 15x the blog's recipe", f"{ratio:.1f}x", ratio >= 15)
    if gpt2 and gpt2["tokens_per_second"]:
        check("gpt2 defaults >= 450 k tokens/s", f"{gpt2['tokens_per_second']:,.0f}", gpt2["tokens_per_second"] >= 4.5e5)
    for r in rows:
        shown, steady = r.get("progress_last_samples_per_second"), r["samples_per_second"]
        if shown and steady:
            check(f"{r['label']}: the progress line's samples/s at the last step within 10 % of the steady rate",
                  f"{shown:,.1f} vs {steady:,.1f}", abs(shown - steady) <= 0.1 * steady)
        before = r.get("before_resume_samples_per_second")
        if shown and before:
            check(f"{r['label']}: the progress line's samples/s at the last step after the resume within 10 % of the "
                  "rate before the stop", f"{shown:,.1f} vs {before:,.1f}", abs(shown - before) <= 0.1 * before)
        if WARM in r["label"]:
            if r.get("playbook_start_to_first_step_s") is not None:
                check(f"{r['label']}: playbook start -> first step end <= 20 s",
                      f"{r['playbook_start_to_first_step_s']} s", r["playbook_start_to_first_step_s"] <= 20)
            if r.get("launcher_start_to_first_step_s") is not None:
                check(f"{r['label']}: launcher start -> first step end <= 10 s",
                      f"{r['launcher_start_to_first_step_s']} s", r["launcher_start_to_first_step_s"] <= 10)
    compile_s = dict(map(tuple, (bert or {}).get("startup_phases") or [])).get("first optimizer step")
    if compile_s is not None:
        check("bert defaults, cold compile: first optimizer step <= 20 s", f"{compile_s} s", compile_s <= 20)
    for name in dict.fromkeys(r["series"] for r in scaled or []):
        top = [r for r in scaled if r["series"] == name][-1]
        if top["world_size"] > top["base_world_size"]:
            eff = top["efficiency"]
            base = top["base_world_size"]
            check(f"{name}: scaling efficiency at {top['world_size']} GPUs "
                  f"(per GPU against {base} GPU{'s' if base > 1 else ''}) >= 95 %",
                  "—" if eff is None else f"{100 * eff:.1f} %", eff is not None and eff >= 0.95)
    return targets


def main(argv: list[str] | None = None) -> int:
    """CLI (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m train.tools.bench")
    sub = parser.add_subparsers(dest="command", required=True)
    pad = sub.add_parser("pad-tokenizer")
    pad.add_argument("src")
    pad.add_argument("dst")
    pad.add_argument("--size", type=int, required=True)
    rep = sub.add_parser("report")
    rep.add_argument("--runs", required=True)
    rep.add_argument("--out", required=True)
    rep.add_argument("--command", default="make bench")
    rep.add_argument("--commit", default="unknown")
    rep.add_argument("--stem", default=None, help="file name without .json/.md (default gpu-<UTC date>)")
    rep.add_argument("--note", action="append", default=[], help="a line for the notes (repeatable)")
    rep.add_argument("--importtime", default=None, help="a `python -X importtime` log of the rank's imports")
    opts = parser.parse_args(argv)
    if opts.command == "pad-tokenizer":
        print(f"{opts.dst}: {pad_tokenizer(opts.src, opts.dst, opts.size)} entries")
        return 0
    runs = json.loads(Path(opts.runs).read_text(encoding="utf-8"))
    imports = None
    if opts.importtime and Path(opts.importtime).is_file():
        imports = import_profile(Path(opts.importtime).read_text(encoding="utf-8", errors="replace"))
    data = report(runs, command=opts.command, commit=opts.commit, notes=opts.note, imports=imports)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / (opts.stem or f"gpu-{data['date']}")
    stem.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(markdown(data), encoding="utf-8")
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())

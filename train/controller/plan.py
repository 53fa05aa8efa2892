"""The plan of one training run: everything `train.yml` decides on the controller, as one typed :class:`Plan` that
checks its rules when made, whose ``as_dict()`` is the ``train_plan`` fact the roles read (standard library, PyYAML
and train.* only: the Ansible controller's Python imports it through the ``train_plan`` action).

    plan = build(overrides={"model": "bert", "model_size": "tiny"}, accelerator="cpu", shape=..., node=..., ...)
    plan.as_dict()  # the ``train_plan`` fact the roles read

From the preset, the inventory's ``train_defaults`` and the ``-e`` overrides (or a user script's own
TrainingArguments) it resolves one validated job (train.common.job), renders ds_config.json for the cluster's world size
(train.controller.dsconfig), builds the entry's arguments and the launch command of every node that starts ranks
(train.controller.launch), and lays out the run's paths. It writes nothing: the job and the DeepSpeed config come back as the
exact text of job.json and ds_config.json, which the stage role copies to the nodes and the launch role keeps in
``outputs/<run>/`` once the run has started (a run that never launched leaves nothing there).

A user mistake raises PlanError (a train.common.job.JobError): one line ``<what> (<where>); <how to fix>``.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from train.common import job as jobmod
from train.common import keys as keymod
from train.controller import resolve as resolvemod
from train.controller import dsconfig, launch, memory, script_args
from train.node import checkpoints

LAUNCHERS = ("pdsh", "ansible", "slurm")
MODES = ("preset", "script")  # train.rank.pretrain with a preset, or a user's script
# the files every node gets in its run directory and outputs/<run>/ keeps, as the plan's exact text
FILES = ("job.json", "ds_config.json", "launch.json")
# What follows the launcher's options: this project's rank entries run as modules (`python -m`) from the code
# directory, where train/ is staged, so they import train.* as a package.
PRESET_ENTRY = ["--module", "train.rank.pretrain"]
RUN_SCRIPT = ["--module", "train.rank.run_script"]
# Per-key policies of resumed and script runs, from the keys' declarations (train.common.keys: Key.resume,
# Key.resumed_without, Key.script_default): the keys -e may change on -e resume=, the value a resumed run keeps for a
# key its job.json lacks, and the values a user script starts from.
RESUME_MAY_CHANGE = tuple(key.name for key in keymod.KEYS if key.resume)
RESUME_KEYS_ADDED = {key.name: key.resumed_without for key in keymod.KEYS if key.resumed_without != keymod.UNSET}
SCRIPT_DEFAULTS = {key.name: key.script_default for key in keymod.KEYS if key.script_default != keymod.UNSET}


class PlanError(jobmod.JobError):
    """A user mistake found while planning a run; str() is the one-line message."""


def job_overrides(extra_vars: dict, train_defaults=None) -> dict:
    """The job overrides a run takes from Ansible: ``train_defaults`` (one inventory dict), then ``-e`` values.

    Args:
        extra_vars: the playbook's extra variables (``-e``) only, never the merged inventory variables, so a
            ``seed:`` or ``max_steps:`` in group_vars does not change the job.
        train_defaults: the inventory's ``train_defaults`` mapping (job key -> value), or None.

    Returns:
        {job key: value} for every key of ``train.common.job.override_keys()`` found there, ``-e`` winning.

    Raises:
        PlanError: train_defaults is not a mapping, or names a key that is not a job key.
    """
    keys = resolvemod.override_keys()
    out = {}
    if train_defaults not in (None, ""):
        if not isinstance(train_defaults, dict):
            raise PlanError(f"train_defaults must be a mapping of job keys, got {train_defaults!r}",
                            "inventory train_defaults", "write e.g. `train_defaults: {max_steps: 1000, seed: 7}`")
        for key, value in train_defaults.items():
            if key not in keys:
                raise PlanError(f"unknown job key {key!r} in train_defaults", "inventory train_defaults",
                                f"use job keys only: {', '.join(keys)}")
            out[key] = value
    for key in keys:
        if key in extra_vars:
            out[key] = extra_vars[key]
    return out


def parse_script(script: str):
    """The script's source as an ``ast.Module``, read without running it.

    Raises:
        PlanError: the script is not Python that parses (the line and the error are named).
    """
    import ast

    try:
        return ast.parse(Path(script).read_text(encoding="utf-8"), filename=script)
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        raise PlanError(f"script {script} does not parse as Python{f' (line {line})' if line else ''}: "
                        f"{getattr(exc, 'msg', exc)}", "-e script", "fix the script; it would fail on every rank") from None


def uses_hf_trainer(tree) -> bool:
    """Whether a parsed script (parse_script) builds an HF Trainer: any name or attribute ending in ``Trainer``
    (Trainer, Seq2SeqTrainer, trl's SFTTrainer, ...). Such a script gets the ds_config with "auto" values the Trainer
    fills; any other (a plain ``deepspeed.initialize`` loop) gets them filled in here (train.controller.dsconfig.concrete)."""
    import ast

    for node in ast.walk(tree):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if isinstance(node, ast.alias):
            name = node.name.rsplit(".", 1)[-1]
        if name and name.endswith("Trainer"):
            return True
    return False


def top_level_imports(tree) -> list[str]:
    """Top-level package names a parsed script (parse_script) imports at module level (``import a.b`` and
    ``from a.b import c`` -> "a"), sorted; relative imports and imports inside functions, classes or ``try:`` blocks
    (optional ones) are left out. The preflight checks each resolves in every node's venv."""
    import ast

    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names if n != "__future__")


def _run_stamp(now):
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return f"{now.astimezone(datetime.timezone.utc):%Y%m%dT%H%M%SZ}"


def _json_text(obj) -> str:
    return json.dumps(obj, indent=2) + "\n"


def resume_source(output_root: str, resume: str) -> dict:
    """The run ``-e resume=<resume>`` continues and its newest complete checkpoint, from the controller's results.

    Args:
        output_root: the controller's results directory (``outputs/`` or train_output_dir).
        resume: a run name, or ``latest`` (the run whose newest complete checkpoint was checked last).

    Returns:
        {"run": name, "out_dir": path, "job": its job.json (dict), "checkpoint": controller path of the
        checkpoint, "step": int, "world_size": int (from the checkpoint's marker, train.node.checkpoints.MARKER)}.

    Raises:
        PlanError: no such run, no job.json, or no complete checkpoint (the message says what was found instead).
    """
    root = Path(output_root)
    where = f"-e resume={resume}"
    if resume == "latest":
        runs = []
        for d in (root.iterdir() if root.is_dir() else []):
            ckpt = checkpoints.latest_complete(d) if (d / "job.json").is_file() else None
            if ckpt is not None:
                runs.append(((ckpt / checkpoints.MARKER).stat().st_mtime, d))
        if not runs:
            raise PlanError(f"no run in {root} has a complete checkpoint", where,
                            "give -e resume=<run_name> of a run that saved one (save_steps), or start a new run")
        out_dir = max(runs)[1]
    else:
        out_dir = root / resume
        if not (out_dir / "job.json").is_file():
            raise PlanError(f"no run {resume} in {root} (no {out_dir}/job.json)", where,
                            "give the run_name of a run launched before (ls outputs/), or -e resume=latest")
    ckpt = checkpoints.latest_complete(out_dir)
    if ckpt is None:
        seen = [f"{d.name}: {'; '.join(checkpoints.verify(d)[:2])}" for d in checkpoints.checkpoints(out_dir)]
        raise PlanError(f"run {out_dir.name} has no complete checkpoint in {out_dir}"
                        + (f" ({' | '.join(seen)})" if seen else " (none was saved or brought back)"), where,
                        "a run saves one every save_steps steps; start a new run, or resume another")
    rec = checkpoints.marker(ckpt)
    return {"run": out_dir.name, "out_dir": str(out_dir), "job": json.loads((out_dir / "job.json").read_text()),
            "checkpoint": str(ckpt), "step": int(rec["step"]), "world_size": int(rec["world_size"]),
            "zero_stage": rec.get("zero_stage"),
            "optimizer_shards": any(checkpoints.RANK_SHARD.search(Path(f).name) for f in rec.get("files", {}))}


def resize(source: dict, world_size: int) -> dict | None:
    """How a run resumed on another world size keeps its global batch (samples per optimizer step).

    The global batch of the checkpoint's run is micro x accumulation x its world size (its job.json and the
    checkpoint's marker); on ``world_size`` ranks the micro batch stays and the gradient accumulation steps become
    global / (micro x world_size), which must be a whole number >= 1. Its optimizer state goes through DeepSpeed's
    universal checkpoint when ZeRO (stage >= 1, or DeepSpeed's bf16 optimizer at stage 0) split it over the ranks;
    a ZeRO-0 checkpoint of a client or DeepSpeed optimizer holds it whole (rank 0's model states) and loads as it is.

    Args:
        source: resume_source's result.
        world_size: ranks of the cluster it resumes on.

    Returns:
        None when the world size is the checkpoint's; else {"from_world_size", "world_size", "global_batch",
        "micro", "accumulation" (the new one), "from_accumulation", "universal": bool}.

    Raises:
        PlanError: the global batch cannot be kept on ``world_size`` ranks (the numbers, and the world sizes that
        keep it, are named).
    """
    old_world = int(source["world_size"])
    if int(world_size) == old_world:
        return None
    job = source["job"]
    micro, accum = int(job["per_device_train_batch_size"]), int(job["gradient_accumulation_steps"])
    glob = micro * accum * old_world
    if glob % (micro * int(world_size)):
        fits = [w for w in range(1, glob // micro + 1) if (glob // micro) % w == 0]
        raise PlanError(f"run {source['run']}'s global batch {glob} (micro batch {micro} x accumulation {accum} x "
                        f"world size {old_world}) cannot be kept on world size {world_size}: {glob} is not micro "
                        f"batch {micro} x {world_size} ranks x a whole number of accumulation steps",
                        f"-e resume={source['run']}",
                        f"resume on a world size that divides {glob // micro} ({', '.join(map(str, fits))} ranks), "
                        "or start a new run")
    stage = source.get("zero_stage")
    stage = int(stage) if stage is not None else int(job.get("zero_stage") or 0)
    return {"from_world_size": old_world, "world_size": int(world_size), "global_batch": glob, "micro": micro,
            "accumulation": glob // (micro * int(world_size)), "from_accumulation": accum,
            "universal": stage >= 1 or bool(source.get("optimizer_shards"))}


def _same_value(key: str, given, recorded) -> bool:
    """Whether ``given`` (an override as -e passes it: "5" for 5) is the job file's ``recorded`` value of ``key``,
    compared after train.common.job.coerce where the job schema knows the key (a value it cannot convert differs)."""
    if key in jobmod.SCHEMA:
        try:
            given = jobmod.coerce(key, given, f"-e {key}")
        except jobmod.JobError:
            return False
    return given == recorded


def _resume_overrides(source: dict, overrides: dict, script: str | None) -> dict:
    """The overrides of a resumed run: the run's own job, changed only where RESUME_MAY_CHANGE allows."""
    old = source["job"]
    where = f"-e resume={source['run']}"
    if (script is None) != ("model" in old):
        raise PlanError(f"run {source['run']} was {'a preset run' if 'model' in old else 'a script run'}", where,
                        "resume it the way it was launched (with or without -e script=)")
    keys = resolvemod.override_keys()
    out = {k: v for k, v in old.items() if k in keys}
    out.update({k: v for k, v in RESUME_KEYS_ADDED.items() if k not in old})
    for key, value in overrides.items():
        if key == "model":
            if script is None and value != old.get("model"):
                raise PlanError(f"model {value} is not run {source['run']}'s model {old.get('model')}", where,
                                f"drop -e model, or start a new run for {value}")
            continue
        if key in ("run_name", "accelerator") or key in RESUME_MAY_CHANGE:
            out[key] = value
        elif key in old and not _same_value(key, value, old[key]):
            raise PlanError(f"{key} {value!r} differs from run {source['run']}'s {old[key]!r}", where,
                            f"a resumed run keeps its job; -e may change only {', '.join(RESUME_MAY_CHANGE)}")
    out["run_name"] = source["run"]
    if script is None:
        out["model"] = old["model"]
    return out


def _launcher_port(launcher: str, master_port) -> int:
    """The rendezvous port (int) after checking the launcher's name and the port; PlanError otherwise."""
    if launcher not in LAUNCHERS:
        raise PlanError(f"launcher is {launcher!r}", "-e launcher",
                        "use pdsh (default: the head starts every rank over ssh), ansible (Ansible starts "
                        "`deepspeed --no_ssh --node_rank N` on every node; no ssh between the nodes) or slurm (a "
                        "Slurm job submitted from the head with sbatch; srun starts that command on every node)")
    try:
        port = int(str(master_port).strip())
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise PlanError(f"train_master_port is {master_port!r}", "-e train_master_port",
                        "give a free TCP port on the head (1-65535), default 29500")
    return port


def _script_inputs(script: str, script_args_value):
    """What a user's script brings: (its arguments as a list, the job overrides they imply, its own ``--deepspeed``
    config (source, text, dict) or None, its parsed source tree). PlanError for a missing script or bad arguments."""
    if not Path(script).is_file():
        raise PlanError(f"script {script} is not a file on the controller", "-e script",
                        "give -e script=<path to your training script, e.g. run_mlm.py> (relative paths are "
                        f"from {os.getcwd()})")
    try:
        user_args = script_args.split(script_args_value)
        return (user_args, script_args.job_overrides(user_args), script_args.deepspeed_config(user_args),
                parse_script(script))
    except script_args.ScriptArgsError as exc:
        raise PlanError(str(exc), "-e script_args", "see docs/own-script.md") from None


def _launch_commands(*, launcher: str, shape: dict, venv_dir: str, run_dir: str, port: int, entry: list[str],
                     argv: list[str], output: str, zero_stage: int | None) -> tuple[dict, dict]:
    """The argv of every node that starts ranks and the path of its log: ({node: argv}, {node: log path}).

    pdsh: the head alone starts DeepSpeed's launcher; ansible and slurm: every node, with its node rank (slurm: srun
    starts it inside the job, roles/train_launch/tasks/launch_slurm.yml). On more than one node
    the head's launcher runs under train.node.checkpoints supervise, which gathers every node's part of each
    checkpoint onto the head while the run goes on (output_dir is node-local)."""
    nodes = list(shape["nodes"])
    head = nodes[0]
    deepspeed, hostfile = f"{venv_dir}/bin/deepspeed", f"{run_dir}/hostfile"
    starters = [head] if launcher == "pdsh" else nodes
    logs = {n: f"{run_dir}/{'train.log' if n == head else f'train-{n}.log'}" for n in starters}
    commands = {
        n: launch.deepspeed_argv(deepspeed, hostfile, shape["master_addr"], port, entry, argv,
                                 include=shape.get("include") or "", single_node=bool(shape["single_node"]),
                                 node_rank=nodes.index(n) if launcher != "pdsh" else None)
        for n in starters
    }
    if len(nodes) > 1:
        commands[head] = [f"{venv_dir}/bin/python", "-m", "train.node.checkpoints", "supervise", "--output", output,
                          "--world-size", str(int(shape["world_size"])),
                          *(["--zero-stage", str(zero_stage)] if zero_stage is not None else []),
                          "--hosts", ",".join(nodes[1:]), "--", *commands[head]]
    return commands, logs


@dataclass(frozen=True)
class Paths:
    """Where the run's files are: ``out_dir`` on the controller, the others on every node (the same path there)."""

    out_dir: str  # <output_root>/<run_name> on the controller: what comes back
    run_dir: str  # <dsc_root>/runs/<run_name>: job.json, ds_config.json, hostfile, the launcher's logs
    code_dir: str  # <dsc_root>/code: train/ and a user's script, staged
    artifact_dir: str  # <local_ssd_dir>/data/<data_key>: the prepared dataset
    script_data_dir: str  # <local_ssd_dir>/user-data/<name> of -e script_data, or ""
    output: str  # the ranks' output_dir (checkpoints, model)
    hostfile: str  # <run_dir>/hostfile
    log: str  # the head's launcher log


@dataclass(frozen=True)
class Script:
    """A user's script (script mode)."""

    src: str  # its absolute path on the controller
    name: str  # its file name, staged as <code_dir>/scripts/<name>
    imports: list[str]  # the top-level packages it imports (top_level_imports), checked on every node


@dataclass(frozen=True)
class Resumed:
    """The checkpoint a resumed run (-e resume=) goes on from."""

    run: str  # the run's name (the resumed run keeps it)
    step: int  # the checkpoint's global step
    checkpoint: str  # its directory on the controller
    node_checkpoint: str  # where it is staged on every node (--resume_from_checkpoint)
    resize: dict | None = None  # on another world size: resize()'s answer (the global batch kept)
    universal: bool = False  # the head converts it into DeepSpeed's universal checkpoint (resize()["universal"])


@dataclass(frozen=True)
class Checkpoints:
    """What a preset run's checkpoints take on each node's disk (train.controller.memory.checkpoint_bytes,
    checkpoints_kept); the preflight compares ``peak`` with the free space."""

    bytes: dict[str, int]  # {node: bytes of one checkpoint there} (the head holds every rank's gathered part)
    kept: int  # how many are on a node's disk at once
    peak: dict[str, int]  # {node: bytes * kept}


@dataclass(frozen=True)
class Plan:
    """The plan of one run, checked where it is built (``__post_init__``); :meth:`as_dict` is what the roles read
    as ``train_plan`` (a test checks every ``train_plan.<key>`` they read is a field here)."""

    run_name: str
    mode: str  # MODES
    job: dict  # the resolved job (in script mode only train.common.job.SCRIPT_KEYS: what applies to the script)
    ds_config: dict  # the run's DeepSpeed config
    ds_config_source: str  # "rendered", or the user's --deepspeed file (its exact text is then ds_config.json)
    files: dict[str, str]  # FILES: the exact text of each file staged to the nodes and kept in outputs/<run>/
    hosts: list[str]  # the nodes, head first
    head: str
    ranks: dict[str, int]  # {node: ranks (slots) it runs}
    world_size: int  # the sum of ``ranks``
    include: str  # DeepSpeed's --include value, or ""
    master_addr: str
    master_port: int
    single_node: bool
    launcher: str  # LAUNCHERS
    paths: Paths
    entry: list[str]  # what follows the launcher's options: --module train.rank.<entry> [script]
    argv: list[str]  # the entry's arguments (a script's own plus what the project added)
    script: Script | None  # script mode only
    script_data: str | None  # -e script_data (a directory on the head), or None
    launch: dict[str, list[str]]  # {node: argv} of the nodes that start ranks (pdsh: the head alone)
    logs: dict[str, str]  # {node: its launcher log} of those nodes
    zero_stage: int | None  # the ds_config's ZeRO stage (None when a user's config gives none)
    resume: Resumed | None
    memory: str | None  # the memory plan's line (train.controller.memory), or None
    checkpoints: Checkpoints | None  # preset runs only
    restart: dict  # the restart policy: the job's {"max_restarts", "min_nodes"} (train/controller/restart.py)
    attempts: list  # a restarted run's faults so far (-e train_restart; its run directory's attempts.json)
    summary: list[str] = field(default_factory=list)  # the lines train.yml shows (summary())

    def __post_init__(self):
        """Checks what the roles rely on; ValueError names the broken rule (a bug in the planning, not a user's)."""
        def rule(ok: bool, what: str):
            if not ok:
                raise ValueError(f"plan of run {self.run_name!r}: {what}")

        rule(self.mode in MODES, f"mode {self.mode!r} is not one of {MODES}")
        rule(self.launcher in LAUNCHERS, f"launcher {self.launcher!r} is not one of {LAUNCHERS}")
        rule(bool(self.hosts) and self.head == self.hosts[0], "the head is not the first of the hosts")
        rule(list(self.ranks) == list(self.hosts) and all(isinstance(r, int) and r > 0 for r in self.ranks.values()),
             f"ranks {self.ranks} are not a positive count for each host, in the hosts' order")
        rule(self.world_size == sum(self.ranks.values()), f"world size {self.world_size} is not the sum of {self.ranks}")
        rule(1 <= self.master_port <= 65535, f"master port {self.master_port}")
        rule(self.single_node == (len(self.hosts) == 1), "single_node does not match the hosts")
        rule(set(FILES) == set(self.files) and all(isinstance(t, str) for t in self.files.values()),
             f"files are {sorted(self.files)}, not {FILES}")
        rule(self.head in self.launch and list(self.launch) == list(self.logs) and set(self.launch) <= set(self.hosts),
             "the nodes that start ranks and their logs differ, or leave out the head")
        rule(self.launcher != "pdsh" or list(self.launch) == [self.head], "pdsh: the head alone starts ranks")
        rule(self.paths.log == self.logs[self.head], "paths.log is not the head's launcher log")
        rule((self.script is None) == (self.mode == "preset"), "a script plan has no script, or a preset plan has one")
        rule(self.mode == "script" or self.checkpoints is not None, "a preset plan has no checkpoint estimate")
        rule(self.zero_stage in (None, 0, 1, 2, 3), f"ZeRO stage {self.zero_stage!r}")
        rule(self.resume is None or self.resume.run == self.run_name, "a resumed run changed its name")

    @classmethod
    def keys(cls) -> list[str]:
        """The keys of :meth:`as_dict`, in order."""
        return [f.name for f in fields(cls)]

    def as_dict(self) -> dict:
        """The plan as plain JSON types (nested dataclasses as dicts): the ``train_plan`` fact the roles read."""
        return asdict(self)


def _check_launcher(launcher: str, master_port, shape: dict) -> int:
    """Step 1: the launcher and the rendezvous port (returned as int); PlanError for a bad one, or for a Slurm job
    the cluster's shape cannot give."""
    port = _launcher_port(launcher, master_port)
    if launcher == "slurm" and len(set(shape["ranks"].values())) > 1:
        # sbatch's --gres=gpu:N and srun's --cpus-per-task are the same on every node of a job
        raise PlanError(f"launcher slurm with different slots per node ({shape['ranks']})", "slots (inventory)",
                        "give every node the same slots for a Slurm job, or use -e launcher=pdsh")
    if launcher == "slurm" and shape.get("include"):
        # Slurm gives a job whole GPUs of its own choosing (--gres=gpu:N), which DeepSpeed's --include cannot pick
        raise PlanError(f"launcher slurm with gpu_indices ({shape['include']})", "gpu_indices (inventory)",
                        "let Slurm give the GPUs: drop gpu_indices and set slots to the GPUs a node gives a job, "
                        "or use -e launcher=pdsh")
    return port


@dataclass
class _Inputs:
    """What the job is resolved from (step 2): the overrides, the preset, and a script's own inputs."""

    overrides: dict
    model: str
    source: dict | None = None  # resume_source's answer for -e resume=
    user_args: list[str] | None = None  # the script's arguments
    from_script: dict = field(default_factory=dict)  # the job overrides they imply
    user_ds: tuple | None = None  # the script's own --deepspeed config: (source, text, dict)
    tree: object = None  # the script's parsed source (ast.Module)


def _inputs(overrides: dict, accelerator: str, output_root: str, script: str | None, script_args_value,
            script_data: str | None, resume: str | None, now) -> _Inputs:
    """Step 2: the overrides of the run (a resumed run's own job, a script's defaults and arguments), the preset's
    name, a script's inputs; PlanError for script arguments or data without a script."""
    overrides = dict(overrides)
    source = None
    if resume not in (None, ""):
        source = resume_source(output_root, str(resume))
        overrides = _resume_overrides(source, overrides, script)
    overrides["accelerator"] = accelerator
    model = overrides.pop("model", None) or "bert"
    got = _Inputs(overrides=overrides, model=model, source=source)
    if script is not None:
        got.user_args, got.from_script, got.user_ds, got.tree = _script_inputs(script, script_args_value)
        stem = re.sub(r"[^A-Za-z0-9_.-]", "-", Path(script).stem) or "script"
        overrides.setdefault("run_name", f"{stem}-{_run_stamp(now)}")
        # the script's own Trainer runs with its own arguments: none of the preset's GPU defaults (global batch,
        # client optimizer, torch_autocast, compile, masked head) are imposed on it unless given with -e
        for key, value in SCRIPT_DEFAULTS.items():
            overrides.setdefault(key, value)
        overrides.update(got.from_script)
    elif script_args_value not in (None, "", []):
        raise PlanError("script_args is given but no script", "-e script_args",
                        "add -e script=<your training script>, or drop script_args")
    elif script_data is not None:
        raise PlanError("script_data is given but no script", "-e script_data",
                        "add -e script=<your training script>, or use -e dataset_path= for the built-in trainer")
    return got


def _job_and_config(got: _Inputs, script: str | None, shape: dict, gpu_memory_bytes, host_memory_bytes, now,
                    templates_dir: str):
    """Step 3: the validated job (train.controller.resolve), the memory estimate and the DeepSpeed config (rendered,
    made concrete for a script without an HF Trainer, or the script's own). Returns (job -- for a script only what
    applies to it --, data_key, estimate or None, ds_config, ds_text or None, ds_source)."""
    world = int(shape["world_size"])
    gpu = gpu_memory_bytes if script is None else None  # a script's own model is not known here
    per_node = max(int(r) for r in shape["ranks"].values())
    job = resolvemod.resolve(got.model, got.overrides, now=now, world_size=world, gpu_memory_bytes=gpu,
                             host_memory_bytes=host_memory_bytes, ranks_per_node=per_node)
    estimate = memory.describe(job, world, gpu, host_memory_bytes, per_node)
    ds_config = dsconfig.render(job, world, templates_dir)
    ds_text, ds_source = None, "rendered"
    data_key = job["data_key"]
    if script is not None:
        concrete = got.user_ds is None and not uses_hf_trainer(got.tree)
        if got.user_ds is not None:  # the user's own --deepspeed config is the run's, exactly as written
            ds_source, ds_text, ds_config = got.user_ds
        elif concrete:
            ds_config = dsconfig.concrete(ds_config, job, world)
        # record only what applies to the script (train.common.job.SCRIPT_KEYS), not the preset's model and data keys
        job = resolvemod.for_script(job, max_steps_applies="max_steps" in got.from_script or concrete)
    return job, data_key, estimate, ds_config, ds_text, ds_source


def _paths(run: str, data_key: str, source: dict | None, shape: dict, node: dict, output_root: str,
           script_data: str | None, resume: str | None) -> Paths:
    """Step 4: the run's paths (its output directory is the run's own: PlanError when it exists, unless resumed)."""
    out_dir = str(Path(output_root) / run)
    if os.path.lexists(out_dir) and source is None:
        raise PlanError(f"{out_dir} already exists", f"run_name {run}",
                        "pick another -e run_name=... or move the old run away; results are never overwritten")
    dsc_root, local_ssd = node["dsc_root"], node["local_ssd_dir"]
    run_dir = f"{dsc_root}/runs/{run}"
    return Paths(out_dir=out_dir, run_dir=run_dir, code_dir=f"{dsc_root}/code",
                 artifact_dir=f"{local_ssd}/data/{data_key}",
                 script_data_dir=f"{local_ssd}/user-data/{Path(script_data.rstrip('/')).name}" if script_data else "",
                 output=f"{run_dir}/output", hostfile=f"{run_dir}/hostfile", log="")


def _entry_and_argv(job: dict, got: _Inputs, script: str | None, paths: Paths, resized: dict | None = None):
    """Step 5: what the launcher starts on every rank: (entry, argv, the ranks' output_dir, Resumed or None); a
    script resumed on another world size gets the accumulation steps that keep its global batch (``resized``)."""
    ds_path = f"{paths.run_dir}/ds_config.json"
    if script is None:
        entry = list(PRESET_ENTRY)
        argv = resolvemod.argv(job, paths.artifact_dir, paths.output, ds_path)
        output = paths.output
    else:
        entry = [*RUN_SCRIPT, f"scripts/{Path(script).name}"]
        try:
            given = script_args.with_deepspeed(got.user_args, ds_path) if got.user_ds is not None else got.user_args
            argv = script_args.complete(given, paths.output, ds_path, paths.script_data_dir or None)
        except script_args.ScriptArgsError as exc:
            raise PlanError(str(exc), "-e script_args", "see docs/own-script.md") from None
        output = script_args.output_dir_of(argv, paths.output)
    resumed = None
    if got.source is not None:
        name = Path(got.source["checkpoint"]).name
        resumed = Resumed(run=job["run_name"], step=got.source["step"], checkpoint=got.source["checkpoint"],
                          node_checkpoint=f"{output}/{name}", resize=resized,
                          universal=bool(resized and resized["universal"]))
        if resized is not None and script is not None:  # the script's own argument gives way (argparse: last wins)
            argv = [*argv, "--gradient_accumulation_steps", str(resized["accumulation"])]
        argv = [*argv, "--resume_from_checkpoint", resumed.node_checkpoint]
    return entry, argv, output, resumed


def _checkpoint_sizes(job: dict, ranks: dict, head: str, script: str | None) -> Checkpoints | None:
    """Step 7: what the run's checkpoints take at most on each node's disk (preset runs; None for a script)."""
    one = memory.checkpoint_bytes(job, ranks, head) if script is None else None
    if not one:
        return None
    kept = memory.checkpoints_kept(job)
    return Checkpoints(bytes=one, kept=kept, peak={n: b * kept for n, b in one.items()})


def build(*, overrides: dict, accelerator: str, shape: dict, node: dict, output_root: str, templates_dir: str,
          launcher: str = "pdsh", master_port=29500, script: str | None = None, script_args_value=None,
          script_data: str | None = None, resume: str | None = None, gpu_memory_bytes: int | None = None,
          host_memory_bytes: int | None = None, restart_state=None, now=None) -> Plan:
    """Plan one run. Writes nothing; reads the controller's file system (script, output_root) only.

    The steps, in order: the launcher and port (_check_launcher), the job's inputs (_inputs: resume, script), the
    job and its DeepSpeed config (_job_and_config), the paths (_paths), the entry and its arguments
    (_entry_and_argv), every node's launch command (_launch_commands), the checkpoints' sizes (_checkpoint_sizes),
    then the Plan (checked as it is made) with launch.json's text and the summary.

    Args:
        overrides: job overrides (see job_overrides); ``model`` among them picks the preset (default bert).
        accelerator: the head's ``accelerator`` inventory fact (cpu or cuda).
        shape: the cluster shape (roles/cluster_shape): ``nodes`` (head first), ``ranks`` {node: ranks},
            ``world_size``, ``include`` (``--include`` value or ""), ``master_addr``, ``single_node``.
        node: the head's paths: ``dsc_root``, ``local_ssd_dir``, ``venv_dir`` (every node has the same ones;
            the preflight checks that).
        output_root: directory on the controller that receives ``<run_name>/`` (must not exist yet).
        templates_dir: templates/deepspeed (zero0.json .. zero3.json).
        launcher: LAUNCHERS.
        master_port: the rendezvous port on the head.
        script: a user's training script on the controller (script mode), or None for train.rank.pretrain.
        script_args_value: the script's arguments (list, or one shell-quoted string).
        script_data: a directory on the head (train_plan refuses a file) staged to every node as ``{data}``.
        resume: ``-e resume=``: a run name or ``latest`` (resume_source); the run goes on from its newest complete
            checkpoint in its own results directory, same job (RESUME_MAY_CHANGE aside) and global batch; on
            another world size the accumulation steps follow it (resize) and a ZeRO checkpoint loads through
            DeepSpeed's universal checkpoint (``"checkpoint": {"load_universal": true}`` in ds_config).
        gpu_memory_bytes: memory of the smallest GPU of the run's nodes (cuda), or None: a preset run's ZeRO stage,
            offload, activation checkpointing and micro batch left ``auto`` are then chosen to fit it
            (train.controller.memory), and the summary shows the estimate.
        host_memory_bytes: memory of the smallest node (cuda), or None: bounds the optimizer offload the plan may
            choose.
        restart_state: ``-e train_restart`` of a restart (train.controller.restart.decide's state), or None: its
            faults become the plan's ``attempts`` (the run directory's attempts.json).
        now: aware datetime for default run names (tests).

    Returns:
        the :class:`Plan` (its fields say what each key of ``as_dict()`` holds). launch.json records exactly what
        is started: entry, argv -- a script's own arguments plus what the project added --, hosts, ranks, master,
        the launch commands.

    Raises:
        PlanError / train.common.job.JobError: any user mistake (bad launcher, missing script, bad script arguments, a bad
        job value, a ds_config that does not fit, an existing output directory).
    """
    port = _check_launcher(launcher, master_port, shape)
    if script is not None:
        script = str(script)
    got = _inputs(overrides, accelerator, output_root, script, script_args_value, script_data, resume, now)
    resized = resize(got.source, int(shape["world_size"])) if got.source is not None else None
    if resized is not None:  # the global batch stays: the accumulation steps follow the world size
        got.overrides["gradient_accumulation_steps"] = resized["accumulation"]
        if isinstance(got.overrides.get("train_batch_size"), int):
            got.overrides["train_batch_size"] = resized["global_batch"]
    job, data_key, estimate, ds_config, ds_text, ds_source = _job_and_config(
        got, script, shape, gpu_memory_bytes, host_memory_bytes, now, templates_dir)
    if resized is not None and resized["universal"]:
        # the engine loads the checkpoint's universal tag (latest_universal), which the head converts at staging
        ds_config = {**ds_config, "checkpoint": {**(ds_config.get("checkpoint") or {}), "load_universal": True}}
        ds_text = None if ds_text is None else _json_text(ds_config)
    run = job["run_name"]
    paths = _paths(run, data_key, got.source, shape, node, output_root, script_data, resume)
    entry, argv, output, resumed = _entry_and_argv(job, got, script, paths, resized)

    nodes = list(shape["nodes"])
    head = nodes[0]
    stage = (ds_config.get("zero_optimization") or {}).get("stage") if isinstance(ds_config, dict) else None
    stage = stage if isinstance(stage, int) else None
    commands, logs = _launch_commands(launcher=launcher, shape=shape, venv_dir=node["venv_dir"],
                                      run_dir=paths.run_dir, port=port, entry=entry, argv=argv, output=output,
                                      zero_stage=stage)
    ranks = {n: int(shape["ranks"][n]) for n in nodes}
    mode = "preset" if script is None else "script"
    script_info = (Script(src=str(Path(script).resolve()), name=Path(script).name,
                          imports=top_level_imports(got.tree)) if script else None)
    files = {"job.json": _json_text(job),
             "ds_config.json": ds_text if ds_text is not None else _json_text(ds_config),
             "launch.json": _json_text({
                 "run_name": run, "mode": mode, "script": asdict(script_info) if script_info else None,
                 "entry": entry, "argv": argv, "ds_config_source": ds_source, "hosts": nodes, "ranks": ranks,
                 "world_size": int(shape["world_size"]), "master": f"{shape['master_addr']}:{port}",
                 "launcher": launcher, "launch": commands})}
    # the restarts' floor must hold at the launch: a run that starts below it would be refused only at its first fault
    if job["min_nodes"] > len(nodes):
        raise PlanError(f"min_nodes {job['min_nodes']} is more than the {len(nodes)} node"
                        f"{'s' if len(nodes) != 1 else ''} this run launches on ({', '.join(nodes)})", "-e min_nodes",
                        f"set min_nodes to {len(nodes)} or less (the floor the restarts keep)")
    plan = Plan(
        run_name=run, mode=mode, job=job, ds_config=ds_config, ds_config_source=ds_source, files=files,
        hosts=nodes, head=head, ranks=ranks, world_size=int(shape["world_size"]),
        include=shape.get("include") or "", master_addr=shape["master_addr"], master_port=port,
        single_node=bool(shape["single_node"]), launcher=launcher, paths=replace(paths, log=logs[head]),
        entry=entry, argv=argv, script=script_info, script_data=script_data, launch=commands, logs=logs,
        zero_stage=stage, resume=resumed, memory=estimate.line() if estimate is not None else None,
        checkpoints=_checkpoint_sizes(job, ranks, head, script),
        restart={"max_restarts": job["max_restarts"], "min_nodes": job["min_nodes"]},
        attempts=list((restart_state or {}).get("faults") or []))
    return replace(plan, summary=summary(plan))


def summary(plan: Plan) -> list[str]:
    """The lines `train.yml` shows before it stages anything: job, ranks, batch arithmetic, launch, results."""
    job, world = plan.job, plan.world_size
    hosts = plan.hosts
    if plan.mode == "script":
        steps = f"max_steps {job['max_steps']}" if "max_steps" in job else "trains by epochs"
        what = (f"run {plan.run_name}: your script {plan.script.name} with its own arguments "
                f"({steps}, precision {job['precision']}, ZeRO stage {job['zero_stage']})")
    else:
        what = (f"run {plan.run_name}: {job['model']} ({job['model_size']}), {job['max_steps']} steps, seq "
                f"{job['max_seq_length']}, ZeRO stage {job['zero_stage']}, {job['precision']}")
    include = f" (deepspeed --include {plan.include})" if plan.include else ""
    micro, accum = job["per_device_train_batch_size"], job["gradient_accumulation_steps"]
    lines = [
        what,
        f"world size {world} = {' + '.join(str(plan.ranks[h]) for h in hosts)} ranks on {', '.join(hosts)}"
        f"{include}; master {plan.master_addr}:{plan.master_port}; launcher {plan.launcher}",
        f"micro batch {micro} x accumulation {accum} x world size {world} = global batch {micro * accum * world}",
    ]
    if plan.memory:
        lines.append(plan.memory)
    if plan.checkpoints:
        c = plan.checkpoints
        head, others = c.bytes[plan.head], [c.bytes[h] for h in hosts[1:]]
        lines.append(f"checkpoints: about {head / 1e9:.2f} GB each on {plan.head}"
                     + (f" (every rank's part gathered), {max(others) / 1e9:.2f} GB on each other node" if others
                        else "")
                     + f"; up to {c.kept} on a node's disk at once (save_total_limit "
                       f"{job.get('save_total_limit') if job.get('save_total_limit') is not None else 'null'}, "
                       f"save_steps {job['save_steps']})")
    if plan.mode == "script":
        lines.append(f"script arguments: {' '.join(plan.argv)}")
        if plan.ds_config_source != "rendered":
            lines.append(f"DeepSpeed config: yours ({plan.ds_config_source}), staged as "
                         f"{plan.paths.run_dir}/ds_config.json")
    if plan.resume:
        r = plan.resume
        lines.append(f"resuming run {r.run} from step {r.step}: {r.checkpoint} is staged to every node as "
                     f"{r.node_checkpoint}")
        z = r.resize
        if z:
            how = ("its ZeRO optimizer state through DeepSpeed's universal checkpoint, converted once on "
                   f"{plan.head} beside it" if z["universal"] else "its optimizer state whole (ZeRO-0)")
            lines.append(f"world size {z['from_world_size']} -> {z['world_size']}: the global batch "
                         f"{z['global_batch']} is kept (accumulation {z['from_accumulation']} -> {z['accumulation']}); "
                         f"{how}")
    p = plan.restart
    lines.append(f"restarts: up to {p['max_restarts']} by itself from the newest complete checkpoint on a fault "
                 f"(-e max_restarts), on the nodes that answer, down to {p['min_nodes']} "
                 f"node{'s' if p['min_nodes'] != 1 else ''} (-e min_nodes)" if p["max_restarts"] else
                 "restarts: off (-e max_restarts=0): a fault stops the run")
    lines.append(f"launch on {plan.head}: {' '.join(plan.launch[plan.head])}")
    lines.append(f"results will come back to {plan.paths.out_dir}")
    return lines

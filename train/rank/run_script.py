#!/usr/bin/env python
"""Run a user's own HF Trainer script (e.g. transformers' run_mlm.py) on every rank, unchanged, with the project's
rank runtime around it (train.rank.bootstrap and train.rank.hooks: the same bootstrap, CPU fixes, progress and metrics as train/rank/pretrain.py).

    deepspeed --hostfile H ... --module train.rank.run_script scripts/run_mlm.py --train_file ... --deepspeed ds_config.json ...

Before the script runs (``runpy.run_path(script, run_name="__main__")`` with ``sys.argv = [script, *args]``, exactly
as ``python script args`` would), ``hooks.install_hooks`` wraps transformers' own classes -- the script is not
edited:

* ``TrainingArguments.__post_init__``: on a CPU node under DeepSpeed, give accelerate the process-group backend
  first (patches.init_cpu_deepspeed_distributed), or the Trainer believes world size is 1;
* ``Trainer.__init__``: tell the Trainer whether the model really uses ``num_items_in_batch``
  (patches.fix_loss_kwargs_flag; otherwise BERT's loss is reported world-size times too big), then attach the
  ProgressCallback (``<output_dir>/progress.jsonl``, which train.yml prints as the job runs) and the
  MetricsCallback (``metrics.json`` and ``loss_curve.png`` when training ends; rewritten with the eval metrics
  after a ``trainer.evaluate()`` that follows).

metrics.json's run_name comes from ``DSC_RUN_NAME``, else the job file (``DSC_JOB_FILE``, or job.json beside the
output directory), else ``--run_name`` (see train.rank.metrics). A script that builds no Trainer still runs; it just
writes no progress.jsonl (train.yml then streams its log). Importing this module changes nothing.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from train.rank import bootstrap  # standard library only: importing it changes nothing


def main(argv: list[str] | None = None) -> int:
    """``run_script.py SCRIPT [ARGS...]``: bootstrap the rank, install the hooks, run SCRIPT as ``__main__``.

    Args:
        argv: the arguments after run_script.py (default sys.argv[1:]); a leading ``--local_rank=N`` from the
            launcher is handed on to the script, where it would have been had the launcher started it.

    Returns:
        0 when the script returned; 2 (one ``error:`` line on stderr) when SCRIPT is not a file. The script's own
        SystemExit and exceptions propagate.
    """
    info = bootstrap.bootstrap()
    argv = sys.argv[1:] if argv is None else argv
    launcher_args = [a for a in argv[:1] if a.startswith("--local_rank")]
    argv = argv[len(launcher_args):]
    if not argv or not Path(argv[0]).is_file():
        print(f"error: [rank {info.rank}] usage: run_script.py SCRIPT [ARGS...]; script "
              f"{argv[0] if argv else '(none)'} not found on {info.host}", file=sys.stderr)
        return 2
    script = str(Path(argv[0]).resolve())
    from train.rank import hooks  # after bootstrap: it imports transformers (and torch)

    hooks.install_hooks(script)
    sys.argv = [script, *launcher_args, *argv[1:]]
    sys.path.insert(0, str(Path(script).parent))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())

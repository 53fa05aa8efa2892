"""This project's Python, in packages named for where they run (docs/developers/architecture.md, "Run sites").

* ``train.common``: what every site shares -- the job schema and its validation, atomic JSON writes. Standard
  library and PyYAML only.
* ``train.controller``: the machine that runs ansible-playbook -- the plan, the ``auto`` policy, the DeepSpeed
  config, a user script's arguments, the launch command, the followers' helpers. Imports no torch.
* ``train.data``: data preparation on the head and its verification on every node.
* ``train.node``: every node -- the run directory made ready, checkpoints (latest, gather, supervise) and the rank
  status files.
* ``train.rank``: every rank -- the entries ``train.rank.pretrain`` and ``train.rank.run_script`` and their runtime.
* ``train.tools``: development tools (the GPU benchmark's report); never staged to a node.

Only ``common``, ``data``, ``node`` and ``rank`` are staged to the nodes (roles/train_stage). Importing any module
changes nothing; heavy imports (torch, transformers, deepspeed) are inside functions or in the rank entries.
"""

"""Every rank: the entries ``python -m train.rank.pretrain`` and ``python -m train.rank.run_script`` (started by
DeepSpeed's launcher with ``--module``), and the runtime around them.

May import ``train.common`` and ``train.node``, never ``train.controller``.
"""

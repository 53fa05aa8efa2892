"""Every node: checkpoints (``python -m train.node.checkpoints latest|gather|supervise``) and the rank status
files with the one finder of a run's processes (``rank_status``, also run as a plain script by the roles).

Standard library only, no imports from other ``train`` packages: these modules run with any Python 3.
"""

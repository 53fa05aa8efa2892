"""Pre-training code that runs on the cluster nodes (and, for job.py / dsconfig.py, on the Ansible controller).

Keep this file free of heavy imports (no torch, transformers or deepspeed): the controller's python imports
train.job and train.dsconfig with only the standard library and PyYAML available.
"""

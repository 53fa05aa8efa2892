"""The controller (where ansible-playbook runs): plan a run, resolve presets and the ``auto`` policy, render the
DeepSpeed config, read a user script's arguments, build launch commands, and the followers' helpers.

Imported by the roles' action and filter plugins. No torch; may import ``train.common`` and ``train.node``.
"""

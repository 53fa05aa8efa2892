"""Data preparation (``python -m train.data.prepare_data`` on the head) and its verification on every node:
raw-text sources (``corpus``), the published artifact with its MANIFEST and verified stamp (``artifact``).
"""

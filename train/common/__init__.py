"""Shared by every run site: the job schema and its validation (``job``), atomic JSON writes (``jsonio``).

Standard library and PyYAML only; imports nothing else from ``train``.
"""

"""Development tools run from a checkout, never staged to a node: ``python -m train.tools.bench`` (the GPU
benchmark's tokenizer padding and report, molecule/gpu/bench.sh).
"""

"""The Transformer of "Attention Is All You Need", written to read beside the paper: its
Linear layer (oneDNN matmuls on CPU) and the key/value cache that decoding feeds one token a step.

May import: mtcli.config. Knows nothing about text, files, search, rich or click.
"""

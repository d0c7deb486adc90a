"""Search over token ids: greedy, beam, sampling, lexically constrained beam search, and
word alignments from the attention a search recorded.

May import: mtcli.model, mtcli.config. Knows nothing about text files, tokenizers or the CLI.
"""

"""mtcli: command-line neural machine translation (sentencepiece + Transformer + sacrebleu)."""

__version__ = "0.1.0"

"""What mtcli keeps on disk: model directories (checked without torch), checkpoints, the
registry of installed models, the exports (CTranslate2, Hugging Face MarianMT, Argos Translate)
and the MarianMT import.

May import: mtcli.model, mtcli.data, mtcli.config, mtcli.errors, mtcli.files. Never decoding,
engines, training, serving or the CLI.
"""

"""What mtcli keeps on disk: model directories (checked without torch), checkpoints, the
registry of installed models, and the exports: CTranslate2, Hugging Face MarianMT, Argos Translate.

May import: mtcli.model, mtcli.data, mtcli.config, mtcli.errors, mtcli.files. Never decoding,
engines, training, serving or the CLI.
"""

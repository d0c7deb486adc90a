"""Text and token ids, before any model: reading lines, parallel corpora, the tokenizer,
batches of ids, the glossary's terms, the language of a line, and corpus preparation.

May import: mtcli.config, mtcli.errors, mtcli.device, mtcli.files. Never the model, decoding,
engines, training, serving or the CLI; never rich or click.
"""

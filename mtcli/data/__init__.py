"""Text and token ids, before any model: reading lines, parallel corpora, the tokenizer, corpora
stored once as token ids (token_store), batches of ids, and corpus preparation (known corpora,
and any aligned corpus of the user's).

May import: mtcli.config, mtcli.errors, mtcli.device, mtcli.files. Never the model, decoding,
engines, training, serving or the CLI; never rich or click.
"""

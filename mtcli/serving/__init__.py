"""`mtcli serve`'s HTTP app: LibreTranslate's API and mtcli's own, request checks, the
batching queue, connection deadlines and caps, the web page.

May import: mtcli.engines, mtcli.store, mtcli.data, mtcli.config, mtcli.errors. Never decodes
by itself; never the CLI, rich or click.
"""

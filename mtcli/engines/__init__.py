"""Lines in, translations out: mtcli's own Translator and CTranslate2's, each line routed
to the model for its language, in chunks that keep input order. `build.build_translator` is the
one place a translator is made, for the CLI, the server and validation alike.

May import: mtcli.decoding, mtcli.model, mtcli.store, mtcli.data, mtcli.config, mtcli.errors,
mtcli.device. Prints nothing (warnings go to a callback); never rich or click.
"""

"""Real text around the translator: sentences, spans kept verbatim (numbers, URLs, addresses,
placeholders, code), casing, the language of a line, glossary terms, and the text layer that
puts them between the input and a model (layer.py). Pure functions over strings.

May import: mtcli.data, and the top-level modules. Never torch (nor the model, decoding,
engines, serving or the CLI); never rich or click.
"""

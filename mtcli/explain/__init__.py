"""`mtcli explain`: one sentence through the Transformer, step by step, with the model's own
numbers (read from its forward pass by hooks, never computed a second way). Imports engines,
decoding, model, store, data and the base modules; the terminal view lives in cli/, the page
here (page.py: plain HTML, no rich)."""

"""A loaded model made ready to decode and nothing else: int8 where asked, else its fp32
weights kept only packed for oneDNN.

Below both the translator's builder (engines/build.py) and the confidence estimator
(engines/confidence.py), which load models to decode: neither imports the other for it.
Imports no torch at module level.
"""

from __future__ import annotations


def ready_to_decode(loaded, quantize: str = ""):
    """`loaded` (a LoadedModel) made ready to decode and nothing else: its Linear layers in
    int8 where `quantize` asks for it ("": where its config.json recommends it), else its fp32
    weights kept only packed (decoding_only)."""
    from mtcli.engines.translator import quantize_int8
    from mtcli.store.model_dir import generation_defaults, quantization

    if quantization(quantize, generation_defaults(loaded.config)) == "int8":
        quantize_int8(loaded.model)
        return loaded
    return decoding_only(loaded)


def decoding_only(loaded):
    """`loaded` (a LoadedModel) with its fp32 CPU Linear weights kept only in oneDNN's packed
    layout (mtcli.model.linear.keep_only_packed_weights: 21 MB less for the shipped models).
    For a model loaded to decode and nothing else: it can no longer be trained, saved or
    quantized."""
    from mtcli.model.linear import keep_only_packed_weights

    keep_only_packed_weights(loaded.model)
    return loaded

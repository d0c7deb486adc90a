"""int8 Linear layers whose every output row depends on its own input row alone.

Why not torch.ao's dynamic int8 Linear: it takes one activation scale for the whole input, the
largest value of any row in the batch, so a sentence's translation and its confidence moved
with the sentences it was batched with (up to 0.081 in the shipped student's confidence). Here
each row gets its own scale (as CTranslate2 does); the int8 product is exact integer arithmetic
(oneDNN's int8 inner product, else torch._int_mm or a float32 matmul that is exact for these
sizes), so a row's result is the same bits in any batch.

The weight: int8 per output channel, w ≈ q_w · s_w with s_w = max|w| / 127 over the row of W.
The input: per row, x ≈ q_x · s_x with s_x = max|x| / 127. Then x·wᵀ ≈ (q_x·q_wᵀ) · s_x · s_w.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from mtcli.model.linear import with_rows_padded

LEVELS = 127  # symmetric int8: -127..127 (-128 is left out so that negation stays in range)
# a float32 sum of integer products stays exact while it stays below 2^24: K products of at
# most 127 · 127 each reach 2^24 at K = 1,040, past which the fallback would round
EXACT_IN_FLOAT = (1 << 24) // (LEVELS * LEVELS)


class Int8Linear(nn.Module):
    """y = x Wᵀ + b with W in int8 per output channel and x in int8 per row. Decoding only."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        weight = weight.detach().float()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        scale = weight.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / LEVELS
        # (in, out), as torch._int_mm takes its second operand
        self.register_buffer("qweight", (weight / scale[:, None]).round().to(torch.int8).t())
        self.qweight = self.qweight.contiguous()
        self.register_buffer("scale", scale)  # (out,)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        # oneDNN's copy of the weight in its own layout; not a buffer (nothing to save)
        self._packed = None
        if onednn_int8():
            self._packed = torch.ops.onednn.qlinear_prepack(self.qweight.t().contiguous(), None)
            self._zero_points = torch.zeros(self.out_features, dtype=torch.int64)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        return cls(linear.weight, linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out), on rows padded to ROW_MULTIPLE (a zero row has scale 0 and
        changes no other row): a new size at nearly every step fragmented the heap."""
        return with_rows_padded(self._rows, x)

    def _rows(self, flat: Tensor) -> Tensor:
        """(M, in) -> (M, out)."""
        row_scale = flat.abs().amax(dim=1, keepdim=True) / LEVELS  # (M, 1)
        quantized = (flat / row_scale.clamp(min=torch.finfo(torch.float32).tiny)).round_()
        y = self._weight_scaled_product(quantized.to(torch.int8)).mul_(row_scale)
        return y if self.bias is None else y.add_(self.bias)

    def _weight_scaled_product(self, q: Tensor) -> Tensor:
        """q (M, in) int8 -> (q · q_wᵀ) · s_w (M, out) in float32."""
        if self._packed is None:
            return integer_product(q, self.qweight).to(torch.float32).mul_(self.scale)
        # q taken as a tensor quantized with scale 1 and zero point 0; oneDNN multiplies the
        # exact int32 sums by s_w as it writes them (measured at the projection's shape: 0.87 ms
        # against torch._int_mm's 1.41 ms without that step, torch.ao's 1.56 ms with it)
        return onednn_product(q, self._packed, self.scale, self._zero_points)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, rowwise int8"


def integer_product(a: Tensor, b: Tensor) -> Tensor:
    """a (M, K) int8 · b (K, N) int8 -> (M, N) int32, exactly."""
    if _int_mm_works():
        return torch._int_mm(a, b)
    if a.size(1) > EXACT_IN_FLOAT:
        return (a.to(torch.int32) @ b.to(torch.int32)).to(torch.int32)
    return (a.to(torch.float32) @ b.to(torch.float32)).to(torch.int32)


def onednn_product(q: Tensor, packed, scale: Tensor, zero_points: Tensor) -> Tensor:
    """q (M, in) int8, taken as quantized with scale 1 and zero point 0, times the packed int8
    weight, each output column's exact int32 sum times its `scale` -> (M, out) float32."""
    args = (1.0, 0, packed, scale, zero_points, None, 1.0, 0, torch.float32, "none", [None], "")
    return torch.ops.onednn.qlinear_pointwise(q, *args)


@functools.cache
def onednn_int8() -> bool:
    """Whether oneDNN's int8 inner product runs here (x86 torch builds; VNNI/AMX where present)."""
    try:
        weight = torch.ones(8, 8, dtype=torch.int8)
        packed = torch.ops.onednn.qlinear_prepack(weight, None)
        zero_points = torch.zeros(8, dtype=torch.int64)
        y = onednn_product(torch.ones(1, 8, dtype=torch.int8), packed, torch.ones(8), zero_points)
        return float(y[0, 0]) == 8.0
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def _int_mm_works() -> bool:
    """Whether this torch multiplies int8 on the CPU (torch._int_mm; VNNI/AMX where present)."""
    try:
        a = torch.ones(1, 8, dtype=torch.int8)
        return int(torch._int_mm(a, torch.ones(8, 8, dtype=torch.int8))[0, 0]) == 8
    except (AttributeError, RuntimeError):
        return False


def quantize_linears(model: nn.Module) -> nn.Module:
    """Every nn.Linear in `model` (mtcli's own Linear included) swapped for an Int8Linear, in
    place: the fp32 weights of the Linear layers are dropped. A weight tied to an embedding
    (the output projection) stays as the embedding's; the int8 copy is the projection's."""
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear):
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, Int8Linear.from_linear(module))
    return model

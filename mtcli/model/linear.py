"""The model's Linear layer: nn.Linear's contract and parameters, its fp32 CPU matmuls in oneDNN.

Why: torch's fp32 CPU matmul calls MKL, and MKL takes its AVX2 code on AMD processors; oneDNN
(which torch also ships, and uses for bf16) takes AVX-512 on both. Measured on this project's
2-core AMD EPYC: 190 against 450 GFLOP/s at the decoder's GEMM shapes, the same results to
~1e-6 relative. In inference the weight is reordered once into oneDNN's blocked layout and kept
(re-packed if it changes; a model loaded only to decode keeps no plain copy:
keep_only_packed_weights); in training the forward and both backward matmuls go through
oneDNN on the plain weight (an autograd Function). bf16 autocast, other dtypes and devices
take nn.Linear's own path. Knows nothing about the Transformer. oneDNN's kernel caches are
kept small by the commands that decode or train (mtcli.device.limit_kernel_caches).
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# below this many multiply-adds oneDNN's cost per call (and compiling a kernel for each new
# shape) outweighs its speed: the SIGKILL test, which trains a d_model-32 model, took 20.9 s
# with every product through oneDNN, 15.2 s with none, 15.7 s with this threshold
MIN_ONEDNN_MACS = 1 << 20

# the rows shrink at nearly every decoding step as sentences finish. An int8 Linear pads its
# input to a multiple of this many rows, so that the allocator sees a few sizes (its blocks of
# ever new sizes fragmented the heap: see README); a Linear holding only its packed weight pads
# inputs of fewer rows to this many (those had taken MKL on the plain weight; oneDNN compiles
# a kernel for each new shape). Padding every fp32 input to a multiple was ~10% slower.
ROW_MULTIPLE = 16


@functools.cache
def onednn_available() -> bool:
    """Whether to use oneDNN's linear: on x86 (where it was measured) with a torch that has it."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        return torch.backends.mkldnn.is_available() and bool(
            torch.ops.mkldnn._linear_pointwise.default and torch.ops.mkldnn._reorder_linear_weight
        )
    except (AttributeError, RuntimeError):
        return False


class _Packed:
    """A weight in oneDNN's layout, tagged with the version of the weight it was made from
    (in-place edits and load_state_dict bump the version; see Linear.forward for fused Adam).

    Not a buffer or a parameter: never saved, never copied (a copied model packs again).
    """

    def __init__(self) -> None:
        self.tensor: Tensor | None = None
        self.source: tuple[int, int] | None = None  # (data pointer, version) of the weight
        self.only = False  # the plain weight is gone (Linear.keep_only_packed)

    def __deepcopy__(self, memo) -> _Packed:
        if self.only:  # nothing left to pack from: the copy shares the packed weight
            copy = _Packed()
            copy.tensor, copy.only = self.tensor, True
            return copy
        return _Packed()

    def clear(self) -> None:
        if not self.only:
            self.tensor, self.source = None, None

    def get(self, weight: Tensor) -> Tensor:
        if self.only:
            return self.tensor
        source = (weight.data_ptr(), weight._version)
        if self.source != source:
            self.tensor = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
            self.source = source
        return self.tensor


def _onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (M, in) Wᵀ + b through oneDNN; weight (out, in), packed or plain -> (M, out)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def with_rows_padded(linear: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """linear(x) for x (..., in), its rows padded with zeros to a multiple of ROW_MULTIPLE and
    the padding cut off again -> (..., out). For row-wise maps only: each output row depends
    on its input row alone (and a zero row moves no dynamic int8 scale: its range holds 0)."""
    flat = x.reshape(-1, x.size(-1))  # (M, in)
    rows = flat.size(0)
    padded_rows = -(-rows // ROW_MULTIPLE) * ROW_MULTIPLE
    if padded_rows != rows:
        padded = flat.new_zeros(padded_rows, flat.size(1))
        padded[:rows] = flat
        flat = padded
    return linear(flat)[:rows].view(*x.shape[:-1], -1)


def keep_only_packed_weights(model: nn.Module) -> int:
    """Free the plain copy of every Linear weight in `model` that nothing else holds (a weight
    tied to an embedding stays); the model then only decodes. Returns how many were freed.

    Why: in inference oneDNN reads only its packed copy, so the plain one was dead weight, 21 MB
    of the shipped models' 28; the matmuls it served (steps with too few rows for oneDNN to
    pay) take oneDNN on padded rows instead.
    """
    holders: dict[int, int] = {}
    for module in model.modules():
        for param in module._parameters.values():
            if param is not None:
                holders[id(param)] = holders.get(id(param), 0) + 1
    linears = [m for m in model.modules() if isinstance(m, Linear) and holders[id(m.weight)] == 1]
    return sum(m.keep_only_packed() for m in linears)


class _TrainingLinear(torch.autograd.Function):
    """x Wᵀ + b whose forward and both backward matmuls run in oneDNN. x (M, in) -> (M, out)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.with_bias = bias is not None
        return _onednn_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: Tensor):
        """grad (M, out) -> gradients of x (M, in), W (out, in), b (out,)."""
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        grad_x = _onednn_linear(grad, weight.t().contiguous(), None) if need_x else None  # grad W
        grad_w = _onednn_linear(grad.t(), x.t(), None) if need_w else None  # gradᵀ x
        grad_b = grad.sum(0) if need_b and ctx.with_bias else None
        return grad_x, grad_w, grad_b


class Linear(nn.Linear):
    """y = x Wᵀ + b, exactly nn.Linear's contract and parameters."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__(in_features, out_features, bias)
        self._packed = _Packed()

    def forward(self, x: Tensor) -> Tensor:
        """(..., in_features) -> (..., out_features)."""
        training = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
        if training:
            # a packed copy made for validation goes: fused Adam updates weights in place
            # without bumping their version, the one change the check in _Packed.get misses
            self._packed.clear()
        rows = x.numel() // max(x.size(-1), 1)
        if self._packed.only and rows < ROW_MULTIPLE:  # where MKL had taken the plain weight
            return with_rows_padded(
                lambda flat: _onednn_linear(flat, self._packed.tensor, self.bias), x
            )
        if not self._packed.only and not self._uses_onednn(x, rows):  # bf16 autocast training
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, -1)  # (M, in)
        if training and not self._packed.only:  # the weight changes at every step: not packed
            y = _TrainingLinear.apply(flat, self.weight, self.bias)
        else:
            y = _onednn_linear(flat, self._packed.get(self.weight), self.bias)
        return y.view(*x.shape[:-1], -1)

    def keep_only_packed(self) -> bool:
        """Pack the weight for inference and free its plain copy (on CPU in fp32, where oneDNN
        is available); returns whether it did. Afterwards the layer only decodes: its weight
        Parameter is a meta tensor of the same shape (no data, nothing to save or train)."""
        weight = self.weight
        on_cpu_fp32 = weight.device.type == "cpu" and weight.dtype == torch.float32
        if not (on_cpu_fp32 and onednn_available()):
            return False
        self._packed.get(weight)
        self._packed.only = True
        self.weight = nn.Parameter(torch.empty(weight.shape, device="meta"), requires_grad=False)
        return True

    def _uses_onednn(self, x: Tensor, rows: int) -> bool:
        return (
            rows * self.in_features * self.out_features >= MIN_ONEDNN_MACS
            and x.device.type == "cpu"
            and x.dtype == torch.float32
            and self.weight.dtype == torch.float32
            and not _autocast_on_cpu()  # bf16 autocast has its own (oneDNN) matmuls
            and onednn_available()
        )


def _autocast_on_cpu() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()

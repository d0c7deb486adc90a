"""DDP really averages gradients: two torchrun processes with half the batches each end where one
process with the same global batches ends; micro-batches before the last skip the all-reduce."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest
import torch

from mtcli.config import ModelConfig, TrainConfig
from mtcli.store.checkpoint import load_model
from mtcli.training.loop import train
from tests.conftest import REPO, copy_sentences, copy_tokenizer, free_port, write_lines

SHAPE = dict(d_model=32, n_heads=2, d_ff=64, n_enc_layers=1, n_dec_layers=1, dropout=0.0)
# lr 0.06 from the first step (warm-up 1): steps big enough that a wrong average would show
SETTINGS = dict(
    max_tokens=64, max_steps=3, lr_factor=0.35, warmup=1, threads=1, log_every=1, max_len=32,
    valid_every=3, valid_bleu_lines=8,
)  # fmt: skip


def _flags(settings: dict) -> list[str]:
    return [arg for k, v in settings.items() for arg in ("--" + k.replace("_", "-"), str(v))]


@pytest.mark.slow
def test_two_ranks_equal_one_process_with_the_same_global_batches(tmp_path):
    """torchrun 2 ranks x --accum 2 (strided shares, no_sync, loss over the global token count)
    ends with the weights of 1 process x --accum 4 over the same batches, to fp32 tolerance;
    the real `torchrun -m mtcli train` validates (rank 0) and leaves last/ and best/ to load."""
    tok = copy_tokenizer(tmp_path)
    lines = copy_sentences(300, seed=3)
    src, tgt = write_lines(tmp_path / "c.src", lines), write_lines(tmp_path / "c.tgt", lines[::-1])
    valid = dict(valid_src=str(src), valid_tgt=str(tgt))
    single = train(TrainConfig(src=str(src), tgt=str(tgt), tokenizer=str(tok), out=str(tmp_path / "one"),
                               accum=4, model=ModelConfig(**SHAPE), **SETTINGS, **valid))  # fmt: skip
    args = ["train", "--src", str(src), "--tgt", str(tgt), "--tokenizer", str(tok), "--out", str(tmp_path / "two"),
            "--accum", "2", *_flags(SHAPE), *_flags(SETTINGS), *_flags(valid)]  # fmt: skip
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={free_port()}",
    ]
    proc = subprocess.run([*torchrun, "-m", "mtcli", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, "NO_COLOR": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 process(es)" in proc.stderr
    one, two = (
        _without_key_biases(load_model(tmp_path / d / "last").model.state_dict())
        for d in ("one", "two")
    )
    moved = max(
        float((one[k] - v).abs().max())
        for k, v in _without_key_biases(_initial(tok, tgt, src)).items()
    )
    worst = max(float((one[k] - two[k]).abs().max()) for k in one)
    assert moved > 1e-2  # the steps changed the weights by far more than the tolerance
    assert worst < 2e-5, (
        f"max weight difference {worst:.2e} (the steps moved weights by {moved:.2e})"
    )
    losses = [
        float(line.split(" loss ")[1].split()[0])
        for line in proc.stderr.splitlines()
        if line.startswith("epoch ")
    ]
    assert losses == pytest.approx([round(x, 3) for x in single.losses], abs=1.5e-3)
    state = torch.load(tmp_path / "two" / "last" / "trainer_state.pt", weights_only=True)
    assert state["step"] == 3 and load_model(tmp_path / "two" / "best").model.cfg.d_model == 32


def _without_key_biases(weights: dict) -> dict:
    """The weights with the keys' biases zeroed. Their exact gradient is 0 (a bias on the keys
    adds one constant to all of a query's scores, which softmax ignores), so what they get is
    rounding noise, and Adam (eps 1e-9) turns noise into full steps whose signs differ with
    any change of summation order: 1e-3 apart between two correct runs, unlike every other
    weight (2.8e-6 at most, measured)."""
    out = {}
    for name, w in weights.items():
        w = w.clone()
        d = w.shape[0] // 3 if name.endswith("qkv_proj.bias") else w.shape[0] // 2
        if name.endswith("qkv_proj.bias"):
            w[d : 2 * d] = 0  # q, k, v: the middle third
        elif name.endswith("kv_proj.bias"):
            w[:d] = 0  # k, v: the first half
        out[name] = w
    return out


def _initial(tok, tgt, src) -> dict:
    """The weights both runs start from (the same seed builds the same model)."""
    from mtcli.data.tokenizer import Tokenizer
    from mtcli.model.transformer import Seq2Seq
    from mtcli.training.start import build_model_config

    torch.manual_seed(1)
    cfg = TrainConfig(src=str(src), tgt=str(tgt), model=ModelConfig(**SHAPE), **SETTINGS)
    return Seq2Seq(build_model_config(cfg, Tokenizer.load(tok))).state_dict()


def test_micro_batches_before_the_last_skip_the_all_reduce():
    """With --accum 3 under DDP, the first two backward passes run inside no_sync(), the last
    outside it; each rank's loss is scaled by world / (the step's tokens on every rank)."""
    from mtcli.data.token_store import TokenStore
    from mtcli.model.transformer import Seq2Seq
    from mtcli.training.distributed import ProcessGroup
    from mtcli.training.loop import Precision, _accumulate
    from tests.conftest import tiny_config

    class TwoRanks(ProcessGroup):
        def sum(self, value: float) -> float:  # the other rank holds as many again
            return 2 * value

    class FakeDDP(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module, self.synced = module, []
            self.inside = False

        @contextlib.contextmanager
        def no_sync(self):
            self.inside = True
            yield
            self.inside = False

        def forward(self, *args):
            self.synced.append(not self.inside)
            return self.module(*args)

    store = TokenStore.from_ids([[5, 6], [7], [8, 9, 10]], [[5], [6, 7], [8]])
    model = Seq2Seq(tiny_config())
    net = FakeDDP(model)
    cpu = torch.device("cpu")
    loss_sum, n_tokens = _accumulate(net, store, [[0], [1], [2]], TrainConfig(), Precision(cpu, "fp32"),
                                     TwoRanks(world=2))  # fmt: skip
    assert net.synced == [False, False, True]
    assert n_tokens == 2 * (2 + 3 + 2)  # targets + EOS, on both ranks

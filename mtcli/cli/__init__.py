"""The `mtcli` command line: each subcommand parses flags, builds a config, calls one function.

stdout carries results only; progress, logs and colour go to stderr (see console.py). May
import every other part of mtcli, and is the only part that imports rich or click; nothing
imports it (but `python -m mtcli`).
"""

from __future__ import annotations

import click

from mtcli import __version__
from mtcli.cli.console import MtcliGroup

# each command's module is imported only when that command runs (torch alone takes ~1.5 s)
COMMANDS = {
    "tokenizer": "mtcli.cli.tokenizer:tokenizer",
    "train": "mtcli.cli.train:train_command",
    "translate": "mtcli.cli.translate:translate_command",
    "eval": "mtcli.cli.eval:eval_command",
    "data": "mtcli.cli.data:data",
    "export": "mtcli.cli.export:export_command",
    "import": "mtcli.cli.import_model:import_group",
    "attention": "mtcli.cli.attention:attention_command",
    "explain": "mtcli.cli.explain:explain_command",
    "models": "mtcli.cli.models:models_command",
    "distill": "mtcli.cli.distill:distill_command",
    "serve": "mtcli.cli.serve:serve_command",
    "runs": "mtcli.cli.runs:runs_group",
}

HELP = """Neural machine translation from the command line.

\b
A whole pipeline, from corpus to scores (a small model in about 5 minutes):
  mtcli data prepare tatoeba-en-zh --out data/tatoeba
  mtcli tokenizer train --src data/tatoeba/train.src --tgt data/tatoeba/train.tgt \\
      --vocab-size 4000 --out runs/tok
  mtcli train --preset quick --src data/tatoeba/train.src --tgt data/tatoeba/train.tgt \\
      --valid-src data/tatoeba/valid.src --valid-tgt data/tatoeba/valid.tgt --tokenizer runs/tok --out runs/en-zh
  mtcli translate -m runs/en-zh/best -i data/tatoeba/test.src -o hyp.txt
  mtcli eval --hyp hyp.txt --ref data/tatoeba/test.tgt

\b
With the shipped models (English->Chinese and Chinese->English, chosen by the script):
  mtcli translate "Why do we work?"
  mtcli translate "我们为什么工作？"
  mtcli models
"""


@click.group(
    cls=MtcliGroup,
    lazy=COMMANDS,
    help=HELP,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="mtcli")
def main() -> None:
    pass

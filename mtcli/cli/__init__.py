"""The `mtcli` command line: each subcommand parses flags, builds a config, calls one function.

stdout carries results only; progress, logs and colour go to stderr (see common.py).
"""

from __future__ import annotations

import click

from mtcli import __version__
from mtcli.cli.attention import attention_command
from mtcli.cli.common import MtcliGroup
from mtcli.cli.data import data
from mtcli.cli.eval import eval_command
from mtcli.cli.tokenizer import tokenizer
from mtcli.cli.train import train_command
from mtcli.cli.translate import export_command, translate_command

HELP = """Neural machine translation from the command line.

\b
A whole pipeline, from corpus to scores:
  mtcli data prepare tatoeba-en-zh --from ../shared/data/tatoeba-en-zh/raw --out data/tatoeba
  mtcli tokenizer train --src data/tatoeba/train.src --tgt data/tatoeba/train.tgt --out runs/tok
  mtcli train --config configs/en-zh-tiny.toml --tokenizer runs/tok --out runs/en-zh
  mtcli translate -m runs/en-zh/best < data/tatoeba/test.src > hyp.txt
  mtcli eval --hyp hyp.txt --ref data/tatoeba/test.tgt --tgt-lang zh

\b
With the shipped English->Chinese model:
  mtcli translate "Why do we work?"
"""


@click.group(cls=MtcliGroup, help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mtcli")
def main() -> None:
    pass


for _command in (
    tokenizer,
    train_command,
    translate_command,
    eval_command,
    data,
    export_command,
    attention_command,
):
    main.add_command(_command)

"""`python -m mtcli` (used by torchrun: `torchrun --nproc_per_node=2 -m mtcli train ...`)."""

from mtcli.cli import main

main()

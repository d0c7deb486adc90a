"""Training a model: the loop, its learning-rate schedule and loss, validation and the
metrics it reports (sacrebleu), how a run starts or continues, its directory, DDP, and sequence-level distillation (a
teacher's translations as a student's training targets).

May import: mtcli.engines, mtcli.decoding, mtcli.model, mtcli.store, mtcli.data, mtcli.config,
mtcli.errors, mtcli.device, mtcli.files. Reports through a callback: never rich or click.
"""

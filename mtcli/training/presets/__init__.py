"""Training settings of the shipped models, as TOML files for `mtcli train --config`."""

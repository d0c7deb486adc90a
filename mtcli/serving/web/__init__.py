"""The web page `mtcli serve` serves at /."""

"""Whole documents translated with everything that is not text to translate kept as it was
(`mtcli translate FILE -o OUT`): each format's module turns a file into the strings to
translate and back; document.py reads, translates and writes them."""

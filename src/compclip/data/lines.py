"""A text file's lines with the byte offset each starts at: what lets a reader of a CSV or JSON lines file keep where
each record starts (16 bytes a record, `TableReader`) and read any one of them again by seeking there, in place of
holding every record in memory to shuffle the file whole."""
from __future__ import annotations

import codecs
import io
import os


class TextLines:
    """The lines of a UTF-8 file from byte `at` on, split and kept whole as `open(path, newline="")` gives them (at
    "\\n", "\\r\\n" and a lone "\\r", the csv module's way); a BOM at the file's start is no part of its first line, and
    bytes that are not UTF-8 come back surrogate-escaped, as every reader opens its text. `at` follows the reading: the
    byte where the next line starts (surrogate escapes encode back to the bytes they stand for, so it is exact)."""

    def __init__(self, path: str | os.PathLike, at: int = 0):
        raw = open(path, "rb")  # noqa: SIM115 - closed with the text wrapper, by `close`
        raw.seek(at)
        if at == 0 and raw.read(len(codecs.BOM_UTF8)) != codecs.BOM_UTF8:
            raw.seek(0)
        self.at = raw.tell()
        self._text = io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape", newline="")

    def __iter__(self) -> TextLines:
        return self

    def __next__(self) -> str:
        line = next(self._text)
        self.at += len(line.encode("utf-8", "surrogateescape"))
        return line

    def close(self) -> None:
        self._text.close()

    def __enter__(self) -> TextLines:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

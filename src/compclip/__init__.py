"""compclip: make contrastive vision-language models compositional.

Kept import-light on purpose: `compclip --help` must not pay for torch.
"""
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("compclip")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

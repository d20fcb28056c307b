"""compclip: make contrastive vision-language models compositional.

Kept import-light on purpose: `compclip --help` must not pay for torch; the names below load on first use.
The library's public names are listed in docs/api.md.
"""
import warnings
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("compclip")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

from .lazy import lazy_names

# In a notebook without ipywidgets, tqdm.auto (which huggingface_hub imports as open_clip loads) warns "IProgress not
# found", then draws the text bars compclip draws there anyway: nothing a user must do.
warnings.filterwarnings("ignore", message="IProgress not found", module="tqdm")

__getattr__ = lazy_names(__name__, {"evaluate": ".eval.run:evaluate_model", "load_results": ".eval.results:results_frame",
                                     "load_items": ".eval.results:items_frame", "build_method": ".methods", "load_model": ".models"})

__all__ = ["__version__", "build_method", "evaluate", "load_items", "load_model", "load_results"]

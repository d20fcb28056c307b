"""A concept record's JSON form read back: where the reader (shards that carry their records) and the concept store
both decode it, below both."""
from __future__ import annotations

from typing import Any


def record_from_json(obj: dict[str, Any]) -> dict[str, Any]:
    """A concept record read back from JSON: the lists of spans and edges as the tuples `extract` gives."""
    rec = {"caption": obj["caption"]}
    for name in ("noun_phrases", "pos", "keywords"):
        if name in obj:
            rec[name] = [tuple(item) for item in obj[name]]
    if "graph" in obj:
        rec["graph"] = {part: [tuple(item) for item in obj["graph"][part]] for part in ("nodes", "edges")}
    return rec

"""`ConceptConfig`: every option of `compclip concepts`, declared once (its flags are generated from it). Nothing
heavy is imported here, so that the command line's help stays instant."""
from __future__ import annotations

from dataclasses import dataclass

from ..options import option

SHARD_SIZE = 20_000  # records per store shard: the unit a killed run resumes from


@dataclass(frozen=True)
class ConceptConfig:
    what: str = option("noun-phrases,pos,graph,keywords", "Comma-separated fields: noun-phrases, pos, graph, keywords.")
    workers: int = option(2, "Parser processes (at least 1).")
    caption_key: str = option("caption", "Caption column (CSV/TSV), key (JSONL) or json field (shards).")
    with_prep: bool = option(False, "Keep a prepositional modifier: 'a man in a red shirt'.")
    shard_size: int = option(SHARD_SIZE, "Records per store shard: the unit a killed run resumes from.")
    part: str | None = option(None, "Run part i/n of the captions (0-based, split by caption hash).  [default: a SLURM array task's "
                                    "place, else all]")

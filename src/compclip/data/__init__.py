"""Data: streaming image-text readers with skip accounting."""
from .readers import (
    CsvReader,
    FolderReader,
    ImageTextReader,
    WebDatasetReader,
    decode_image,
    image_path,
    is_tar_shards,
    open_reader,
    shard_position,
)
from .skips import REASONS, SkipCounter

__all__ = [
    "REASONS",
    "CsvReader",
    "FolderReader",
    "ImageTextReader",
    "SkipCounter",
    "WebDatasetReader",
    "decode_image",
    "image_path",
    "is_tar_shards",
    "open_reader",
    "shard_position",
]

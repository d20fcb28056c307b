"""Data: streaming image-text readers with skip accounting."""
from .readers import (
    ArrayReader,
    CsvReader,
    FolderReader,
    ImageTextReader,
    WebDatasetReader,
    data_files,
    decode_image,
    image_files,
    image_path,
    is_image_array,
    is_tar_shards,
    open_reader,
    part_of,
    shard_position,
)
from .skips import REASONS, SkipCounter

__all__ = [
    "REASONS",
    "ArrayReader",
    "CsvReader",
    "FolderReader",
    "ImageTextReader",
    "SkipCounter",
    "WebDatasetReader",
    "data_files",
    "decode_image",
    "image_files",
    "image_path",
    "is_image_array",
    "is_tar_shards",
    "open_reader",
    "part_of",
    "shard_position",
]

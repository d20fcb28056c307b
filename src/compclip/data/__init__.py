"""Data: streaming image-text readers with skip accounting, one module of `formats/` per training-data format."""
from .formats.captions_json import FolderReader
from .formats.csv_table import CsvReader
from .formats.image_array import ArrayReader, is_image_array
from .formats.webdataset_shards import WebDatasetReader, is_tar_shards
from .readers import (
    FORMATS,
    DataFormat,
    ImageTextReader,
    data_files,
    data_format,
    decode_image,
    image_files,
    image_path,
    open_reader,
    part_of,
    reader_options,
    shard_position,
)
from .skips import REASONS, SkipCounter

__all__ = [
    "FORMATS",
    "REASONS",
    "ArrayReader",
    "CsvReader",
    "DataFormat",
    "FolderReader",
    "ImageTextReader",
    "SkipCounter",
    "WebDatasetReader",
    "data_files",
    "data_format",
    "decode_image",
    "image_files",
    "image_path",
    "is_image_array",
    "is_tar_shards",
    "open_reader",
    "part_of",
    "reader_options",
    "shard_position",
]

"""Keyword tables of the hard-negative classes (Rösch et al.; docs/methods.md §2) and whole-word matching.

One home for the tables: concept extraction reports the hits, the hard-negative method
permutes them.
"""
from __future__ import annotations

import re
from functools import cache

from ..errors import UsageError

COLORS = ("blue", "red", "green", "yellow", "black", "white", "brown", "gray", "orange")

COCO_OBJECTS = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard",
    "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
    "teddy bear", "hair drier", "toothbrush",
)

# The paper's Table 6 names four COCO categories as PASCAL VOC does; hardneg and the concept ranking use its names by default.
PAPER_NAMES = {"motorcycle": "motorbike", "airplane": "aeroplane", "couch": "sofa", "tv": "tv monitor"}
PAPER_OBJECTS = tuple(PAPER_NAMES.get(o, o) for o in COCO_OBJECTS)
OBJECT_TABLES = {"paper": PAPER_OBJECTS, "coco": COCO_OBJECTS}

# Location and size swaps are fixed pairs; a one-way entry (long -> short) has no reverse.
LOCATION_SWAPS = {
    "left": "right", "right": "left", "above": "below", "below": "above", "under": "over", "over": "under",
    "foreground": "background", "background": "foreground", "in front of": "behind", "behind": "in front of",
    "back": "front", "front": "back",
}
SIZE_SWAPS = {
    "large": "small", "small": "large", "little": "big", "big": "little", "tall": "short", "short": "tall",
    "long": "short", "thin": "fat", "fat": "thin", "huge": "tiny", "tiny": "huge", "giant": "tiny",
}

KEYWORDS: dict[str, tuple[str, ...]] = {
    "color": COLORS,
    "object": COCO_OBJECTS,
    "location": tuple(LOCATION_SWAPS),
    "size": tuple(SIZE_SWAPS),
}


def table(cls: str, objects: str = "coco") -> tuple[str, ...]:
    """A class's keywords; `objects` picks the object names ("coco": COCO's categories, "paper": Rösch et al.'s Table 6)."""
    if objects not in OBJECT_TABLES:
        raise UsageError(f"object names must be one of {', '.join(OBJECT_TABLES)}, not {objects!r}")
    return OBJECT_TABLES[objects] if cls == "object" else KEYWORDS[cls]


@cache
def _pattern(cls: str, objects: str) -> re.Pattern:
    # longest first, so "in front of" wins over "front" and "hot dog" over "dog"
    words = sorted(table(cls, objects), key=len, reverse=True)
    return re.compile(r"(?<![\w-])(" + "|".join(re.escape(w) for w in words) + r")(?![\w-])", re.IGNORECASE)


def find_keywords(caption: str, classes=tuple(KEYWORDS), objects: str = "coco") -> list[tuple[str, str, int, int]]:
    """Whole-word keyword hits as `(class, keyword, start, end)`, keyword in its table's (lower) case."""
    hits = []
    for cls in classes:
        if cls not in KEYWORDS:
            raise UsageError(f"unknown keyword class {cls!r}; known: {', '.join(KEYWORDS)}")
        hits.extend((cls, m.group(1).lower(), m.start(1), m.end(1)) for m in _pattern(cls, objects).finditer(caption))
    return sorted(hits, key=lambda h: (h[2], h[0]))


def replacements(cls: str, keyword: str, objects: str = "coco") -> list[str]:
    """What a keyword may be swapped for: any other colour or object of the table; the fixed partner for
    location and size (docs/methods.md §2)."""
    if cls in ("location", "size"):
        return [(LOCATION_SWAPS if cls == "location" else SIZE_SWAPS)[keyword]]
    return [k for k in table(cls, objects) if k != keyword]


def with_case_of(word: str, template: str) -> str:
    """`word` capitalised like `template` ("Red" -> "Blue", "RED" -> "BLUE")."""
    if template.isupper() and len(template) > 1:
        return word.upper()
    return word[:1].upper() + word[1:] if template[:1].isupper() else word

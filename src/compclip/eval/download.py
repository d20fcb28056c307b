"""`compclip data download`: the official public files over https, resumable, each checked against a pinned SHA-256.

A transfer that breaks leaves `FILE.part`; running again asks the server for the rest (HTTP
Range) and appends. A finished file whose SHA-256 differs from the manifest is rejected and
removed, so no file is trusted on first download. COCO publishes no checksum for its archives: theirs are the SHA-256
and size that independent mirrors record alike (ParlAI's `parlai/tasks/coco_caption/build.py` lists
val2017.zip's; 815,585,330 and 252,907,541 bytes).
"""
from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from ..errors import DownloadError, UsageError
from ..io import sha256_of
from ..progress import progress

CHUNK = 1 << 20


@dataclass(frozen=True)
class Asset:
    url: str
    path: str  # relative to the data root
    sha256: str
    unzip_to: str | None = None  # a folder relative to the root, for archives


COCO: dict[str, list[Asset]] = {  # images and captions several benchmarks read (each benchmark declares its own files)
    "coco_val2017": [Asset("https://images.cocodataset.org/zips/val2017.zip", "coco/val2017.zip",
                           "4f7e2ccb2866ec5041993c9cf2a952bbed69647b115d0f74da7ce8f4bef82f05", unzip_to="coco")],
    "coco_captions": [
        Asset(
            "https://images.cocodataset.org/annotations/annotations_trainval2017.zip",
            "coco/annotations_trainval2017.zip",
            "113a836d90195ee1f884e704da6304dfaaecff1f023f49b6ca93c4aaae470268",
            unzip_to="coco/annotations",
        )
    ],
}


def fetch(url: str, dest: Path, sha256: str, timeout: float = 60) -> str:
    """Download `url` to `dest`, resuming `dest.part`; returns the file's SHA-256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    request = Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urlopen(request, timeout=timeout)
    except HTTPError as e:
        if e.code != 416:  # 416: the part file is already whole
            raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
    except URLError as e:
        raise DownloadError(f"{url}: {e.reason}") from None
    else:
        with response:
            resumed = have and response.status == 206
            total = int(response.headers.get("Content-Length", 0)) + (have if resumed else 0)
            try:
                with open(part, "ab" if resumed else "wb") as f:
                    for block in progress(iter(lambda: response.read(CHUNK), b""), dest.name, total=-(-total // CHUNK) or None, unit="MiB"):
                        f.write(block)
            except (OSError, ConnectionError) as e:
                raise DownloadError(f"{url}: transfer broke off after {part.stat().st_size} bytes ({e}); run again to resume") from None
        if total and part.stat().st_size < total:
            raise DownloadError(f"{url}: got {part.stat().st_size} of {total} bytes; run again to resume")
    got = sha256_of(part)
    if got != sha256:
        part.unlink()
        raise DownloadError(f"{url}: SHA-256 {got} does not match the expected {sha256}; the file was removed")
    os.replace(part, dest)
    return got


def download(name: str, root: str | Path, manifest: dict[str, list[Asset]]) -> list[Path]:
    """Fetch every file of `manifest[name]` into `root`, skipping those already there and verified."""
    if name not in manifest:
        raise UsageError(f"no download for {name!r}; available: {', '.join(sorted(manifest))}")
    root = Path(root)
    done = []
    for asset in manifest[name]:
        dest = root / asset.path
        if not (dest.is_file() and sha256_of(dest) == asset.sha256):
            fetch(asset.url, dest, asset.sha256)
        if asset.unzip_to:
            with zipfile.ZipFile(dest) as archive:
                archive.extractall(root / asset.unzip_to)
        done.append(dest)
    return done

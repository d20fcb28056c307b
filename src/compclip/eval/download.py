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

SC = "https://raw.githubusercontent.com/RAIVNLab/sugar-crepe/main/data"
SCPP = "https://raw.githubusercontent.com/Sri-Harsha/scpp/main/data"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Asset:
    url: str
    path: str  # relative to the data root
    sha256: str
    unzip_to: str | None = None  # a folder relative to the root, for archives


MANIFEST: dict[str, list[Asset]] = {
    "sugarcrepe": [
        Asset(f"{SC}/add_att.json", "sugarcrepe/add_att.json", "012d88d729693d193760e6f3393b06a1cf874380a9db0062e937201199fe044d"),
        Asset(f"{SC}/add_obj.json", "sugarcrepe/add_obj.json", "1b9d76b93139a937b8dc1ada92a4f05ecc821bb3c291d752428bafadd4bb0682"),
        Asset(f"{SC}/replace_att.json", "sugarcrepe/replace_att.json", "9fe55fd4c0a9ad1f85d486d9f6d0215b41f867eb025026e7f7b5ce44352545ee"),
        Asset(f"{SC}/replace_obj.json", "sugarcrepe/replace_obj.json", "9d299600639947e9d15281a9ded1382b376cf4ea088a8d08a1314bfe76e81898"),
        Asset(f"{SC}/replace_rel.json", "sugarcrepe/replace_rel.json", "356bcc2fc4c6aed3f4d9fd50acc58489bb1fe70c28791f9368d4cbf9ea39cdc9"),
        Asset(f"{SC}/swap_att.json", "sugarcrepe/swap_att.json", "7a7ce04e5c4c80412b48c6f0c1347fb1a2f5d54c0be6aa429b64d390e442f8d0"),
        Asset(f"{SC}/swap_obj.json", "sugarcrepe/swap_obj.json", "073cdb8e253d053614e80710834d9773b09dbc1dd0a412f6f9492262caa1dcad"),
    ],
    "sugarcrepe_pp": [
        Asset(
            f"{SCPP}/replace_att.json", "sugarcrepe_pp/replace_att.json", "6826413592894754eeca02aeebbcbbc8b95a7456998abcc714e71c033ce6fe87"
        ),
        Asset(
            f"{SCPP}/replace_obj.json", "sugarcrepe_pp/replace_obj.json", "5c6dc499ec8f511a8aa4ec1b7b5eb0eca90317488abe36ec39573355e2d361ab"
        ),
        Asset(
            f"{SCPP}/replace_rel.json", "sugarcrepe_pp/replace_rel.json", "040fb95d3f0619bf515db60879e99709a87a5e9b4f524ec3403b127243480fd4"
        ),
        Asset(f"{SCPP}/swap_att.json", "sugarcrepe_pp/swap_att.json", "450d0fd9fcad3e6f44950dc634e7f901ab1c6d9c60a569ade5ae8ffb3d203ad8"),
        Asset(f"{SCPP}/swap_obj.json", "sugarcrepe_pp/swap_obj.json", "5f33cae824de431a7ecd3c5de6301f689815f9497aa36d96b154bbaf117b201b"),
    ],
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


def download(name: str, root: str | Path, manifest: dict[str, list[Asset]] | None = None) -> list[Path]:
    """Fetch every file of a dataset into `root`, skipping those already there and verified."""
    manifest = MANIFEST if manifest is None else manifest
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

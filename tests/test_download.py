"""The downloader against a real HTTP server on 127.0.0.1: resuming a cut transfer, rejecting a bad checksum."""
import hashlib
import http.server
import threading

import pytest

from compclip.errors import DownloadError, UsageError
from compclip.eval.download import Asset, download, fetch

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


class Server(http.server.ThreadingHTTPServer):
    cut_next = False  # the next full response stops half-way, as a dropped connection
    requests: list


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.requests.append(self.headers.get("Range"))
        start = 0
        if self.headers.get("Range"):
            start = int(self.headers["Range"].split("=")[1].rstrip("-"))
            if start >= len(PAYLOAD):
                self.send_response(416)
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
        else:
            self.send_response(200)
        body = PAYLOAD[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.server.cut_next:
            self.server.cut_next = False
            self.wfile.write(body[: len(body) // 3])
            self.wfile.flush()
            self.connection.shutdown(2)  # the connection drops mid-transfer
            return
        self.wfile.write(body)


@pytest.fixture
def server():
    srv = Server(("127.0.0.1", 0), Handler)
    srv.requests = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()


def url(server):
    return f"http://127.0.0.1:{server.server_address[1]}/file.bin"


def test_a_cut_transfer_resumes_where_it_stopped(server, tmp_path):
    good = hashlib.sha256(PAYLOAD).hexdigest()
    server.cut_next = True
    with pytest.raises(DownloadError, match="run again to resume"):
        fetch(url(server), tmp_path / "file.bin", good)
    part = tmp_path / "file.bin.part"
    kept = part.stat().st_size
    assert 0 < kept < len(PAYLOAD) and not (tmp_path / "file.bin").exists()
    assert fetch(url(server), tmp_path / "file.bin", good) == good
    assert (tmp_path / "file.bin").read_bytes() == PAYLOAD and not part.exists()
    assert server.requests == [None, f"bytes={kept}-"]  # the second request asked only for the rest


def test_a_wrong_checksum_is_rejected(server, tmp_path):
    with pytest.raises(DownloadError, match="does not match"):
        fetch(url(server), tmp_path / "file.bin", "0" * 64)
    assert not list(tmp_path.iterdir())


def test_download_skips_verified_files_and_fetches_a_changed_one_again(server, tmp_path):
    good = hashlib.sha256(PAYLOAD).hexdigest()
    manifest = {"toy": [Asset(url(server), "toy/a.bin", good), Asset(url(server), "toy/b.bin", good)]}
    assert [p.name for p in download("toy", tmp_path, manifest)] == ["a.bin", "b.bin"]
    download("toy", tmp_path, manifest)
    assert len(server.requests) == 2  # nothing fetched again
    (tmp_path / "toy" / "b.bin").write_bytes(b"tampered")
    download("toy", tmp_path, manifest)  # b no longer matches its pinned checksum: fetched again
    assert (tmp_path / "toy" / "b.bin").read_bytes() == PAYLOAD and len(server.requests) == 3
    with pytest.raises(UsageError, match="no download for 'nope'"):
        download("nope", tmp_path, manifest)


def test_every_download_is_https_with_a_pinned_checksum():
    """No file is trusted on first download, and none travels in clear (COCO's archives were plain http, unpinned)."""
    from compclip.eval.base import downloads

    manifest = downloads()
    assert set(manifest) == {"sugarcrepe", "sugarcrepe_pp", "coco_val2017", "coco_captions", "valse", "imagecode"}
    assert len(manifest["valse"]) == 11 and all(a.path.startswith("valse/data/") for a in manifest["valse"])
    pinned = {a.url.split("/")[5] for a in manifest["valse"] + manifest["imagecode"]}  # raw files at a commit, not a branch
    assert all(len(c) == 40 for c in pinned), pinned
    assets = [a for assets in manifest.values() for a in assets]
    assert {a.url.split("://")[0] for a in assets} == {"https"}
    assert all(len(a.sha256) == 64 and int(a.sha256, 16) >= 0 for a in assets)
    coco = {a.path: a.sha256 for a in manifest["coco_val2017"] + manifest["coco_captions"]}
    assert coco == {"coco/val2017.zip": "4f7e2ccb2866ec5041993c9cf2a952bbed69647b115d0f74da7ce8f4bef82f05",
                    "coco/annotations_trainval2017.zip": "113a836d90195ee1f884e704da6304dfaaecff1f023f49b6ca93c4aaae470268"}


def test_the_manifest_checksums_are_the_published_files(tmp_path):
    """The SugarCrepe and SugarCrepe++ checksums match the copies in shared/ (the files as published)."""
    from compclip.eval.base import downloads
    from compclip.eval.download import sha256_of
    from conftest import shared_data

    for name in ("sugarcrepe", "sugarcrepe_pp"):
        for asset in downloads()[name]:
            assert sha256_of(shared_data(*asset.path.split("/"))) == asset.sha256

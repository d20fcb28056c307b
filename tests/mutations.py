"""Would the tests fail if this line were wrong? Apply one realistic one-line bug at a time to a copy of `src/`, run the
tests that name its area against the copy, and count the bugs the tests catch.

    .venv/bin/python tests/mutations.py            # every mutation below
    .venv/bin/python tests/mutations.py 3 7        # only those

Each mutation is (file under src/compclip, the exact text, its replacement, the tests to run). A mutation whose text is
not found is reported as stale (the code moved on: update it). Not part of the suite: it runs the named tests once
per bug (minutes).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HANDED = "tests/test_handed_files.py"

MUTATIONS = [
    ("models/checkpoint.py", 'if file.suffix == ".safetensors":\n        return False', "pass", HANDED),
    ("models/checkpoint.py", "    if not isinstance(obj.attributes, dict):\n        raise",
     "    if not isinstance(obj.attributes, dict):\n        return\n        raise", HANDED),
    ("models/checkpoint.py", "state = read_torchscript(file)", "state = torch.jit.load(str(file)).state_dict()", HANDED),
    ("models/checkpoint.py", "if _identity(file) == before:", "if True:", f"{HANDED}::test_the_recorded_weights_are_the_weights_"
     "loaded_while_the_checkpoint_is_replaced"),
    ("models/factory.py", "    if asked:\n", "    if not asked:\n", HANDED),
    ("io.py", "flags | os.O_NOFOLLOW | os.O_CLOEXEC", "flags | os.O_CLOEXEC", HANDED),
    ("train/run_folder.py", '"train.log", "checkpoints", ', '"train.log", ', HANDED),
    ("concepts/store.py", 'if INDEX_FILE.fullmatch(old.name) and f"index/', 'if f"index/', HANDED),
    ("concepts/build.py", "refuse_links(out, STORE_FOLDERS)", "pass", HANDED),
    ("concepts/build.py", 'with FolderLock(segment / LOCK_NAME, f"another compclip concepts run of part {part[0]}/{part[1]}"):',
     "if True:", HANDED),
    ("data/table.py", "strict=True", "strict=False", HANDED),
    ("world/write.py", "    if made:  # another world", "    if False:  # another world", HANDED),
    ("text.py", "html.escape(one_line, quote=False)", "one_line", HANDED),
    ("export/card.py", 'fence = "`" * max(3, 1 + max(', 'fence = "`" * min(3, 1 + max(', HANDED),
    ("eval/download.py", "    if got != sha256:", "    if got is None:", "tests/test_download.py"),
    ("io.py", "or entry.is_symlink() or _alive(int(found.group(1))):", "or entry.is_symlink():", HANDED),
    ("io.py", "        _remove_left_behind(path)\n        tmp = Path(", "        tmp = Path(", HANDED),
    ("eval/run.py", "if len(asked) == 1:", "if len(asked) == 0:", HANDED),
    ("eval/report.py", "if len(set(values.values())) > 1:", "if len(values) > 1:", HANDED),
    ("data/readers.py", "if kind not in (None, stat.S_IFREG):", "if False:", HANDED),
    ("data/readers.py", '"webp", "gif", "tif", "tiff", "bmp")', '"webp")', HANDED),
    ("data/readers.py", '"sha256": digest.hexdigest()}', "}", HANDED),
    ("data/readers.py", 'bad = [key for key in ("images", "annotations") if not isinstance(data[key], list)]', "bad = []", HANDED),
    ("eval/retrieval.py", 'locate(folder, r["image"].strip())', 'locate(folder, r["image"])', HANDED),
    ("eval/retrieval.py", "        at = e.start", "        at = 0", HANDED),
    ("eval/retrieval.py", "csv.field_size_limit(sys.maxsize)", "pass", HANDED),
    ("concepts/pipeline.py", "fits = [c for c in captions if len(c) <= nlp.max_length]", "fits = list(captions)", HANDED),
    ("concepts/store.py", "if not len(self._hi) == len(self._lo) == len(self._rows) == self._size:", "if False:", HANDED),
    ("concepts/build.py", "    found = manifest_of(manifest)", "    found = json.loads(manifest.read_text())", HANDED),
    ("concepts/build.py", "        if n > 1:  # said first", "        if n > 100:  # said first", HANDED),
    ("scoring.py", "except (SafetensorError, KeyError, ValueError, OSError) as e:", "except OSError as e:", HANDED),
    ("cli.py", "    if out.is_dir():\n        raise UsageError(f\"--out {out} is a folder",
     "    if False:\n        raise UsageError(f\"--out {out} is a folder", HANDED),
    ("train/evaluation.py", 'for k, v in scores.items() if not math.isnan(v)}', "for k, v in scores.items()}", HANDED),
    ("data/shared_memory.py", "    if free < need:", "    if False:", HANDED),
    ("io.py", "       errno.EFBIG:", "       -999:", HANDED),
]


def run(mutation: tuple[str, str, str, str], scratch: Path) -> str:
    file, old, new, tests = mutation
    src = scratch / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    target = src / "compclip" / file
    text = target.read_text(encoding="utf-8")
    if old and text.count(old) != 1:
        return "stale"
    target.write_text(text.replace(old, new), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests.split()], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1800)
    return "caught" if done.returncode != 0 else "MISSED"


def main(chosen: list[int]) -> None:
    picked = [(i, m) for i, m in enumerate(MUTATIONS) if not chosen or i in chosen]
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="compclip-mutations-") as scratch:
        for tests in dict.fromkeys(m[3] for _, m in picked):  # the unmutated code must pass, or "caught" means nothing
            if run(("io.py", "", "", tests), Path(scratch)) != "MISSED":
                raise SystemExit(f"the tests fail on the unmutated code: {tests}")
        for i, mutation in picked:
            outcome = run(mutation, Path(scratch))
            outcomes.append(outcome)
            print(f"{i:3d} {outcome:7s} {mutation[0]}: {mutation[1].strip()[:60]!r} -> {mutation[2].strip()[:40]!r}", flush=True)
    caught = outcomes.count("caught")
    print(f"{caught} of {len(outcomes)} caught, {outcomes.count('MISSED')} missed, {outcomes.count('stale')} stale")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]])

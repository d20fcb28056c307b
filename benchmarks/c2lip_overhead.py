"""C2LIP step time against a plain SigLIP step, alternating on the same model and batch.

ViT-B-16-SigLIP with random weights (no checkpoint exists offline), batch 16, CPU, span
concepts (about 4 noun phrases per caption). A step is forward, loss, backward and Adam.
SigLIP's tokenizer lives on the hub, so captions are tokenized with the CLIP BPE and the ids
folded into SigLIP's 32,000-word vocabulary: the work is the same, the words are not.
Target: C2LIP / SigLIP step time <= 1.15. Then the memory C2LIP's visual tokens keep for the backward pass
beyond `encode_image`, their path kept and recomputed (`token_path_memory`).

Run: .venv/bin/python benchmarks/c2lip_overhead.py [--pairs 3]
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import open_clip
import torch

from compclip.concepts import extract
from compclip.methods import build_method
from compclip.models import load_model
from compclip.models.tokens import _timm_tokens, visual_token_embeddings

CAPTIONS = [
    "a red couch next to a white table in a bright living room with a lamp",
    "a man in a blue shirt riding a brown horse along a sandy beach",
    "two dogs playing with a yellow ball on the green grass of a park",
    "a woman holding an umbrella near a bus stop on a rainy street",
] * 4


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model, _, _ = load_model("ViT-B-16-SigLIP")
    model.train()
    tokenizer = open_clip.SimpleTokenizer(context_length=model.context_length)
    store = {r["caption"]: r for r in extract(CAPTIONS)}
    images = torch.randn(len(CAPTIONS), 3, 224, 224)
    methods = {"siglip": build_method("siglip"), "c2lip": build_method("c2lip", concepts=store)}
    batches = {}
    for name, method in methods.items():
        batch = method.collate([{"image": im, "caption": c} for im, c in zip(images, CAPTIONS, strict=True)], tokenizer)
        batch["text"] = batch["text"] % model.vocab_size
        batches[name] = batch
    k = len(batches["c2lip"]["concept_image"])
    print(f"ViT-B-16-SigLIP, batch {len(CAPTIONS)}, {k} concepts ({k / len(CAPTIONS):.1f} per caption), {torch.get_num_threads()} threads")
    opt = torch.optim.Adam(model.parameters(), lr=1e-9)

    def step(name):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        terms = methods[name](methods[name].outputs(model, batches[name]))
        sum(terms.values()).backward()
        opt.step()
        return time.perf_counter() - start

    step("siglip"), step("c2lip")  # warm-up
    times = {"siglip": [], "c2lip": []}
    for _ in range(args.pairs):
        for name in times:
            times[name].append(step(name))
    siglip, c2lip = statistics.median(times["siglip"]), statistics.median(times["c2lip"])
    print(f"siglip step {siglip:7.2f} s   (all: {', '.join(f'{t:.2f}' for t in times['siglip'])})")
    print(f"c2lip step  {c2lip:7.2f} s   (all: {', '.join(f'{t:.2f}' for t in times['c2lip'])})")
    print(f"ratio       {c2lip / siglip:7.3f}   (target <= 1.15)")
    token_path_memory(model, images)


def kept_mib(forward):
    """`forward()`'s result, and the MiB of the tensors autograd keeps for its backward pass, each storage once (a
    recomputed part keeps none: its saved tensors are not packed)."""
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = forward()
    return result, sum(kept.values()) / 2**20


def token_path_memory(model, images) -> None:
    """What C2LIP's visual tokens keep beyond `encode_image` (the trunk and the pooled head): the MAP head's value path
    over every token, kept as it was before 2026-11-27 (`_timm_tokens` called directly), and recomputed in the backward
    pass as training now does (`visual_token_embeddings`)."""
    visual, trunk = model.visual, model.visual.trunk
    _, pooled = kept_mib(lambda: model.encode_image(images))

    def kept_path():
        features = trunk.forward_features(images)
        return visual.head(trunk.forward_head(features)), _timm_tokens(visual, features)

    before, now = kept_mib(kept_path)[1] - pooled, kept_mib(lambda: visual_token_embeddings(model, images))[1] - pooled
    print(f"token path kept for backward beyond encode_image ({pooled:,.0f} MiB): {before:,.1f} MiB kept as before, "
          f"{now:,.1f} MiB recomputed")


if __name__ == "__main__":
    main()

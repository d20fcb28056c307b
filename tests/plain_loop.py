"""compclip's loss modules in a plain PyTorch loop, as a user's own training code holds them: the model's own calls make
the inputs, the loss module gathers across ranks itself, and the gradients are averaged as DDP averages them.

`step(method)` is one step in float64 on dist_grads' batch of 8 (this rank's share of it under torchrun): the loss value and every
gradient. Usage: python plain_loop.py OUT.pt METHOD[,METHOD...] (rank 0 saves {method: (loss, grads)}).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dist_grads import CAPTIONS, CASES, DENSE, DISTRACTOR_IMAGES, NEGATED_CAPTIONS, NEGATIVE_CAPTIONS, NEGATIVE_IMAGES, OPTIONS, in_float64


@in_float64
def step(method: str, rank: int = 0, world_size: int = 1):
    from compclip import load_model
    from compclip.concepts import extract
    from compclip.methods import (
        C2LIPLoss,
        CECLIPLoss,
        CLICLoss,
        CLIPLoss,
        CoNCLIPLoss,
        DACLoss,
        HardNegativeLoss,
        NegCLIPLoss,
        OCCLIPLoss,
        SigLIPLoss,
        SVLCLoss,
        TripletCLIPLoss,
        build_method,
        concept_inputs,
        keyword_negatives,
        relation_negative,
        rule_based_negatives,
        swap_negatives,
        word_list_negative,
    )
    from compclip.methods.c2lip import Options as C2LIPOptions
    from compclip.text import caption_rng

    torch.manual_seed(0)
    model, _, tokenizer = load_model("compclip-tiny-siglip")
    model.train()
    records = {r["caption"]: r for r in extract(CAPTIONS + NEGATIVE_CAPTIONS, "noun-phrases,pos,graph")}
    opts = CASES[method][1] if method in CASES else OPTIONS.get(method, {})
    trained = dict(model.named_parameters())
    if method == "occlip":  # the binding module is made (and seeded) right after the model, as compclip train makes it
        occlip = build_method("occlip", concepts=records).bind(model)
        trained |= {f"method.{n}": p for n, p in occlip.named_parameters()}
    if method not in ("siglip", "c2lip"):  # a loss without a bias leaves it unused, as compclip train freezes it
        model.logit_bias.requires_grad_(False)
    per = 8 // world_size
    images = torch.randn(8, 3, 64, 64, generator=torch.Generator().manual_seed(1))[rank * per : (rank + 1) * per]
    captions = CAPTIONS[rank * per : (rank + 1) * per]
    ddp = {"rank": rank, "world_size": world_size}

    def encode(texts):
        return F.normalize(model.encode_text(tokenizer(texts)), dim=-1)

    def negatives(make):
        made = [make(c) for c in captions]
        return [t for m in made for t in m], torch.tensor([i for i, m in enumerate(made) for _ in m])

    image, text, scale, bias = F.normalize(model.encode_image(images), dim=-1), encode(captions), model.logit_scale.exp(), model.logit_bias
    if method == "siglip":
        loss = SigLIPLoss(**ddp)(image, text, scale, bias)
    elif method == "clip":
        loss = CLIPLoss(**ddp)(image, text, scale)
    elif method == "c2lip":
        phrases = [records[c]["noun_phrases"] for c in captions]
        x = concept_inputs(model, tokenizer, images, captions, phrases, C2LIPOptions(npc_negatives="swap_attributes"))
        loss = C2LIPLoss(lambda_xac=opts["lambda_xac"], **ddp)(**x)
    elif method == "hardneg":
        texts, owners = negatives(lambda c: keyword_negatives(c, k=opts["negatives"]))
        draws = torch.tensor([caption_rng(0, "column", captions[i]).random() for i in owners], dtype=torch.float64)
        loss = HardNegativeLoss(**ddp)(image, text, encode(texts), owners, scale, draws)
    elif method == "negclip":
        texts, _ = negatives(lambda c: swap_negatives(c, records[c], k=opts["negatives"]))
        loss = NegCLIPLoss(**ddp)(image, text, encode(texts), scale)
    elif method == "negclip_images":  # each sample's negative image a row and its caption a text, their swaps columns too
        negative_captions = NEGATIVE_CAPTIONS[rank * per : (rank + 1) * per]
        both = captions + negative_captions
        texts = [t for c in both for t in swap_negatives(c, records[c], k=opts["negatives"])]
        hard = F.normalize(model.encode_image(NEGATIVE_IMAGES[rank * per : (rank + 1) * per]), dim=-1)
        loss = NegCLIPLoss(**ddp)(torch.cat([image, hard]), torch.cat([text, encode(negative_captions)]), encode(texts), scale)
    elif method.startswith("ceclip"):  # each caption's relation swap in its image's one slot, a caption without one masked
        made = [relation_negative(c, records[c]) for c in captions]
        mask = torch.tensor([[float(m is not None)] for m in made])
        swaps = encode([m or c for m, c in zip(made, captions, strict=True)])[:, None] * mask[..., None]
        ceclip = CECLIPLoss(**ddp)
        terms, margins = ceclip(image, text, swaps, mask, scale, torch.zeros(1))
        if method == "ceclip_margins":  # the next step's thresholds, the whole batch's mean margins, ranking this batch
            terms, _ = ceclip(image, text, swaps, mask, scale, margins)
        loss = sum(terms.values())
    elif method == "svlc":  # each image's rule-based negatives, every rank's a column of every row
        texts, owners = negatives(lambda c: rule_based_negatives(c, k=opts["negatives"]))
        loss = sum(SVLCLoss(**ddp)(image, text, encode(texts), owners, scale).values())
    elif method == "dac":  # per caption, from one seeded generator: its negative, its dense texts drawn, their negatives
        k, dense, drawn_negatives, made = opts["mil_batch"], [], [], []
        for caption, own in zip(captions, DENSE[rank * per : (rank + 1) * per], strict=True):
            rng = caption_rng(0, "dac", caption)
            made.append(word_list_negative(caption, rng))
            texts = rng.choices([*own, caption], k=k)
            dense += texts
            drawn_negatives += [word_list_negative(t, rng) for t in texts]
        mask = torch.tensor([float(m is not None) for m in made])
        caption_negatives = encode([m or c for m, c in zip(made, captions, strict=True)]) * mask[:, None]
        tokens = tokenizer([n or "" for n in drawn_negatives])
        exists = torch.tensor([n is not None for n in drawn_negatives])
        zeroed = tokens * exists[:, None]  # the released all-zero token row where a text has no negative
        dense_negatives = F.normalize(model.encode_text(zeroed), dim=-1).view(per, k, -1)
        loss = sum(DACLoss(**ddp)(image, text, caption_negatives, mask, encode(dense).view(per, k, -1), dense_negatives,
                                  exists.float().view(per, k), scale).values())
    elif method == "tripletclip":  # the released second forward pass: each sample's negative image and negative caption
        negative_image = F.normalize(model.encode_image(NEGATIVE_IMAGES[rank * per : (rank + 1) * per]), dim=-1)
        negative_text = encode(NEGATIVE_CAPTIONS[rank * per : (rank + 1) * per])
        loss = sum(TripletCLIPLoss(**ddp)(image, text, negative_image, negative_text, scale).values())
    elif method == "conclip":  # the released single forward pass over [images ; distractors] and [captions ; negated]
        distractor = F.normalize(model.encode_image(DISTRACTOR_IMAGES[rank * per : (rank + 1) * per]), dim=-1)
        loss = sum(CoNCLIPLoss(**ddp)(image, text, encode(NEGATED_CAPTIONS[rank * per : (rank + 1) * per]), distractor, scale).values())
    elif method == "occlip":
        batch = occlip.collate([{"image": im, "caption": c} for im, c in zip(images, captions, strict=True)], tokenizer)
        out = occlip.outputs(model, batch)  # the graphs' node and relation texts, encoded by the text tower
        keys = ("visual_tokens", "image_features", "node_features", "node_image", "relation_features", "relation_image",
                "relation_ends", "logit_scale")
        loss = sum(OCCLIPLoss(**ddp)(occlip.parts[0].binding, *(out[k] for k in keys)).values())
    else:  # clic: each image with two positives (its caption, its caption's first words) and one negative, another's caption
        positives = torch.stack([text, encode([" ".join(c.split()[:3]) for c in captions])], dim=1)
        other = encode([CAPTIONS[(rank * per + i + 1) % 8] for i in range(per)])
        loss = sum(CLICLoss(**ddp)(image, positives, other, torch.arange(per), scale).values())
    loss.backward()
    grads = {n: p.grad for n, p in trained.items() if p.grad is not None}
    if world_size > 1:  # what DDP does to the gradients: their mean over ranks
        for g in grads.values():
            dist.all_reduce(g)
            g /= world_size
    return float(loss.detach()), grads


if __name__ == "__main__":
    from compclip.train import init_distributed
    from compclip.train.distributed import leave

    env = init_distributed("cpu")
    results = {m: step(m, env.rank, env.world_size) for m in sys.argv[2].split(",")}
    if env.is_main:
        torch.save(results, sys.argv[1])
    if env.joined:
        torch.distributed.barrier()  # both ranks done before either ends the group
    leave(env)
    # past the interpreter's finalisation, where gloo's threads can still hold tensors of Python objects and abort a rank
    # that finished ("terminate called without an active exception", pytorch/pytorch#179291): the results are on disk
    sys.stdout.flush()
    os._exit(0)

"""A training step reads nothing back from the device before its loss is logged: on a GPU every such read (`.item()`,
`int()` of a tensor, a shape that depends on values) makes the host wait for the work queued before it, halfway
through the forward pass. Checked without a GPU: the step runs on the meta device, where tensors have shapes but no
values, so any read is caught (and any op whose output shape needs values fails); and it copies nothing from the host
to the device (a copy from pageable memory waits for the queued work too). The token widths a causal tower is cut at
are measured on the host, in the collate (`TextWidth`), and checked here against a loop over the ids."""
import traceback

import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils._python_dispatch import TorchDispatchMode

from compclip.concepts.pipeline import extract
from compclip.methods import build_method
from compclip.models import load_model
from compclip.models.tokens import GPU_ROWS, short_text_encoder, text_width
from compclip.train.distributed import DistEnv
from compclip.train.step import loss_step
from compclip.train.trainer import _Collate, _TrainModule

CAPTIONS = ["a red couch next to a white table", "a small dog sits on the green grass near a tall tree",
            "two men ride brown horses on a beach", "a blue car is parked to the left of a large yellow bus"]


def site() -> str:
    """The innermost compclip function on the stack, as file:function."""
    frames = [f for f in traceback.extract_stack()[:-2] if "/compclip/" in f.filename and not f.name.startswith("<")]
    return f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].name}" if frames else "?"


SIZED_BY_VALUES = {torch.ops.aten.nonzero.default, torch.ops.aten.masked_select.default, torch.ops.aten._unique2.default,
                   torch.ops.aten.unique_consecutive.default, torch.ops.aten.unique_dim.default, torch.ops.aten.repeat_interleave.Tensor}
INDEXING = {torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default,
            torch.ops.aten._index_put_impl_.default}


def sized_by_values(func, args) -> bool:
    """An op whose output's shape the host must read from the device first: `nonzero`, a boolean mask's selection or
    assignment, `unique`, a `repeat_interleave` by counts (on a GPU each waits for the queued work, as `.item()` does)."""
    if func in SIZED_BY_VALUES:
        return True
    return func in INDEXING and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None)


class DeviceReads(TorchDispatchMode):
    """Records where each value is read back to the host (`aten._local_scalar_dense`: `.item()`, `int()`, `float()`
    and `bool()` of a tensor; and an op sized by values, `sized_by_values`), answering 1 for a meta tensor, which has
    no value to give; and, in `copies`, where a host tensor is copied to the device (on a GPU a copy from pageable
    memory waits for the queued work too)."""

    def __init__(self):
        super().__init__()
        self.sites: list[str] = []
        self.copies: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.sites.append(site())
            if args[0].is_meta:
                return 1
        elif sized_by_values(func, args):
            self.sites.append(site())
        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default) and isinstance(out, torch.Tensor) and out.is_meta \
                and any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in args):
            self.copies.append(site())
        return out


@pytest.fixture(scope="module")
def records():
    return {r["caption"]: r for r in extract(CAPTIONS, ("noun_phrases", "pos", "graph"))}


def a_batch(model, method, tokenizer, seed=0):
    """The batch a DataLoader worker hands the trainer (`_Collate`, widths measured there), from real images."""
    torch.manual_seed(seed)
    transform = method.image_transform(model)
    images = [Image.fromarray(torch.randint(0, 256, (48 + 16 * (i % 2), 64, 3), dtype=torch.uint8).numpy()) for i in range(len(CAPTIONS))]
    samples = [{**(transform(img) if transform else {"image": torch.rand(3, 64, 64)}), "caption": c}
               for img, c in zip(images, CAPTIONS, strict=True)]
    return _Collate(method, tokenizer, width=text_width(model))(samples)


STEPS = [("compclip-tiny-clip", "clip", {}), ("compclip-tiny-clip", "siglip", {}), ("compclip-tiny-siglip", "clip", {}),
         ("compclip-tiny-siglip", "siglip", {}), ("compclip-tiny-clip", "negclip", {}), ("compclip-tiny-clip", "hardneg", {}),
         ("compclip-tiny-clip", "hardneg", {"negatives_as": "extra", "negatives": 2}), ("compclip-tiny-clip", "attswap", {}),
         ("compclip-tiny-clip", "clic", {"partner": "batch"}), ("compclip-tiny-siglip", "c2lip", {}),
         ("compclip-tiny-clip", "c2lip", {"concept_mode": "separate", "npc_negatives": "swap_attributes"}),
         ("compclip-tiny-clip", "clip+c2lip", {})]


@pytest.mark.parametrize("name, spec, options", STEPS, ids=[f"{s}-{n.rsplit('-', 1)[-1]}{'-' + '-'.join(o) if o else ''}"
                                                             for n, s, o in STEPS])
def test_a_training_step_reads_nothing_back_from_the_device_before_its_loss_is_logged(records, name, spec, options, monkeypatch):
    made = []  # tensors made on the device from host data inside the step (torch.tensor(list, device=...)): a copy as well
    for factory in ("tensor", "as_tensor"):
        def spy(*args, _make=getattr(torch, factory), **kwargs):
            out = _make(*args, **kwargs)
            if isinstance(out, torch.Tensor) and out.is_meta:
                made.append(site())
            return out
        monkeypatch.setattr(torch, factory, spy)
    model, _, tokenizer = load_model(name)
    method = build_method(spec, concepts=records, **options).bind(model)
    batch = a_batch(model, method, tokenizer)
    if text_width(model) is not None:
        assert set(batch["widths"]) >= {"text", *(f for p in method.parts for f in p.token_fields if f in batch)}
    model.to("meta"), method.to("meta")
    batch = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    read = []  # the (texts, positions) the text tower reads, batch by batch
    tower = model if hasattr(model, "token_embedding") else model.text
    tower.token_embedding.register_forward_hook(lambda module, args, out: read.append(tuple(args[0].shape)))
    for step in (0, 1):  # CLIC's pair step and its plain step
        method.begin_step(step)
        with DeviceReads() as reads:
            terms = loss_step(_TrainModule(model, method), method, [batch], DistEnv())
        assert reads.sites == ["step.py:loss_step"] * len(terms), reads.sites  # the logged terms alone
        assert reads.copies == [] and made == [], (reads.copies, made)  # the batch came to the device whole, before the step
    widths = batch.get("widths")
    if "text_states" in method.needs:  # C2LIP's span mode pools the caption's token states over the whole context
        read = [r for r in read if r[-1] != tokenizer.context_length]
    # off the CPU every count of texts reaches the tower padded to a multiple of GPU_ROWS: a few shapes, not one a step
    assert all(rows % GPU_ROWS == 0 for rows, _ in read), read
    read = [width for _, width in read]
    if widths is not None:  # a causal tower reads each token field up to its measured width, not the whole context
        assert set(read) <= set(widths.values()) and max(read, default=0) < tokenizer.context_length, (read, widths)
        assert read or "text_states" in method.needs
    else:
        assert set(read) <= {tokenizer.context_length}, read


def test_clics_steps_read_the_texts_they_encode_at_their_own_widths():
    """CLIC's plain step encodes each caption's first sentence, its pair step the joined captions: each at the width
    measured for what it encodes, not the whole caption's."""
    captions = ["A dog. It runs on the green grass near a tall tree and a red house with a white door.",
                "A red car. It is parked on a wide street beside a large blue bus and two small bikes.",
                "Two cats. They sleep on a soft brown couch under a big window in a quiet room at night.",
                "A man. He rides a brown horse along a sandy beach at sunset with three friends nearby."]
    model, _, tokenizer = load_model("compclip-tiny-clip")
    method = build_method("clic", concepts={r["caption"]: r for r in extract(captions, ("pos",))}, partner="batch").bind(model)
    transform = method.image_transform(model)
    image = Image.fromarray(torch.randint(0, 256, (48, 64, 3), dtype=torch.uint8).numpy())
    batch = _Collate(method, tokenizer, width=text_width(model))([{**transform(image), "caption": c} for c in captions])
    widths = batch["widths"]
    assert widths["first_text"] < widths["text"] and widths["first_text"] < widths["positive_text"], widths
    read = []
    model.token_embedding.register_forward_hook(lambda module, args, out: read.append(args[0].shape[-1]))
    model.to("meta"), method.to("meta")
    batch = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    pair_step = [widths["positive_text"], max(widths["positive_text"], widths["negative_text"])]  # the captions, then p2-p4 and negatives
    for step, encoded in ((1, [widths["first_text"]]), (0, pair_step)):
        read.clear()
        method.begin_step(step)
        with DeviceReads():  # (the logged terms have no value on the meta device)
            loss_step(_TrainModule(model, method), method, [batch], DistEnv())
        assert read == encoded, (step, read, widths)


def test_oc_clips_step_reads_only_the_width_its_graphs_need(records):
    """OC-CLIP pads each image's nodes to the busiest graph's count: one read its data makes necessary (named at
    `occlip.padded`), and no more: its relations stay listed, and a caption with no node is masked, not selected by a
    boolean mask (each `nonzero` or mask a wait on a GPU; a dozen a step made its step 1.69× CLIP's on an H200)."""
    model, _, tokenizer = load_model("compclip-tiny-siglip")
    method = build_method("occlip", concepts=records).bind(model)
    batch = a_batch(model, method, tokenizer)
    assert len(batch["relation_image"]) and len(batch["node_image"])  # relations and nodes are there to be read
    method.begin_step(0)
    with DeviceReads() as reads:
        loss_step(_TrainModule(model, method), method, [batch], DistEnv())
    assert [s for s in reads.sites if s != "step.py:loss_step"] == ["occlip.py:padded"], reads.sites


def test_a_read_sized_by_values_is_recorded_where_it_happens():
    """The recorder itself: `nonzero`, a boolean mask's selection and assignment count as reads, an integer index not."""
    x, mask = torch.arange(6.0), torch.tensor([True, False] * 3)
    with DeviceReads() as reads:
        x.nonzero(), x[mask], x[torch.tensor([0, 2])]
        x.clone()[mask] = 0.0
    assert len(reads.sites) == 3, reads.sites


def eot_positions(text: torch.Tensor, eot: int) -> list[int]:
    """Each row's end-of-text position, found by walking the ids."""
    return [next(j for j, t in enumerate(row) if t == eot) for row in text.tolist()]


@pytest.mark.parametrize("name", ["compclip-tiny-clip", "compclip-tiny-world"])
def test_the_host_measured_width_cuts_where_encode_text_reads_the_same_features_and_gradients(name):
    """The width a causal tower is cut at on a GPU (`ShortTextEncoder.cut`): past every text's end-of-text token,
    rounded up to a multiple of 8, never past the context; the features and every gradient those of open_clip's
    `encode_text` over the whole context. One position less cuts an end-of-text token off."""
    model, _, tokenizer = load_model(name)
    context = model.context_length if hasattr(model, "context_length") else tokenizer.context_length
    captions = ["a dog", "a red couch next to a white table in a bright room", "two", "a " * 60]
    eot = tokenizer(["x"])[0].max().item()
    for batch in (captions[:3], captions[:1], captions):
        text = tokenizer(batch)
        longest = max(eot_positions(text, eot)) + 1
        width = text_width(model)(text)
        assert width == min(context, 8 * -(-longest // 8)), (batch, longest, width)
    text = tokenizer(captions[:3])
    width = text_width(model)(text)
    encoder = short_text_encoder(model)
    grads = []
    for encode in (lambda t: encoder.cut(t, width), model.encode_text):
        model.zero_grad()
        features = encode(text)
        (features * torch.linspace(-1, 1, features.numel()).view_as(features)).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None} | {"features": features.detach()})
    assert grads[0].keys() == grads[1].keys()
    for key, grad in grads[0].items():
        assert torch.allclose(grad, grads[1][key], rtol=1e-4, atol=1e-5 * float(grad.abs().max())), key
    short = max(eot_positions(text, eot))  # the longest text's end-of-text token falls outside
    with torch.no_grad():
        assert not torch.allclose(F.normalize(encoder.cut(text, short), dim=-1), F.normalize(grads[1]["features"], dim=-1), atol=1e-3)


def test_a_tower_that_attends_both_ways_is_measured_nowhere():
    """SigLIP's text tower reads its padding: the collate measures no width, the step reads the whole context."""
    model, _, tokenizer = load_model("compclip-tiny-siglip")
    assert text_width(model) is None and short_text_encoder(model) is None
    method = build_method("siglip")
    assert "widths" not in _Collate(method, tokenizer, width=text_width(model))([{"image": torch.rand(3, 64, 64), "caption": "a dog"}] * 2)


@pytest.fixture
def widths_given(monkeypatch):
    """The widths each `ShortTextEncoder` call is handed (on the CPU it measures again, so only the call shows them)."""
    from compclip.models.tokens import ShortTextEncoder

    given, call = [], ShortTextEncoder.__call__
    def recorded(self, text, width=None):
        given.append((text.shape[-1], width))
        return call(self, text, width)

    monkeypatch.setattr(ShortTextEncoder, "__call__", recorded)
    return given


def test_a_run_hands_its_steps_the_widths_its_loader_measured(tmp_path, widths_given):
    from compclip.train import TrainConfig, train
    from test_train import make_dataset

    train(TrainConfig(method="clip", model="compclip-tiny-clip", train_data=str(make_dataset(tmp_path, n=8)), out=str(tmp_path / "run"),
                      batch_size=4, steps=2, workers=1))
    assert len(widths_given) == 2 and all(width == 16 for _, width in widths_given), widths_given  # "a red square to the left of …"


def test_evaluation_cuts_each_batch_of_texts_where_the_host_measured_it(widths_given):
    from compclip.scoring import DualEncoderScorer

    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    texts = ["a dog", "a cat on a mat", "a red couch next to a white table in a bright room with two chairs"]
    scorer = DualEncoderScorer(model, preprocess, tokenizer, batch_size=1, workers=0)
    features = scorer._encode_texts(texts)[1]
    assert widths_given == [(context := tokenizer.context_length, text_width(model)(tokenizer(texts)))] and context > 16
    with torch.no_grad():
        assert torch.allclose(features, F.normalize(model.encode_text(tokenizer(texts)), dim=-1), atol=1e-5)

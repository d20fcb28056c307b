"""The GPU paths, against the CPU as reference: loss terms and gradients of every method, training in each
precision, exact resume with CUDA's random state, and scoring. Skipped where no GPU is (CI has none); run on
a GPU machine with `pytest tests/test_cuda.py`."""
import shutil

import pytest
import torch

import dist_grads
from compclip.models import load_model
from compclip.train import DistEnv
from test_train import assert_same, losses, make_dataset

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def _full_fp32():
    """TF32 (cuDNN's default for convolutions) rounds to 10 bits of mantissa: compare in true fp32."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("method", ["siglip", "clip", "c2lip", "c2lip+hardneg", "negclip", "occlip"])
def test_loss_terms_and_gradients_on_the_gpu_equal_the_cpu(method):
    cpu = dist_grads.compute(DistEnv(), 1, method)
    gpu = dist_grads.compute(DistEnv(device=torch.device("cuda")), 1, method, device="cuda")
    assert_same(cpu, gpu, rel=1e-4, grad_rel=1e-4, term_abs=1e-6, grad_abs=1e-7)


def test_oc_clips_score_under_autocast_keeps_no_float32_copy_of_the_slots():
    """CUDA's autocast runs the norm and the cosine in float32, which would keep a float32 copy of the (B, G, N, D) slots
    beside their bfloat16 selves: the largest tensors of an OC-CLIP step (`benchmarks/occlip_memory.py`)."""
    from test_occlip import slots_kept

    assert slots_kept("cuda", autocast=True) == [torch.bfloat16]


def _config(tmp_path, data, **kwargs):
    from compclip.train import TrainConfig

    options = {"method": "c2lip", "model": "compclip-tiny-siglip", "train_data": str(data), "concepts": str(tmp_path / "concepts"),
               "batch_size": 8, "steps": 8, "lr": 1e-3, "warmup": 2, "workers": 2, "save_every": 4, "keep": 3}
    return TrainConfig(**{**options, **kwargs})


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from compclip.concepts import build_store, iter_captions

    root = tmp_path_factory.mktemp("gpu")
    data = make_dataset(root, n=48)
    build_store(iter_captions(data), root / "concepts", "noun-phrases,pos,graph")
    return root, data


@pytest.fixture(scope="module")
def cpu_run(dataset):
    from compclip.train import train

    root, data = dataset
    train(_config(root, data, out=str(root / "cpu"), device="cpu"))
    return losses(root / "cpu")


@pytest.mark.parametrize("precision, rel", [("fp32", 1e-4), ("amp_bf16", 3e-2), ("amp", 1e-2)])
def test_training_on_the_gpu_in_each_precision(dataset, cpu_run, precision, rel):
    """The same seed gives the same model and batches on either device: the first step's loss is the CPU's up to
    the precision's rounding; the run learns; its checkpoint loads on the CPU and embeds as it did on the GPU."""
    from compclip.train import train

    root, data = dataset
    out = root / precision
    train(_config(root, data, out=str(out), device="cuda", precision=precision))
    gpu_run = losses(out)
    assert gpu_run[1] == pytest.approx(cpu_run[1], rel=rel)
    assert gpu_run[8] < gpu_run[1]
    if precision == "fp32":  # eight steps of Adam amplify rounding, but stay close in fp32
        assert [gpu_run[s] for s in range(1, 9)] == pytest.approx([cpu_run[s] for s in range(1, 9)], rel=1e-3)
    ckpt = str(out / "checkpoints" / "step_0000008")
    on_cpu, _, tokenizer = load_model(ckpt, device="cpu")
    on_gpu, _, _ = load_model(ckpt, device="cuda")
    images = torch.rand(4, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    text = tokenizer(["a red square", "a blue circle"])
    with torch.no_grad():
        for encode, x in ((lambda m, x: m.encode_image(x), images), (lambda m, x: m.encode_text(x), text)):
            expected = encode(on_cpu.eval(), x)
            assert torch.allclose(encode(on_gpu.eval(), x.cuda()).cpu(), expected, atol=1e-4, rtol=1e-4)


def test_a_gpu_run_resumes_exactly(dataset):
    """CUDA's random state, the optimizer and the data position come back from the checkpoint: a run resumed at
    step 4 repeats steps 5-8 of the run that went straight through."""
    from compclip.train import train

    root, data = dataset
    train(_config(root, data, out=str(root / "straight"), device="cuda"))
    shutil.copytree(root / "straight", root / "resumed")
    shutil.rmtree(root / "resumed" / "checkpoints" / "step_0000008")
    (root / "resumed" / "checkpoints" / "latest").write_text("step_0000004")  # as if killed between steps 4 and 8
    train(_config(root, data, out=str(root / "resumed"), device="cuda"))
    a, b = losses(root / "straight"), losses(root / "resumed")
    assert sorted(b) == list(range(1, 9))
    assert [b[s] for s in range(5, 9)] == pytest.approx([a[s] for s in range(5, 9)], rel=1e-6)


@pytest.mark.parametrize("method", ["c2lip", "clic", "occlip"])
def test_scores_on_the_gpu_equal_the_cpu(dataset, method):
    """The dual encoder's and OC-CLIP's own scorer: fp32 on the GPU as on the CPU, and amp (evaluation's GPU
    default, as CLIP_benchmark's) within fp16's rounding."""
    from compclip.eval.scorer import load_scorer
    from compclip.train import train

    root, data = dataset
    out = root / f"score-{method}"
    train(_config(root, data, out=str(out), method=method, steps=2, save_every=2, device="cuda"))
    ckpt = str(out / "checkpoints" / "step_0000002")
    images = sorted(str(p) for p in (root / "img").glob("*.jpg"))[:6]
    texts = ["a red square to the left of a blue circle", "a blue square to the left of a red circle", "a green circle",
             "a yellow square", "a red circle to the left of a green square", "a square"]
    reference = load_scorer(ckpt, device="cpu", workers=0).matrix(images, texts)
    for precision, tol in (("fp32", 1e-4), ("amp", 2e-2)):
        scores = load_scorer(ckpt, device="cuda", workers=0, precision=precision).matrix(images, texts).float().cpu()
        assert scores.shape == reference.shape == (6, 6)
        assert torch.allclose(scores, reference, atol=tol), (precision, (scores - reference).abs().max().item())

"""The vision-language fixture (evalgate/models/idefics3_tiny.py, ``embedded:idefics3-tiny``): built byte-identically
from its seed, resolved once into ``$EVALGATE_HOME``; through the real vLLM CPU engine (``multi_modal_data``) its
float32 greedy tokens are repeatable, depend on the image's pixels, and equal transformers' ``generate``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from evalgate.models import idefics3_tiny as V  # noqa: E402
from evalgate.models.embedded import IDEFICS3_MODEL, model_fingerprint, prepare_idefics3_model, resolve_model  # noqa: E402
from evalgate.models.hybrid import CHECKPOINT_DIR  # noqa: E402

# sha256 of model.safetensors for seed 0 (RECIPE_VERSION 1, torch 2.13 CPU, transformers 5.19).
SEED0_SHA256 = "1dddae6c623b90951f06683a0f4370caa7c6667d564dc3896a013afe980d999c"
PROMPT = "<image>Describe the picture."
N_TOKENS = 16


def images() -> dict:
    """Named test images: two noise images of one seed (equal pixels, distinct objects), another seed, two colours."""
    import numpy as np
    from PIL import Image

    def noise(seed: int, size: tuple[int, int] = (100, 80)) -> Image.Image:
        rng = np.random.default_rng(seed)
        return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))

    return {"noise1": noise(1), "noise1_again": noise(1), "noise2": noise(2),
            "red": Image.new("RGB", (100, 80), (200, 10, 10)), "blue": Image.new("RGB", (100, 80), (10, 10, 200))}


# The engine side, run in a subprocess (in-process vLLM, as evalgate's worker runs it): greedy ids per image,
# one request at a time and then all in one batch, plus the text-only prompt.
_VLLM_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[2])
from vllm import LLM, SamplingParams
from tests.models.test_idefics3_tiny import images, PROMPT, N_TOKENS
llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=2048, enforce_eager=True, seed=0,
          limit_mm_per_prompt={"image": 1}, max_num_seqs=8)
sp = SamplingParams(temperature=0.0, max_tokens=N_TOKENS, ignore_eos=True)
imgs = images()
one = {}
for name, im in imgs.items():
    out = llm.generate({"prompt": PROMPT, "multi_modal_data": {"image": im}}, sp, use_tqdm=False)[0]
    one[name] = {"ids": list(out.outputs[0].token_ids), "prompt_len": len(out.prompt_token_ids)}
outs = llm.generate([{"prompt": PROMPT, "multi_modal_data": {"image": im}} for im in imgs.values()], sp,
                    use_tqdm=False)
batch = {name: list(o.outputs[0].token_ids) for name, o in zip(imgs, outs)}
text = list(llm.generate(PROMPT.replace("<image>", ""), sp, use_tqdm=False)[0].outputs[0].token_ids)
print(json.dumps({"one": one, "batch": batch, "text": text}))
"""


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_idefics3_model(tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="module")
def hf_greedy(ckpt: Path) -> dict[str, dict]:
    """transformers' float32 greedy ids (and prompt lengths) on three of the images."""
    from transformers import AutoProcessor, Idefics3ForConditionalGeneration

    proc = AutoProcessor.from_pretrained(str(ckpt))
    model = Idefics3ForConditionalGeneration.from_pretrained(str(ckpt), dtype=torch.float32).eval()
    out = {}
    with torch.no_grad():
        for name, im in images().items():
            if name in ("noise1", "noise2", "red"):
                x = proc(text=PROMPT, images=[im], return_tensors="pt")
                gen = model.generate(**x, max_new_tokens=N_TOKENS, min_new_tokens=N_TOKENS, do_sample=False)
                n = x["input_ids"].shape[1]
                out[name] = {"ids": gen[0, n:].tolist(), "prompt_len": n}
    return out


@pytest.fixture(scope="module")
def engine(ckpt: Path) -> dict:
    pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run([sys.executable, "-c", _VLLM_SCRIPT, str(ckpt), root], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- build
def test_build_is_byte_deterministic_and_seeded(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    a = V.build(tmp_path / "a", seed=0)
    elapsed = time.perf_counter() - t0
    b = V.build(tmp_path / "b", seed=1)
    shas = {f.name: V.file_sha256(f) for f in sorted(a.iterdir())}
    assert sorted(shas) == ["chat_template.jinja", "config.json", "generation_config.json", "model.safetensors",
                            "processor_config.json", "tokenizer.json", "tokenizer_config.json"]
    assert shas["model.safetensors"] == SEED0_SHA256
    assert V.file_sha256(b / "model.safetensors") != SEED0_SHA256
    assert {f.name: V.file_sha256(f) for f in sorted(b.iterdir()) if f.name != "model.safetensors"} == {
        k: v for k, v in shas.items() if k != "model.safetensors"}
    assert (a / "model.safetensors").stat().st_size < 4 * 1024**2  # 3.6 MB of float32
    assert elapsed < 60, elapsed  # ~7 s here


def test_config_tokenizer_and_processor(ckpt: Path) -> None:
    from transformers import AutoConfig, AutoProcessor

    cfg = AutoConfig.from_pretrained(str(ckpt))
    assert cfg.architectures == ["Idefics3ForConditionalGeneration"] and cfg.dtype == torch.float32
    assert cfg.text_config.head_dim == 64 and cfg.vision_config.hidden_size == 32
    proc = AutoProcessor.from_pretrained(str(ckpt))
    tok = proc.tokenizer
    base = json.loads((CHECKPOINT_DIR / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(base) == 2048 and len(tok) == 2048 + len(V.IMAGE_TOKENS) == cfg.text_config.vocab_size
    assert tok.convert_tokens_to_ids("<image>") == cfg.image_token_id == 2049
    assert tok("Total: 1,234.50")["input_ids"][0] == 1  # <s> first, as the packaged tokenizer
    # one 100x80 image: 2x2 tiles of 64 plus the global tile, 4 image tokens each, framed by row/column markers
    x = proc(text=PROMPT, images=[images()["red"]], return_tensors="pt")
    assert int((x["input_ids"] == cfg.image_token_id).sum()) == 5 * V.IMAGE_SEQ_LEN


def test_alias_builds_once_into_evalgate_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    path = Path(resolve_model(IDEFICS3_MODEL))
    assert path == tmp_path / "home" / "models" / "idefics3-tiny"
    marker = json.loads((path / "evalgate-model.json").read_text())
    assert marker["model_sha256"] == SEED0_SHA256 and (marker["recipe"], marker["seed"]) == (V.RECIPE_VERSION, 0)
    assert model_fingerprint(str(path)) == marker["fingerprint"]
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert Path(resolve_model(IDEFICS3_MODEL)) == path and (path / "model.safetensors").stat().st_mtime_ns == mtime
    assert [p.name for p in path.parent.iterdir()] == ["idefics3-tiny"]


# ---------------------------------------------------------------- vLLM
@pytest.mark.engine
def test_vllm_greedy_ids_are_repeatable_and_depend_on_the_pixels(engine: dict) -> None:
    one = engine["one"]
    assert all(len(r["ids"]) == N_TOKENS for r in one.values())
    assert one["noise1"]["ids"] == one["noise1_again"]["ids"]  # equal pixels, distinct PIL objects
    distinct = {tuple(one[k]["ids"]) for k in ("noise1", "noise2", "red", "blue")}
    assert len(distinct) == 4, one  # every different image gives different tokens
    assert engine["text"] != one["noise1"]["ids"]
    # the image costs prompt tokens: 5 tiles x 4 image tokens plus the framing tokens
    assert one["red"]["prompt_len"] > len(engine["text"]) and one["red"]["prompt_len"] == one["noise2"]["prompt_len"]
    # one batch of all five images gives the same ids as five single requests
    assert engine["batch"] == {k: v["ids"] for k, v in one.items()}


@pytest.mark.engine
def test_vllm_float32_equals_transformers_token_for_token(engine: dict, hf_greedy: dict) -> None:
    for name, ref in hf_greedy.items():
        assert engine["one"][name] == ref, name


def test_vl_config_family() -> None:
    from evalgate.inputs.config import load_baseline, load_config

    base = load_config("vl/baseline", check_engine_args=False)
    assert base.model == IDEFICS3_MODEL and base.baseline is None
    assert base.engine_args["dtype"] == "float32" and base.engine_args["limit_mm_per_prompt"] == {"image": 1}
    bf16 = load_config("vl/bf16", check_engine_args=False)
    assert bf16.expect == "lossy" and bf16.engine_args == {**base.engine_args, "dtype": "bfloat16"}
    assert load_baseline(bf16, check_engine_args=False).path == base.path

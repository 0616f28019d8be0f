"""A GGUF loaded quantized and decoded on the lean forward imports no transformers (nor pandas, scipy, plotly):
its model is ``gguf_shell.QuantGemma``, its config and tokenizer come from the cache built once for the file, and
transformers' modules are imported only where its forward or its cache runs (each is tens of MB resident)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from specviz.runtime import native
from tests.helpers.tiny_gguf import PIECES, SPECIALS, WINDOW, write_tiny_gemma

pytest.importorskip("gguf")
pytestmark = pytest.mark.skipif(native.unavailable() is not None, reason=f"{native.unavailable()}")
HEAVY = ("transformers", "pandas", "scipy", "plotly")

PROBE = """
import json, sys
import torch
from pathlib import Path
from specviz import DecodeConfig, PromptLookupDrafter, autoregressive_generate, speculative_generate
from specviz.runtime import gguf as loader

path = Path(sys.argv[1])
model, tok = loader.load(path.parent, path.name, torch.float32)
prompt = torch.tensor([[2, 6, 7, 8, 6, 7, 8, 6]])
cfg = DecodeConfig(k=3, temperature=0.0, max_new_tokens=12)
own = autoregressive_generate(model, prompt, cfg).new_tokens
spec = speculative_generate(model, PromptLookupDrafter(), prompt, cfg).new_tokens
print(json.dumps({"modules": sorted({m.split('.')[0] for m in sys.modules}), "own": own, "spec": spec,
                  "kind": type(model).__name__, "ids": tok("a b").input_ids}))
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Gemma-3 GGUF and a cache folder holding its config and tokenizer (built once, here)."""
    from specviz.runtime import gguf as loader

    folder, cache = tmp_path_factory.mktemp("gguf"), tmp_path_factory.mktemp("cache")
    path = write_tiny_gemma(folder / "tiny-gemma3.gguf")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_GGUF_CACHE", str(cache))
        loader.described(folder, path.name)
    return path, cache


def run_probe(path, cache, **env) -> dict:
    """The probe's report from a fresh interpreter: the top-level modules it imported, its greedy outputs."""
    full = {**os.environ, "SPECVIZ_GGUF_CACHE": str(cache), **env}
    out = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, timeout=300,
                         env=full, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_loading_and_decoding_a_gguf_on_the_lean_path_imports_no_transformers(tiny):
    report = run_probe(*tiny)
    assert report["kind"] == "QuantGemma"
    assert set(report["modules"]) & set(HEAVY) == set()
    assert report["spec"] == report["own"] and len(report["own"]) == 12


@pytest.mark.slow
def test_the_probe_sees_transformers_once_its_forward_runs(tiny):
    """The negative control: the same probe, the GGUF loaded dequantized (transformers' model and forward)."""
    report = run_probe(*tiny, SPECVIZ_GGUF="dequantize")
    assert report["kind"] != "QuantGemma" and "transformers" in report["modules"]


def test_the_shell_computes_ropes_as_transformers_does(tiny):
    """RoPE tables of the shell equal transformers' Gemma3RotaryEmbedding's, bit for bit, for both layer kinds."""
    from transformers import AutoConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    from specviz.runtime import gguf as loader
    from specviz.runtime.gguf_shell import GemmaRope

    path, cache = tiny
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_GGUF_CACHE", str(cache))
        folder = loader.described(path.parent, path.name)
        ours = GemmaRope(loader.config(path.parent, path.name))
    theirs = Gemma3RotaryEmbedding(AutoConfig.from_pretrained(str(folder), local_files_only=True), device="cpu")
    x, positions = torch.zeros(1, dtype=torch.float32), torch.arange(300)[None]
    for kind in ("sliding_attention", "full_attention"):
        for a, b in zip(ours(x, positions, kind), theirs(x, positions, kind)):
            assert torch.equal(a, b)


def test_the_shell_reads_as_transformers_model_did_where_the_decoder_looks(tiny):
    """The lean forward takes it; its sliding window, context, vocabulary and EOS are the file's; its own forward
    refuses in words (its layers hold no weights)."""
    from specviz.config import eos_ids
    from specviz.runtime import forwards, lean_gemma, lm
    from specviz.runtime import gguf as loader

    path, cache = tiny
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_GGUF_CACHE", str(cache))
        model, _ = loader.load(path.parent, path.name, torch.float32)
    assert lean_gemma.supports(model) and lm.CachedLM(model).path == "lean"
    assert forwards.sliding_window(model) == WINDOW and lm.context_window(model) == 256
    assert lm.CachedLM(model).vocab_size == len(SPECIALS + PIECES) and eos_ids(model) == [1]
    with pytest.raises(ValueError, match="lean forward only"):
        model(torch.tensor([[2]]))

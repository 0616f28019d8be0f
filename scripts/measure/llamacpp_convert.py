"""Convert bundled models to GGUF f32 for llama.cpp, with the bundled tokenizer registered as llama.cpp's "gpt-2"
pre-tokenizer, and check the result against specviz (tokenization and greedy continuation).

    .venv/bin/python scripts/measure/llamacpp_convert.py [--out /work/ext/gguf] [--models target lite]
                                                         [--llama-cpp DIR] [--no-check]

Needs: a llama.cpp source tree with its built binaries (``build/bin/llama-server``; default: the one vendored in
/work/ext/llama_cpp_python-*/vendor/llama.cpp) and its gguf-py installed in this venv
(``pip install <llama.cpp>/gguf-py``, not ``-e``: an editable install puts gguf-py's own ``tests`` folder on
the path, where it hides this project's ``tests`` package; the converter also imports sentencepiece). Takes about
15 seconds (2 CPU cores): loading and saving the two models, the conversion, and the check (a llama-server started
on the target).
Writes, under --out: ``<name>-hf/`` (a plain fp32 Hugging Face folder with the family's tokenizer) and
``<name>-f32.gguf`` for each model.

How the tokenizer is registered. The converter recognises a BPE tokenizer's pre-tokenizer by a hash: it encodes a
fixed check text (``chktxt``, the ``CHK_TXT`` of ``convert_hf_to_gguf_update.py``), takes sha256 of ``str(ids)``,
and looks the hash up in ``get_vocab_base_pre`` (a table that ``convert_hf_to_gguf_update.py`` generates from
downloaded tokenizers; unknown hash: "BPE pre-tokenizer was not recognized"). Instead of editing that generated
table, this script imports the converter as a module, computes the bundled tokenizer's hash the same way, and wraps
``TextModel.get_vocab_base_pre`` so that this one hash maps to "gpt-2" (every other hash goes to the original).
"gpt-2" is right for it: its tokenizer.json has no normalizer and a ByteLevel pre-tokenizer with use_regex=True and
add_prefix_space=False, i.e. GPT-2's split regex, which is what llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT2 applies; the
script checks those fields before registering.
"""
from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import subprocess
import sys
import time
import urllib.request
from hashlib import sha256
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def default_llama_cpp() -> Path:
    found = sorted(glob.glob("/work/ext/llama_cpp_python-*/vendor/llama.cpp"))
    return Path(os.environ.get("LLAMA_CPP", found[-1] if found else "llama.cpp"))


def check_text(llama_cpp: Path) -> str:
    """The check text the converter hashes: CHK_TXT of convert_hf_to_gguf_update.py, read without running that
    script (it parses arguments and fetches tokenizers at import)."""
    tree = ast.parse((llama_cpp / "convert_hf_to_gguf_update.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CHK_TXT" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError("CHK_TXT not found in convert_hf_to_gguf_update.py")


def pre_tokenizer_hash(tokenizer, chktxt: str) -> str:
    """What get_vocab_base_pre computes: sha256 of str(tokenizer.encode(chktxt))."""
    return sha256(str(tokenizer.encode(chktxt)).encode()).hexdigest()


def check_gpt2_style(folder: Path) -> None:
    """The bundled tokenizer must split text as GPT-2 does for "gpt-2" to be the right pre-tokenizer."""
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    pre, model = tj.get("pre_tokenizer") or {}, tj.get("model") or {}
    ok = (tj.get("normalizer") is None and model.get("type") == "BPE" and pre.get("type") == "ByteLevel"
          and pre.get("use_regex", True) and not pre.get("add_prefix_space", False))
    if not ok:
        raise SystemExit(f"{folder}: not a GPT-2-style byte-level BPE (normalizer {tj.get('normalizer')}, "
                         f"pre_tokenizer {pre}): 'gpt-2' would not be its pre-tokenizer")


def save_plain(name: str, out: Path) -> Path:
    """specviz.models.load_model dequantizes the 8-bit storage; save a plain fp32 folder with its tokenizer."""
    import torch

    from specviz.models import load_model

    model, tokenizer = load_model(name, device="cpu", dtype=torch.float32)
    folder = out / f"{name}-hf"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def convert(folder: Path, gguf_path: Path, llama_cpp: Path, chktxt: str) -> str:
    """Run the converter's main() in this process with the bundled tokenizer's hash registered as "gpt-2"."""
    from transformers import AutoTokenizer

    check_gpt2_style(folder)
    chkhsh = pre_tokenizer_hash(AutoTokenizer.from_pretrained(folder), chktxt)
    sys.path.insert(0, str(llama_cpp))
    import convert_hf_to_gguf  # noqa: F401 (puts llama.cpp's gguf-py and conversion package in place)
    from conversion.base import TextModel

    original = getattr(TextModel.get_vocab_base_pre, "__wrapped__", TextModel.get_vocab_base_pre)
    if chktxt not in original.__code__.co_consts:
        raise SystemExit("the converter's chktxt differs from convert_hf_to_gguf_update.py's CHK_TXT")

    def get_vocab_base_pre(self, tokenizer) -> str:
        if pre_tokenizer_hash(tokenizer, chktxt) == chkhsh:  # registered: the specviz family's tokenizer
            return "gpt-2"
        return original(self, tokenizer)

    get_vocab_base_pre.__wrapped__ = original
    TextModel.get_vocab_base_pre = get_vocab_base_pre
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", str(folder), "--outtype", "f32", "--outfile", str(gguf_path)]
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv
    return chkhsh


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def server_command(bin_dir: Path, model: Path, port: int, threads: int = 2, extra=()) -> list[str]:
    """llama-server on one slot, context 512, the given threads, /metrics on, no web UI."""
    return [str(bin_dir / "llama-server"), "-m", str(model), "--port", str(port), "-t", str(threads), "-c", "512",
            "-np", "1", "--metrics", "--no-webui", *extra]


def start_server(bin_dir: Path, model: Path, port: int, extra=(), log=None, threads: int = 2) -> subprocess.Popen:
    """Start llama-server and wait until /health answers."""
    proc = subprocess.Popen(server_command(bin_dir, model, port, threads, extra), stdout=log or subprocess.DEVNULL,
                            stderr=subprocess.STDOUT if log else subprocess.DEVNULL)
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except Exception as e:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({proc.returncode})") from e
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("llama-server did not come up")


def check(gguf_path: Path, llama_cpp: Path, port: int = 18431, n: int = 32) -> bool:
    """llama.cpp's tokenization of the example and held-out prompts == the HF tokenizer's, and its greedy
    continuation == specviz's greedy (autoregressive_generate at temperature 0) for the first n tokens."""
    import torch

    from specviz import autoregressive_generate
    from specviz.config import EXAMPLE_PROMPTS, HELDOUT_PROMPTS, DecodeConfig
    from specviz.models import load_model

    torch.set_num_threads(2)
    target, tok = load_model("target", device="cpu", dtype=torch.float32)
    server, ok = start_server(llama_cpp / "build" / "bin", gguf_path, port), True
    try:
        url = f"http://127.0.0.1:{port}"
        for prompt in EXAMPLE_PROMPTS + HELDOUT_PROMPTS + ["  two  spaces\tand a tab, 3.14 + 42 = 45.14!", "ÆÞé ✅"]:
            hf = tok(prompt).input_ids
            ll = post(f"{url}/tokenize", {"content": prompt, "add_special": True})["tokens"]
            same = hf == ll
            ok &= same
            print(f"tokenize {'==' if same else '!='} {prompt!r}: hf {hf}" + ("" if same else f" llama.cpp {ll}"))
        for prompt in EXAMPLE_PROMPTS + HELDOUT_PROMPTS:
            ids = tok(prompt, return_tensors="pt").input_ids
            ours = autoregressive_generate(target, ids, DecodeConfig(temperature=0, max_new_tokens=n)).new_tokens
            r = post(f"{url}/completion", {"prompt": ids[0].tolist(), "n_predict": n, "temperature": 0,
                                           "return_tokens": True, "cache_prompt": False, "ignore_eos": True,
                                           })
            theirs = r["tokens"]
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
            same = first is None and len(ours) == len(theirs)
            ok &= same
            note = "" if same else f" (first difference at token {first}: ours {ours[first:first + 4]} " \
                                   f"llama.cpp {theirs[first:first + 4]})"
            print(f"greedy {n} {'==' if same else '!='} {prompt!r}{note}")
    finally:
        server.terminate()
        server.wait()
    return ok


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("/work/ext/gguf"))
    ap.add_argument("--models", nargs="+", default=["target", "lite"])
    ap.add_argument("--llama-cpp", type=Path, default=default_llama_cpp())
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    chktxt = check_text(args.llama_cpp)
    for name in args.models:
        folder = save_plain(name, args.out)
        chkhsh = convert(folder, args.out / f"{name}-f32.gguf", args.llama_cpp, chktxt)
        print(f"{name}: {folder} -> {args.out / f'{name}-f32.gguf'} (pre-tokenizer hash {chkhsh} -> 'gpt-2')")
    if not args.no_check and "target" in args.models:
        ok = check(args.out / "target-f32.gguf", args.llama_cpp)
        print("check:", "PASS" if ok else "DIFFERENCES (see above)")


if __name__ == "__main__":
    main()

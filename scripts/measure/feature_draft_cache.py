"""What a target pass's stream of weights costs the feature draft that runs after it: the draft's pruned head and its
layer (one row each, the C stack's calls) timed back to back, warm, and right after a one-row pass of Gemma-3 270M,
which reads some 250 MB and leaves little of the draft's 11 MB in the caches.

    python scripts/measure/feature_draft_cache.py --feature-draft assets/models/gemma-3-270m-feature-draft

Prints the host line, then the median milliseconds of the head and the layer, warm and after a pass.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from gemma_args import gemma_parser, shipped  # noqa: E402
from hostline import host_line  # noqa: E402


def main(argv=None) -> None:
    ap = gemma_parser(__doc__)
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    from specviz import slim
    from specviz.runtime.gemma_sequence import GemmaSequence

    args.gguf = shipped(args.gguf)
    print(f"# {host_line()}\n# python {' '.join(sys.argv)}", flush=True)
    seq = GemmaSequence.from_gguf(args.gguf, threads=args.threads)
    draft = slim.FeatureDraft(seq, args.feature_draft, threads=args.threads)
    ids = list(range(1000, 1030))  # some context, as a run would hold
    seq.decode(np.asarray(ids))
    h = draft._sync(ids)

    def head_and_layer() -> tuple[float, float]:
        t0 = time.perf_counter()
        draft._head(h)
        t1, held = time.perf_counter(), draft.length
        draft._layer(h, np.asarray([1234]))
        draft.length = held  # the drafted row goes, as after a round
        return (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3

    warm = [head_and_layer() for _ in range(args.repeats)]
    cold = []
    for _ in range(args.repeats):
        seq.crop(len(ids))
        seq.decode(np.asarray([5000]))  # one target pass between
        cold.append(head_and_layer())
    for name, times in (("warm (back to back)", warm), ("right after a target pass", cold)):
        head, layer = np.median(times, axis=0)
        print(f"{name:<26} head {head:.3f} ms  layer {layer:.3f} ms  ({len(times)} each)")


if __name__ == "__main__":
    main()

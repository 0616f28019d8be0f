"""What one target pass costs on each forward, by rows: the verify cost v (k + 1 rows over one) that decides what
speculation can gain on it. Side by side in one run, interleaved, medians.

    .venv/bin/python scripts/measure/pass_costs.py [--rows 1 2 5 7 9] [--repeats 7] [--calls 20] [--threads 2]

Forwards: "lean" (specviz's torch forward) and "llamacpp" (llama.cpp's, through llama-cpp-python; needs it and
gguf installed, or LLAMA_CPP_LIB_PATH at a llama.cpp build's libllama). The bundled target after the first example
prompt; each call appends the rows and rolls them back (a verify pass and its rollback). Prints ms per call and
the ratio to one row on the same forward. Takes about 20 s on 2 quiet cores.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 5, 7, 9])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch

    from specviz.config import EXAMPLE_PROMPTS
    from specviz.models import DEFAULT_TARGET, load_model
    from specviz.runtime import llamacpp
    from specviz.runtime.lm import CachedLM

    torch.set_num_threads(args.threads)
    target, tok = load_model(DEFAULT_TARGET, device="cpu")
    ids = tok(EXAMPLE_PROMPTS[0], return_tensors="pt").input_ids[0].tolist()
    paths = ["lean"] + ([] if llamacpp.available() else ["llamacpp"])
    times: dict[tuple[str, int], list[float]] = {}
    with torch.inference_mode():
        lms = {path: CachedLM(target, path) for path in paths}
        for lm in lms.values():
            lm.feed(ids)
            lm.feed([5] * max(args.rows))  # warm-up: first calls allocate
            lm.rollback(len(ids))
        for rep in range(args.repeats):
            for path in (paths if rep % 2 == 0 else paths[::-1]):
                for rows in args.rows:
                    lm = lms[path]
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        lm.feed([7] * rows)
                        lm.rollback(len(ids))
                    times.setdefault((path, rows), []).append((time.perf_counter() - t0) / args.calls * 1e3)
    print(f"target={DEFAULT_TARGET} context={len(ids)} threads={torch.get_num_threads()} repeats={args.repeats} "
          f"x {args.calls} calls; ms per pass (append the rows, roll them back), median [min-max]")
    print(f"{'forward':<10}" + "".join(f"{f'{r} rows':>22}" for r in args.rows))
    for path in paths:
        one = statistics.median(times[(path, args.rows[0])])
        cells = []
        for rows in args.rows:
            v = times[(path, rows)]
            cells.append(f"{statistics.median(v):7.2f} [{min(v):.1f}-{max(v):.1f}] {statistics.median(v) / one:4.2f}x")
        print(f"{path:<10}" + "".join(f"{c:>22}" for c in cells))
    if len(paths) < 2:
        print(f"(llama.cpp's forward not measured: {llamacpp.available()})")


if __name__ == "__main__":
    main()

"""The conformance kit against specviz.serve, 20 seeded times per accept rule: how often it passes Leviathan's
rule (and the other exact ones, point_mass and exact_match) and flags each lossy rule and classic bug at its
default N.

    python scripts/measure/conformance_repeats.py [--repeats 20] [--n 500]

Served in this process (``/props`` over localhost HTTP, the samples handed to the server's own handler as JSON,
without the socket: the same request and answer, less the HTTP time): the seeded table pair
(``specviz.serve.TableLM``, vocabulary 6, the draft the table plus noise 1.5),
one prompt, T = 0.6 with top-k 3 (the kit's default setting), 4 tokens."""
from __future__ import annotations

import argparse
import json
import threading
import time

import torch
from hostline import host_line

from specviz.conformance import LlamaCpp, run
from specviz.serve import Engine, make_server, table_pair

RULES = ("leviathan", "point_mass", "exact_match", "typical", "optimistic", "lenient", "scalar_residual", "raw_q")


def serve(rule: str):
    engine = Engine(*table_pair(), rule=rule)
    server = make_server(engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def transport(url, body, timeout):  # the handler's JSON in and out, without the socket
        return json.loads(json.dumps(engine.completion(json.loads(json.dumps(body)))))

    return server, LlamaCpp(f"http://127.0.0.1:{server.server_address[1]}", transport=transport)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--n", type=int, default=None, help="samples per mode (default: the kit's DEFAULT_N)")
    ap.add_argument("--rules", default=",".join(RULES), help="comma-separated (default: all eight)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"# {host_line()}; python scripts/measure/conformance_repeats.py --repeats {a.repeats}"
          + (f" --n {a.n}" if a.n else "") + (f" --rules {a.rules}" if a.rules != ",".join(RULES) else ""), flush=True)
    for rule in a.rules.split(","):
        server, client = serve(rule)
        started, verdicts, sampled = time.perf_counter(), [], []
        for seed in range(a.repeats):
            card = run(client, [[1]], seed=seed, **({"n": a.n} if a.n else {}))
            verdicts.append(card.verdict)
            sampled.append(card.sampled_flagged)
        server.shutdown()
        print(f"{rule:16s} pass {verdicts.count('pass'):2d}  flag {verdicts.count('flag'):2d}  "
              f"(sampled tests flagged {sum(sampled):2d}) of {a.repeats}; N per mode {card.n}; "
              f"{time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()

"""python -m specviz.serve: a small HTTP server that samples like llama.cpp's ``/completion`` (and an OpenAI-style
``/v1/completions``), with speculation switched per request and any accept rule, the lossy ones and two classic bugs
included: the negative control an engine conformance kit (``specviz.conformance``) must flag.

Notation as in ``specviz.sampling``: p the target's processed distribution, q the draft's. The loop is the paper's
(``specviz.reference``: no cache, each model called on the whole sequence) in llama.cpp's order: the first token
comes from the target's prefill pass alone, then rounds of ``speculative.n_max`` drafts verified in one target call.
Per request, beside llama.cpp's own fields (``n_predict``, ``temperature``, ``top_k``, ``top_p``, ``min_p``,
``seed``, ``n_probs``, ``speculative.n_max``: 0 = speculation off), ``speculative.rule`` names the accept step:
  a rule of ``specviz.rules`` (leviathan, point_mass, exact_match: exact; typical, optimistic, lenient: lossy), or
  scalar_residual  the residual built from the drafted token's scalar q(x): norm(max(0, p - q(x))) (a classic bug);
  raw_q            the ratio and residual from the draft's unprocessed softmax while x was drawn from the processed
                   q (temperature / top-k / top-p applied to p but not to q: the other classic bug).
Both bugs are the losslessness lab's two mistakes (``specviz.labs.lossless``), served.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer

import torch

from .config import RULES, DecodeConfig
from .rules import Leviathan, rule_of, verify_rule
from .sampling import logits_to_probs, residual, sample

BUGS = ("scalar_residual", "raw_q")
SERVED_RULES = RULES + BUGS
MAX_BODY = 1 << 20  # a request body larger than this is refused (413)


class ScalarResidual(Leviathan):
    """Leviathan's test, but the rejection draws from norm(max(0, p - q(x))): q's value at the drafted token
    subtracted from every p(v) instead of q(v) (lossy; the losslessness lab's 'scalar q(x)' mistake)."""

    name, source = "scalar_residual", "a tutorial's mistake (specviz.labs.lossless WRONG_SCALAR)"

    def residual(self, p, q, x):  # p, q: (R, V), x: (R,)
        return residual(p, q.gather(-1, x.reshape(-1, 1)).expand_as(p))


def served_rule(name: str) -> Leviathan:
    """The accept step a request names (raw_q verifies with Leviathan's rule: its mistake is the q it is given)."""
    if name == "scalar_residual":
        return ScalarResidual()
    if name == "raw_q":
        return Leviathan()
    if name not in RULES:
        raise ValueError(f"unknown rule {name!r}: choose one of {', '.join(SERVED_RULES)}")
    return rule_of(DecodeConfig(rule=name))


# -- models: a function from token ids to logits at every position ---------------------------------------
class TableLM:
    """A tiny seeded model whose next-token logits depend on the last token only (a (V, V) table): fast enough to
    draw thousands of continuations, and a draft of it is the table plus noise."""

    def __init__(self, vocab: int = 8, seed: int = 0, sharpen: float = 2.0, noise: float = 0.0, noise_seed: int = 1):
        g = torch.Generator().manual_seed(seed)
        self.table = sharpen * torch.randn(vocab, vocab, generator=g, dtype=torch.float64)
        if noise:
            self.table += noise * torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(noise_seed),
                                              dtype=torch.float64)
        self.vocab, self.name = vocab, f"table-v{vocab}-s{seed}" + (f"-noise{noise:g}" if noise else "")

    def logits(self, ids: list[int]) -> torch.Tensor:  # (len(ids), V)
        return self.table[torch.tensor(ids, dtype=torch.long)]


class HubLM:
    """A transformers causal LM as the same function (the bundled family, ``specviz.load_model``)."""

    def __init__(self, model, name: str):
        self.model, self.name = model, name
        self.vocab = model.get_output_embeddings().weight.shape[0]

    @torch.inference_mode()
    def logits(self, ids: list[int]) -> torch.Tensor:
        device = next(self.model.parameters()).device
        return self.model(torch.tensor([ids], device=device)).logits[0].double().cpu()


def table_pair(vocab: int = 6, seed: int = 0, noise: float = 1.5) -> tuple[TableLM, TableLM]:
    """(target, draft): a table model and a noisy copy of it (the defaults: the conformance tests' pair, on which
    every lossy rule and bug moves the law of tokens 2-3 by 0.13 or more in total variation at T = 0.6, top-k 3)."""
    return TableLM(vocab, seed), TableLM(vocab, seed, noise=noise, noise_seed=seed + 1)


# -- one request --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """A ``/completion`` request's fields this server reads (llama.cpp's names), checked on arrival."""

    prompt: tuple[int, ...]
    n_predict: int = 16
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = -1  # -1: a fresh seed (llama.cpp's LLAMA_DEFAULT_SEED)
    n_probs: int = 0
    n_max: int = 4  # speculative.n_max: drafts a round, 0 = speculation off
    rule: str = "leviathan"

    def __post_init__(self):
        if not self.prompt or not all(isinstance(t, int) and t >= 0 for t in self.prompt):
            raise ValueError("prompt must be a non-empty list of token ids (or a string, with a tokenizer)")
        for name, low, high in (("n_predict", 1, 4096), ("top_k", 0, 1 << 20), ("n_probs", 0, 100),
                                ("n_max", 0, 64)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        for name, low, high in (("temperature", 0, 100), ("top_p", 1e-9, 1), ("min_p", 0, 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise ValueError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")
        if self.rule not in SERVED_RULES:
            raise ValueError(f"speculative.rule must be one of {', '.join(SERVED_RULES)}, got {self.rule!r}")

    @classmethod
    def from_json(cls, body: dict, encode=None, default_rule: str = "leviathan") -> Request:
        """From a llama.cpp-shaped body; a string prompt needs ``encode`` (text -> ids)."""
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            if encode is None:
                raise ValueError("this model has no tokenizer: send the prompt as a list of token ids")
            prompt = encode(prompt)
        fields = dict(prompt=tuple(prompt) if isinstance(prompt, list) else (), rule=default_rule)
        names = {"n_predict": "n_predict", "max_tokens": "n_predict", "temperature": "temperature",
                 "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "seed": "seed", "n_probs": "n_probs",
                 "speculative.n_max": "n_max", "speculative.rule": "rule"}
        fields |= {ours: body[theirs] for theirs, ours in names.items() if theirs in body}
        return cls(**fields)


@dataclass
class Completion:
    tokens: list[int] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)  # per token: the target's top logprobs
    logprobs: list[float] = field(default_factory=list)  # per token: the target's logprob of it
    draft_n: int = 0
    draft_n_accepted: int = 0


def probs(logits: torch.Tensor, r: Request) -> torch.Tensor:
    """Temperature, top-k, top-p (``sampling.logits_to_probs``), then min-p: tokens below min_p times the most
    likely one's probability dropped. (..., V)."""
    p = logits_to_probs(logits, r.temperature, r.top_k, r.top_p)
    if r.min_p > 0 and r.temperature > 0:
        p = torch.where(p >= r.min_p * p.max(-1, keepdim=True).values, p, 0)
        p = p / p.sum(-1, keepdim=True)
    return p


def pick(logits: torch.Tensor, r: Request, generator) -> int:
    """One token from the target alone: argmax (temperature 0) or a draw from p."""
    return int(logits.argmax()) if r.temperature == 0 else int(sample(probs(logits, r), generator))


def spec_round(target, draft, x: list[int], k: int, r: Request, generator) -> tuple[list[int], int]:
    """One round: k drafts from q, ONE target call, the accept step under ``r.rule``. (emitted tokens, accepted)."""
    drafts, qs, raw = [], [], []
    for _ in range(k):  # Step 1, draft: x_i ~ q_i (greedy: argmax)
        lg = draft.logits(x + drafts)[-1]
        qs.append(probs(lg, r))
        raw.append(lg.softmax(-1))
        drafts.append(int(qs[-1].argmax()) if r.temperature == 0 else int(sample(qs[-1], generator)))
    target_logits = target.logits(x + drafts)[len(x) - 1:]  # Step 2, verify: p_1..p_{k+1}, (k+1, V)
    p = probs(target_logits, r)
    q = torch.stack(raw if r.rule == "raw_q" else qs)  # the raw_q bug: the verifier's q is not processed like p
    verdict = verify_rule(served_rule(r.rule), p, q, torch.tensor(drafts), generator,  # Step 3, accept
                          target_logits if r.temperature == 0 else None)
    return drafts[:verdict.n_accepted] + [verdict.next_token], verdict.n_accepted


def complete(target, draft, r: Request) -> Completion:
    """``r.n_predict`` tokens after the prompt: the first from the prefill pass, then speculative rounds (or one
    target call a token with speculation off), then the target's logprobs of what was emitted."""
    seed = r.seed if r.seed >= 0 else int(torch.randint(0, 2**62, (1,)))
    generator = torch.Generator().manual_seed(seed)
    x, out = list(r.prompt), Completion()
    out.tokens.append(pick(target.logits(x)[-1], r, generator))  # the prefill pass's token
    while len(out.tokens) < r.n_predict:
        k = min(r.n_max, r.n_predict - len(out.tokens) - 1)
        if draft is None or k < 1:
            out.tokens.append(pick(target.logits(x + out.tokens)[-1], r, generator))
            continue
        emitted, accepted = spec_round(target, draft, x + out.tokens, k, r, generator)
        out.tokens += emitted  # Step 4, commit
        out.draft_n, out.draft_n_accepted = out.draft_n + k, out.draft_n_accepted + accepted
    logprobs = target.logits(x + out.tokens)[len(x) - 1:-1].log_softmax(-1)  # (n, V): before sampling
    out.logprobs = logprobs.gather(-1, torch.tensor(out.tokens)[:, None])[:, 0].tolist()
    if r.n_probs:
        top = logprobs.topk(min(r.n_probs, logprobs.shape[-1]), dim=-1)
        out.top = [list(zip(i.tolist(), v.tolist())) for i, v in zip(top.indices, top.values)]
    return out


# -- over HTTP ------------------------------------------------------------------------------------------------
@dataclass
class Engine:
    """What the server serves: the pair, a tokenizer's encode/decode (None: token ids only), the default rule."""

    target: object
    draft: object | None
    encode: object = None
    decode: object = None
    rule: str = "leviathan"
    version: str = "specviz-serve 1"

    def text(self, token: int) -> str:
        return self.decode([token]) if self.decode else f"<{token}>"

    def completion(self, body: dict) -> dict:
        """llama.cpp's ``/completion`` answer (non-streamed): content, tokens, completion_probabilities, timings."""
        r = Request.from_json(body, self.encode, self.rule)
        out = complete(self.target, self.draft if r.n_max else None, r)
        probs_out = [dict(id=t, token=self.text(t), logprob=lp,
                          top_logprobs=[dict(id=i, token=self.text(i), logprob=v) for i, v in top])
                     for t, lp, top in zip(out.tokens, out.logprobs, out.top or [[]] * len(out.tokens))]
        timings = dict(predicted_n=len(out.tokens))
        if out.draft_n:
            timings |= dict(draft_n=out.draft_n, draft_n_accepted=out.draft_n_accepted)
        answer = dict(content="".join(self.text(t) for t in out.tokens), tokens=out.tokens, stop=True,
                      model=self.target.name, tokens_predicted=len(out.tokens), stop_type="limit", timings=timings,
                      generation_settings={"speculative.n_max": r.n_max, "speculative.rule": r.rule,
                                           "temperature": r.temperature, "top_k": r.top_k, "top_p": r.top_p,
                                           "min_p": r.min_p, "seed": r.seed, "n_probs": r.n_probs})
        return answer | ({"completion_probabilities": probs_out} if r.n_probs else {})

    def openai(self, body: dict) -> dict:
        """An OpenAI ``/v1/completions`` answer: logprobs as tokens / token_logprobs / top_logprobs, tokens written
        "token_id:N" (vLLM's return_tokens_as_token_ids); ``speculative`` false in the body turns drafting off."""
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        llama = dict(body, n_probs=int(body.get("logprobs") or 0))
        if llama.get("top_k") == -1:  # vLLM's "off"
            llama["top_k"] = 0
        if body.get("speculative") is False:
            llama["speculative.n_max"] = 0
        answer = self.completion(llama)
        probs_out = answer.get("completion_probabilities", [])
        logprobs = dict(tokens=[f"token_id:{t}" for t in answer["tokens"]],
                        token_logprobs=[p["logprob"] for p in probs_out],
                        top_logprobs=[{f"token_id:{e['id']}": e["logprob"] for e in p["top_logprobs"]}
                                      for p in probs_out]) if probs_out else None
        return dict(object="text_completion", model=answer["model"], timings=answer["timings"],
                    choices=[dict(index=0, text=answer["content"], logprobs=logprobs, finish_reason="length")],
                    usage=dict(completion_tokens=answer["tokens_predicted"]))

    def props(self) -> dict:
        return dict(build_info=self.version, model_path=self.target.name,
                    draft=getattr(self.draft, "name", None), rule=self.rule)


def handler_for(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path in ("/props", "/health"):
                return self.reply(200, engine.props() if self.path == "/props" else {"status": "ok"})
            self.reply(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            route = {"/completion": engine.completion, "/completions": engine.completion,
                     "/v1/completions": engine.openai}.get(self.path)
            if route is None:
                return self.reply(404, {"error": {"message": f"no route {self.path}"}})
            size = int(self.headers.get("Content-Length") or 0)
            if size > MAX_BODY:
                return self.reply(413, {"error": {"message": f"request body over {MAX_BODY} bytes"}})
            try:
                self.reply(200, route(json.loads(self.rfile.read(size) or b"null")))
            except (ValueError, TypeError) as e:  # a bad field: llama.cpp answers 400 with a message too
                self.reply(400, {"error": {"code": 400, "message": str(e), "type": "invalid_request_error"}})

        def reply(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # quiet: thousands of requests a run
            pass

    return Handler


def make_server(engine: Engine, host: str = "127.0.0.1", port: int = 0) -> HTTPServer:
    """An HTTP server for ``engine`` (port 0: a free one, ``server.server_address[1]``); one request at a time."""
    return HTTPServer((host, port), handler_for(engine))


def bundled_engine(target: str, draft: str | None, rule: str) -> Engine:
    from .models import DEFAULT_MODEL_DRAFT, load_model

    draft = draft or DEFAULT_MODEL_DRAFT  # a causal LM of its own (the default hybrid draft is not one function)
    t, tok = load_model(target)
    d = HubLM(load_model(draft)[0], draft)
    return Engine(HubLM(t, target), d, lambda s: tok(s).input_ids, tok.decode, rule)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specviz.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--rule", default="leviathan", choices=SERVED_RULES, help="the default accept step")
    ap.add_argument("--tiny", action="store_true", help="serve a seeded table pair (token-id prompts only)")
    ap.add_argument("--vocab", type=int, default=6, help="the table pair's vocabulary (with --tiny)")
    ap.add_argument("--target", default="target")
    ap.add_argument("--draft", default=None, help="a bundled draft model (default: lite, the default draft model)")
    a = ap.parse_args(argv)
    engine = Engine(*table_pair(a.vocab), rule=a.rule) if a.tiny else bundled_engine(a.target, a.draft, a.rule)
    server = make_server(engine, a.host, a.port)
    print(f"serving {engine.target.name} (draft {engine.draft.name}, rule {a.rule}) on "
          f"http://{a.host}:{server.server_address[1]}/completion", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

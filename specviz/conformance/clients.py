"""Clients for an engine's HTTP API: llama.cpp's ``/completion`` (speculation switched per request with
``speculative.n_max``) and an OpenAI-compatible ``/v1/completions`` (vLLM, SGLang, TGI: speculation on and off
are two servers). Each turns one request into a ``Draw``; an answer of the wrong shape is a ValueError that
says what was missing. Standard library only (urllib)."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from .settings import Setting


@dataclass(frozen=True)
class Draw:
    """One continuation as the engine reported it."""

    tokens: list[int]
    texts: list[str]
    logprobs: list[float] | None  # the engine's logprob of each token
    top: list[list[tuple[int, float]]] | None  # per token: (token, logprob), best first
    draft_n: int | None = None  # drafted tokens, where the engine reports them
    draft_accepted: int | None = None


def post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise ValueError(f"{url} answered {e.code}: {e.read()[:300].decode(errors='replace')}") from None


def get(url: str, timeout: float) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, ValueError):
        return {}


class LlamaCpp:
    """llama-server started with a draft (``-md``); ``speculative.n_max`` 0 turns drafting off for one request
    (tools/server/server-task.cpp, params_from_json_cmpl). ``extra``: more request fields (e.g. a rule);
    ``transport(url, body, timeout) -> answer``: how a request travels (default: HTTP POST)."""

    def __init__(self, url: str, n_max: int = 4, timeout: float = 60.0, extra: dict | None = None, transport=None):
        self.url, self.n_max, self.timeout, self.extra = url.rstrip("/"), n_max, timeout, dict(extra or {})
        self.post = transport or post

    def info(self) -> dict:
        props = get(self.url + "/props", self.timeout)
        return dict(engine="llama.cpp /completion", version=str(props.get("build_info", "unknown")),
                    model=str(props.get("model_path", "unknown")), url=self.url, n_max=self.n_max, extra=self.extra)

    def draw(self, prompt, s: Setting, speculative: bool, seed: int | None, n_predict: int, n_probs: int) -> Draw:
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": s.temperature, "top_k": s.top_k,
                "top_p": s.top_p, "min_p": s.min_p, "n_probs": n_probs, "cache_prompt": False,
                "return_tokens": True, "samplers": ["top_k", "top_p", "min_p", "temperature"],
                "speculative.n_max": self.n_max if speculative else 0, "speculative.n_min": 0,
                "ignore_eos": True, **self.extra}
        if seed is not None:
            body["seed"] = seed
        a = self.post(self.url + "/completion", body, self.timeout)
        if not isinstance(a.get("tokens"), list) or not all(isinstance(t, int) for t in a["tokens"]):
            raise ValueError("the /completion answer has no 'tokens' list of ids (llama.cpp returns them with "
                             "return_tokens: true)")
        probs = a.get("completion_probabilities") or []
        timings = a.get("timings") or {}
        return Draw(tokens=a["tokens"], texts=[p.get("token", "") for p in probs] or [a.get("content", "")],
                    logprobs=[p["logprob"] for p in probs] if probs else None,
                    top=[[(e["id"], e["logprob"]) for e in p.get("top_logprobs", [])] for p in probs] or None,
                    draft_n=timings.get("draft_n", 0 if speculative else None),
                    draft_accepted=timings.get("draft_n_accepted", 0 if speculative else None))


class OpenAI:
    """``/v1/completions`` of two servers (or one, with ``extra_on`` / ``extra_off`` switching speculation);
    token ids read from "token_id:N" (vLLM's ``return_tokens_as_token_ids``), else the token texts."""

    def __init__(self, url_on: str, url_off: str, model: str = "", timeout: float = 60.0,
                 extra_on: dict | None = None, extra_off: dict | None = None):
        self.urls = {True: url_on.rstrip("/"), False: url_off.rstrip("/")}
        self.model, self.timeout = model, timeout
        self.extra = {True: dict(extra_on or {}), False: dict(extra_off or {})}

    def info(self) -> dict:
        return dict(engine="OpenAI /v1/completions", version="unknown", model=self.model, url_on=self.urls[True],
                    url_off=self.urls[False], extra_on=self.extra[True], extra_off=self.extra[False])

    def draw(self, prompt, s: Setting, speculative: bool, seed: int | None, n_predict: int, n_probs: int) -> Draw:
        body = {"model": self.model, "prompt": prompt, "max_tokens": n_predict, "temperature": s.temperature,
                "top_p": s.top_p, "top_k": s.top_k if s.top_k else -1, "min_p": s.min_p, "ignore_eos": True,
                "logprobs": max(n_probs, 1), "return_tokens_as_token_ids": True, **self.extra[speculative]}
        if seed is not None:
            body["seed"] = seed
        a = post(self.urls[speculative] + "/v1/completions", body, self.timeout)
        try:
            lp = a["choices"][0]["logprobs"]
            tokens = [_token_id(t) for t in lp["tokens"]]
            top = [sorted(((_token_id(k), v) for k, v in (d or {}).items()), key=lambda e: -e[1])
                   for d in lp.get("top_logprobs") or []]
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError(f"the /v1/completions answer lacks choices[0].logprobs.tokens ({e!r}): ask with "
                             "logprobs >= 1") from None
        timings = a.get("timings") or {}
        return Draw(tokens=tokens, texts=[str(t) for t in lp["tokens"]], logprobs=lp.get("token_logprobs"),
                    top=top or None, draft_n=timings.get("draft_n"), draft_accepted=timings.get("draft_n_accepted"))


def _token_id(token):
    """"token_id:123" -> 123; any other token text stays as it is (compared as text)."""
    if isinstance(token, str) and token.startswith("token_id:") and token[9:].lstrip("-").isdigit():
        return int(token[9:])
    return token

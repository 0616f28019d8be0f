"""Links that reopen a run: the explorer's settings in the page's query string (``?prompt=...&k=6&tab=explorer``),
read back when a page opens. Values are checked as the form checks them; one that does not parse is left as the
form has it."""
from __future__ import annotations

from urllib.parse import urlencode

import gradio as gr

from .forms import LIMITS
from .widgets import fitting_update

FIELDS = ["prompt", "target", "draft", "k", "k_policy", "temperature", "top_k", "top_p", "max_new_tokens", "seed",
          "shape"]
NUMBERS = {"k": int, "temperature": float, "top_k": int, "top_p": float, "max_new_tokens": int, "seed": int}


TABS = ("explorer", "learn", "labs", "compare", "batch", "engine")


def query(*values) -> str:
    """The query string of the explorer's settings (in FIELDS order), opening on the explorer tab."""
    return "?" + urlencode({name: value for name, value in zip(FIELDS, values) if value is not None} | {"tab": "explorer"})


def tab_loader():
    """The page-load handler for ``?tab=NAME``: that top-level tab selected (a gallery link opens the explorer)."""
    def from_request(request: gr.Request):
        params = dict(request.query_params) if request is not None else {}
        tab = params.get("tab") or ("explorer" if params.get("gallery") else None)
        return gr.Tabs(selected=tab) if tab in TABS else gr.skip()
    return from_request


def parse(params: dict, targets: list[str], drafts: list[str]) -> list:
    """One value per FIELD from a page's query parameters, or ``gr.skip()`` where absent or unusable."""
    out = []
    for name in FIELDS:
        raw = params.get(name)
        out.append(gr.skip() if raw is None else _value(name, str(raw), targets, drafts))
    return out


def _value(name: str, raw: str, targets: list[str], drafts: list[str]):
    if name in NUMBERS:
        try:
            value = NUMBERS[name](float(raw)) if NUMBERS[name] is int else float(raw)
        except (ValueError, OverflowError):  # not a number, or an infinite one ("1e999")
            return gr.skip()
        low, high = LIMITS.get(name, (0, 2**63 - 1))
        return value if low <= value <= high else gr.skip()
    if name == "target":
        return raw if raw in targets else gr.skip()
    if name == "draft":
        return raw if raw in drafts else gr.skip()
    if name == "k_policy":
        return raw if raw in ("fixed", "history", "heuristic") else gr.skip()
    return raw[:4000]  # the prompt (the form checks it again on Run) or the draft shape


def page_loader(store):
    """The page-load handler: the explorer's values from the page's URL (gradio passes the request). A link's target
    also sets the draft picker's choices to the drafts that fit it (``widgets.fitting_update``, as picking the target
    does), the link's draft kept where it is among them: a run on a Gemma-3 GGUF with its feature draft reopens so."""
    def from_request(request: gr.Request) -> list:
        params = dict(request.query_params) if request is not None else {}
        values = parse(params, store.list_targets(), store.list_drafters())
        target = values[FIELDS.index("target")]
        if isinstance(target, str):
            draft = params.get("draft")
            values[FIELDS.index("draft")] = fitting_update(store, target, draft if isinstance(draft, str) else None,
                                                           slim=True)
        return values
    return from_request


def gallery_loader(open_named, outputs: int):
    """The page-load handler for ``?gallery=NAME``: that gallery run opened in the explorer (nothing otherwise)."""
    def from_request(request: gr.Request) -> list:
        name = dict(request.query_params).get("gallery") if request is not None else None
        return list(open_named(name)) if name else [gr.skip()] * outputs
    return from_request

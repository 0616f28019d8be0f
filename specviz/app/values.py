"""What each input component admits, checked as an event joins the queue (``clients.guard``): a value a
component cannot take (a word for a slider, a list for a textbox, a lone surrogate anywhere) is refused there
with a message naming the field, instead of gradio's preprocessing error, which reaches the page empty."""
from __future__ import annotations

import json
import math

import gradio as gr

UNICODE = "the request holds text that is not valid Unicode (a lone surrogate): send UTF-8 text"


def valid_unicode(data) -> bool:
    """Whether an event's values encode as UTF-8 (a lone surrogate would break a tokenizer and the reply)."""
    try:
        json.dumps(data, ensure_ascii=False, default=str).encode("utf-8")
    except (UnicodeEncodeError, ValueError, TypeError):
        return False
    return True


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _name(v) -> bool:
    return v is None or isinstance(v, (str, int, float)) and not isinstance(v, bool)


def _uploaded(v) -> bool:
    """A file value naming a file uploaded to this server (gradio refuses any other, with no message)."""
    from pathlib import Path

    from gradio.utils import get_upload_folder

    if not isinstance(v, dict) or not isinstance(v.get("path"), str):
        return False
    try:
        return Path(get_upload_folder()).resolve() in Path(v["path"]).resolve().parents
    except (OSError, ValueError):
        return False


def _check(component):
    """(the check, what the value must be) for a component whose values are plain; None for any other."""
    if isinstance(component, gr.Slider):
        return _number, "a number"
    if isinstance(component, gr.Number):
        return lambda v: v is None or _number(v), "a number"
    if isinstance(component, gr.Checkbox):
        return lambda v: isinstance(v, bool), "true or false"
    if isinstance(component, (gr.Textbox, gr.Radio)):
        return lambda v: v is None or isinstance(v, str), "text"
    if isinstance(component, gr.File):
        return (lambda v: v is None or _uploaded(v) or isinstance(v, list) and all(map(_uploaded, v)),
                "a file uploaded to this server")
    if isinstance(component, gr.Dropdown):
        if component.multiselect:
            return lambda v: v is None or isinstance(v, list) and all(map(_name, v)), "a list of choices"
        return _name, "one choice"
    return None


def refusal(fn, data) -> str | None:
    """Why ``data`` cannot be the inputs of event ``fn`` (None: each value fits its component)."""
    if not valid_unicode(data):
        return UNICODE
    if fn is None or not isinstance(data, list):
        return None
    for component, value in zip(fn.inputs, data):
        check = _check(component)
        if check is not None and not check[0](value):
            label = getattr(component, "label", None) or type(component).__name__
            return f'"{label}" must be {check[1]}, got {type(value).__name__}'
    return None

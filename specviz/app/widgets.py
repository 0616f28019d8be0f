"""What every tab shares: the model queue, error conversion, handler binding, and the small widgets (a chart
with its caption, model pickers, sampling controls). Tabs import from here, never from each other."""
from __future__ import annotations

import functools
import html
import inspect
import logging
import re
from collections.abc import Callable
from types import SimpleNamespace

import gradio as gr

from .gpu import gpu_task
from .sessions import one_per_session
from .store import ModelStore

MODEL_QUEUE = dict(concurrency_id="model", concurrency_limit=1)  # one model run at a time: timings stay honest
# the long labs (sweeps, trees, losslessness, distillation, compare, batch) take turns in a slot of their own, so a
# visitor's short explorer run or /generate call never waits behind another visitor's minutes-long lab (while both
# run, each one's timings include the other's load: the labs say so)
LAB_QUEUE = dict(concurrency_id="lab", concurrency_limit=1)
# Your engine's reads (a paste parsed in Python, at most 4 MiB; the pair beside it or the measured v when asked,
# under the same budget) take turns in a slot of their own, so another visitor's lab never waits behind a paste
ENGINE_QUEUE = dict(concurrency_id="engine", concurrency_limit=1)
SKIP = gr.skip()
log = logging.getLogger(__name__)


TAG_OR_ENTITY = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?\w+;?)")
# an absolute path on this server (not a URL's path): its folders are the server's business, its file name is not
SERVER_PATH = re.compile(r"(?<![\w:/.~])(?:~/|/)(?:[\w.+@-]{1,255}/){1,64}")  # bounded: linear in the text


def _as_gr_error(e: Exception) -> gr.Error:
    """The toast for an exception, its text escaped: a toast renders HTML, and a message may quote a link's
    parameter, a trace's value or a model name verbatim (no markup from any input)."""
    if isinstance(e, gr.Error):
        return e
    if isinstance(e, ValueError):
        return gr.Error(inert(hide_paths(str(e) or type(e).__name__)))
    log.exception("handler failed")
    return gr.Error(inert(hide_paths(f"internal error ({type(e).__name__}: {e}); the app keeps running")))


def hide_paths(text: str) -> str:
    """``text`` with every absolute server path cut to its file name ("…/name"): a message names what went wrong,
    never where the server keeps its files (an upload's temp path, an operator's model folder)."""
    return SERVER_PATH.sub("…/", text)


def inert(text: str) -> str:
    """``text`` with every start of a tag (``<`` before a letter, ``/``, ``!`` or ``?``) and every character
    reference escaped: it renders as itself in HTML, and plain text ("k >= 1", "a < b") reads unchanged."""
    return TAG_OR_ENTITY.sub(lambda m: html.escape(m.group(0), quote=False), text)


def friendly(fn: Callable) -> Callable:
    """ValueError -> gr.Error with its message; anything else -> a short gr.Error (the trace goes to the log)."""
    if inspect.isgeneratorfunction(fn):  # sees through functools.partial
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except Exception as e:
                raise _as_gr_error(e) from None
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise _as_gr_error(e) from None
    return call


def bind(store: ModelStore | None, models: dict[str, Callable] = (), plain: dict[str, Callable] = ()) -> SimpleNamespace:
    """A tab's handlers ready to wire: ``models`` take the store first (bound with functools.partial) and run
    models (ZeroGPU-wrapped where that applies); ``plain`` ones take only the event's values."""
    bound = {name: one_per_session(gpu_task(friendly(functools.partial(fn, store)))) for name, fn in dict(models).items()}
    bound |= {name: friendly(fn) for name, fn in dict(plain).items()}
    for name, fn in bound.items():  # gradio names an event's endpoint after its function: /run_sweep, not /stream_3
        fn.__name__ = name
    return SimpleNamespace(**bound)


def chart(caption: str, elem_id: str | None = None) -> gr.Plot:
    """A plot with a one-line caption under it."""
    with gr.Column():
        plot = gr.Plot(show_label=False, elem_id=elem_id)
        gr.Markdown(caption)
    return plot


def target_picker(store: ModelStore, elem_id: str | None = None) -> gr.Dropdown:
    return gr.Dropdown(store.list_targets(), value=store.default_target(), label="Target", elem_id=elem_id)


def draft_picker(store: ModelStore, label: str = "Draft", model: bool = False, elem_id: str | None = None) -> gr.Dropdown:
    """The drafts offered, the default selected (``model``: the default draft model, for trees and batches)."""
    return gr.Dropdown(store.list_drafters(), value=store.default_draft(model), label=label, elem_id=elem_id)


def fitting_update(store: ModelStore, target, current, mine=None, slim: bool = False):
    """A draft picker's new choices for a picked target: the drafts that fit it (``slim``: with those only the
    explorer's slim route runs), the user's own after them, the current value (one, or several) kept where it still
    fits, else the store's default draft, else a draft made for that target (a feature draft of its width), else
    the first."""
    choices = store.drafts_for(target, slim=slim) + [n for n in (mine or {}) if n not in store.list_drafters()]
    own = [n for n in choices if n not in store.list_drafters() and n not in (mine or {})]  # drafts made for it
    fallback = (store.default_draft() if store.default_draft() in choices else
                own[0] if own else (choices[0] if choices else None))
    if isinstance(current, list):
        return gr.update(choices=choices, value=[c for c in current if c in choices] or choices[:1])
    return gr.update(choices=choices, value=current if current in choices else fallback)


def follow_target(store: ModelStore, target, draft, user_drafts=None, slim: bool = False):
    """Keep a draft picker (a dropdown, multiselect or checkboxes) to the drafts that fit the target picked
    (``ModelStore.drafts_for``): no tab offers a draft whose vocabulary cannot be the target's. The picker's value is
    read as the browser holds it, unchecked (``preprocess=False``): a pick fires this event more than once, and the
    second arrives with the old draft after the first has already narrowed the choices; checked, gradio answered it
    with an Error over the picker ("... is not in the list of choices"). Each answer sets the choices and a value
    among them in one update. ``slim``: the explorer's picker, which also offers the drafts of its slim route.
    Returns the event (to chain what follows a pick)."""
    states = [user_drafts] if user_drafts is not None else []
    return target.input(functools.partial(fitting_update, store, slim=slim), [target, draft, *states], [draft],
                 preprocess=False,
                 api_visibility="private")


def lab_inputs(store: ModelStore, prompts: list[str], multi: bool = False, lines: int = 4, model: bool = False) -> tuple:
    """A lab's (target, draft or drafts, prompts) pickers: the models in one row, the prompts below (``model``: the
    default draft model selected, for labs that need one)."""
    with gr.Row():
        target = target_picker(store)
        if multi:
            draft = gr.Dropdown(store.list_drafters(), value=[store.default_draft(model)], multiselect=True,
                                label="Drafts")
        else:
            draft = draft_picker(store, model=model)
    follow_target(store, target, draft)
    text = gr.Textbox("\n\n".join(prompts), lines=lines, label="Prompts (separate with an empty line)")
    return target, draft, text


def sampling_controls(temperature: float = 1.0) -> list:
    """[temperature, top-k, top-p] in one row."""
    with gr.Row():
        t = gr.Slider(0, 2, value=temperature, step=0.05, label="Temperature (0 = greedy)")
        top_k = gr.Number(value=0, precision=0, minimum=0, label="top-k (0 = off)")
        top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label="top-p (1 = off)")
    return [t, top_k, top_p]


def run_settings(max_new: int) -> list:
    """[k, temperature, top-k, top-p, new tokens, seed]: the compare and batch tabs' settings."""
    with gr.Row():
        k = gr.Slider(1, 10, value=4, step=1, label="k (drafts per round)")
        new = gr.Number(max_new, precision=0, minimum=1, label="new tokens")
        seed = gr.Number(0, precision=0, minimum=0, label="seed")
    return [k, *sampling_controls(0.0), new, seed]

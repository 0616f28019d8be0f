"""The whole app: ``build_demo()`` composes one module per tab inside one gr.Blocks; ``launch()`` serves it.
Per-user data (the current trace and its baseline, the drafts trained in the distillation lab) lives in
gr.State; models are shared through one ModelStore. Nothing loads at import or build: models load on the
first run."""
from __future__ import annotations

import os
import sys

import gradio as gr

from ..views.timeline import CSS
from . import (
    batch_tab,
    clients,
    compare_tab,
    distill_tab,
    engine_tab,
    explorer,
    learn_tab,
    links,
    load_tab,
    lossless_tab,
    rules_tab,
    session_state,
    sweep_tab,
    temperature_tab,
    tree_tab,
    warm,
)
from . import gradio_internals as internals
from .store import ModelStore
from .uploads import RequestLimits

TITLE = "specviz: see speculative decoding"
INTRO = ("# specviz: see speculative decoding\nA small **draft** guesses k tokens, the **target** checks them all "
         "in one forward pass, and a coin flip per token keeps the output exactly the target's.")


def build_demo(store: ModelStore | None = None) -> gr.Blocks:
    """Top-level tabs: the explorer, the labs (k sweep, trees, losslessness, distillation), compare drafts, batch,
    your engine's run."""
    store = store or ModelStore()
    # gradio's copies of served files and uploads go after an hour (checked every 10 minutes)
    with App(title=TITLE, delete_cache=(600, 3600)) as demo:
        # this user's trained drafts (name -> TrainedDraft): theirs alone, freed 2 h after their last change
        user_drafts = gr.State({}, time_to_live=7200)
        with gr.Row(equal_height=True):  # one row: the explorer's Run stays on the first screen
            gr.Markdown(INTRO, elem_id="intro")
            presenter = gr.Checkbox(False, label="Presenter view (large type, for a projector)",
                                    elem_id="presenter", scale=0, min_width=240)
        presenter.change(None, [presenter], None, js=PRESENTER_JS, api_visibility="private")
        with gr.Tabs() as tabs:
            with gr.Tab("Explorer", id="explorer"):
                explorer_draft, h = explorer.build(store, user_drafts)
            with gr.Tab("Learn", id="learn"):
                lesson, lesson_views, learn = learn_tab.build(store)
            with gr.Tab("Labs", id="labs"), gr.Tabs():
                with gr.Tab("k sweep lab"):
                    sweep_tab.build(store)
                with gr.Tab("Tree lab"):
                    tree_tab.build(store)
                with gr.Tab("Temperature lab"):
                    temperature_tab.build(store)
                with gr.Tab("Acceptance rule lab"):
                    rules_tab.build(store)
                with gr.Tab("Losslessness lab"):
                    lossless_tab.build(store)
                with gr.Tab("Load lab"):
                    load_tab.build(store)
                with gr.Tab("Distillation lab"):
                    trained = distill_tab.build(store, user_drafts)
            with gr.Tab("Compare drafts", id="compare"):
                compare_drafts = compare_tab.build(store, user_drafts)
            with gr.Tab("Batch", id="batch"):
                batch_tab.build(store)
            with gr.Tab("Your engine", id="engine"):
                engine_tab.build(store)
        trained.then(h.draft_pickers, [user_drafts], [explorer_draft, compare_drafts], api_visibility="undocumented")
        # Run takes clicks once the link's values are in the form (then: also when the loader failed)
        demo.load(links.page_loader(store), None, h.link_fields, api_visibility="private").then(
            explorer.ready, None, [h.run_button], queue=False, api_visibility="private")
        demo.load(links.gallery_loader(h.open_named, len(h.run_outputs)), None, h.run_outputs,
                  api_visibility="private")
        demo.load(lambda t: learn.step_view(t, 0), [lesson], lesson_views, api_visibility="private")
        demo.load(links.tab_loader(), None, [tabs], api_visibility="private")
        demo.unload(_forget_session)  # a closed page's traces and the views it last showed go at once
    demo.store = store
    return demo


def _forget_session(request: gr.Request):
    session_state.forget(internals.state_holder_of_request(request), getattr(request, "session_hash", None))


class App(gr.Blocks):
    """gr.Blocks whose queue has per-client limits (``clients.guard``) and whose server bounds uploads
    (``uploads.RequestLimits``), however it is queued and launched."""

    def queue(self, *args, max_size: int | None = None, **kwargs):
        kwargs.setdefault("api_open", False)  # /run/ and /api/ may not skip the queue (and so its limits)
        super().queue(*args, max_size=None, **kwargs)
        clients.guard(internals.queue_of(self), clients.Limits.from_env(model_queue=max_size or QUEUE_SIZE))
        return self

    def launch(self, *args, app_kwargs: dict | None = None, **kwargs):
        from gradio.utils import get_upload_folder
        from starlette.middleware import Middleware

        limits = internals.queue_of(self)._specviz_limits
        upload = Middleware(RequestLimits, mb_per_min=limits.upload_mb_per_min, folder=get_upload_folder())
        app_kwargs = {**(app_kwargs or {}), "middleware": [*(app_kwargs or {}).get("middleware", []), upload]}
        return super().launch(*args, app_kwargs=app_kwargs, **kwargs)


# on the app's outermost element inside gradio's container (gradio scopes custom CSS to it)
PRESENTER_JS = ("(on) => { document.querySelectorAll('.gradio-container .contain > *')"
                ".forEach(e => e.classList.toggle('sv-presenter', on)); return []; }")
QUEUE_SIZE = 32  # model jobs waiting beyond this are turned away (per-client limits: clients.Limits)
MAX_UPLOAD = "4mb"  # a trace file larger than this is refused before it is read (MAX_TRACE_BYTES in core)
SERVE_WAIT_S = 120.0  # how long launch waits for the page it serves to answer


def launch(demo: gr.Blocks, **kwargs):
    """Serve the app; GRADIO_SERVER_NAME / GRADIO_SERVER_PORT choose where (gradio's defaults otherwise). Blocks
    as gradio's launch does (not with prevent_thread_lock, nor in an interactive session), once the page answers."""
    options = dict(theme=gr.themes.Soft(), css=CSS, max_file_size=MAX_UPLOAD)
    if os.environ.get("GRADIO_SERVER_NAME"):
        options["server_name"] = os.environ["GRADIO_SERVER_NAME"]
    if os.environ.get("GRADIO_SERVER_PORT"):
        options["server_port"] = int(os.environ["GRADIO_SERVER_PORT"])
    options.update(kwargs)
    block = not options.get("prevent_thread_lock") and not bool(getattr(sys, "ps1", sys.flags.interactive))
    options.update(prevent_thread_lock=True, **internals.without_launch_probe())
    demo = demo.queue(max_size=QUEUE_SIZE)
    served = demo.launch(**options)
    wait_serving(demo.local_url)
    if getattr(demo, "store", None) is not None:  # the labs' default forms priced ahead (SPECVIZ_WARM=0: not)
        demo.warming = warm.start(demo.store)
    if block:
        demo.block_thread()
    return served


def wait_serving(url: str, wait_s: float = SERVE_WAIT_S) -> None:
    """Returns once ``url`` answers; RuntimeError naming it if it does not within ``wait_s`` (a busy host may take
    seconds to answer its first request: gradio's own probe gave up after 3)."""
    import time

    import httpx

    deadline = time.monotonic() + wait_s
    while True:
        try:
            if httpx.head(url, timeout=10).status_code < 400:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the app does not answer at {url} after {wait_s:.0f} s: is the port reachable here?")
        time.sleep(0.25)

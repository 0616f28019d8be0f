"""The lean forward's layer stacks and matmuls in C (``stack.c``), compiled at first use with the machine's C
compiler and loaded through ctypes; where no compiler is found (or ``SPECVIZ_NATIVE=0``) the lean forward stays on
torch, with the reason in ``unavailable()``.

Why: at the bundled sizes a torch pass is half per-operator overhead, and fp32 GEMMs of a few rows run far below
memory speed. Here each weight is packed once into column panels and a whole pass of every layer is one call, on up
to ``torch.get_num_threads()`` OpenMP threads (as many as ``runtime.threads`` chooses for the call): a verify pass of
k + 1 rows streams each weight once, as a one-row pass does (docs/LLAMACPP.md has the costs). The arithmetic is the
lean forward's (transformers' Llama layer); only the order of float additions differs (logits within about 1e-5 of
torch's).

The library is built into ``SPECVIZ_NATIVE_CACHE`` (default ``~/.cache/specviz/native``) under a name hashed from
the source, the compiler and its flags, in about a second: ``cc -O3 -march=native -fno-math-errno -shared -fPIC -fopenmp``. Its
OpenMP runtime is the one torch loaded (``libgomp.so.1``, torch's own copy in a pip wheel: the dynamic linker
reuses a library already loaded under that name), so torch's operators and these passes share one team of threads;
with two runtimes, each one's idle threads spin on the cores the other's need (a verify pass of the bundled target
took 7-9 ms instead of about 5 on 2 cores).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from ..private_cache import private_folder, record, trusted

SOURCE = Path(__file__).with_name("stack.c")
ENV, CACHE_ENV, PIN_ENV = "SPECVIZ_NATIVE", "SPECVIZ_NATIVE_CACHE", "SPECVIZ_NATIVE_PIN"
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-shared", "-fPIC", "-fopenmp")
MAX_HEAD_DIM = 512  # stack.c's rope keeps a head on the stack
INT8_TYPES = ("Q4_0", "Q5_0", "Q8_0", "Q4_K", "Q6_K")  # the GGML types sv_qlinear8 unpacks (rows of whole 64s)
# stack.c's own types: Q5_0, Q8_0, Q4_K and Q6_K regrouped by 16 rows (sv_repack_*_r16), read by sv_qlinear8 alone
Q5_0_R16, Q8_0_R16, Q4_K_R16, Q6_K_R16 = 1006, 1008, 1012, 1014
# each regrouped GGML type -> (its id, a block's columns and bytes, regrouped bytes per 16 rows and column)
REGROUPED = {"Q5_0": (Q5_0_R16, 32, 22, 352 / 32), "Q8_0": (Q8_0_R16, 32, 34, 576 / 32),
             "Q4_K": (Q4_K_R16, 256, 144, 2368 / 256), "Q6_K": (Q6_K_R16, 256, 210, 4896 / 256)}
_state: dict = {}
_lock = threading.Lock()


class Dims(ctypes.Structure):
    _fields_ = [("d", ctypes.c_int), ("nh", ctypes.c_int), ("nkv", ctypes.c_int), ("hd", ctypes.c_int),
                ("inter", ctypes.c_int), ("rot", ctypes.c_int), ("eps", ctypes.c_float), ("scale", ctypes.c_float)]


_LAYER_FIELDS = ("ln1", "qkv", "qkv_b", "o", "o_b", "ln2", "gate", "gate_b", "up", "up_b", "down", "down_b",
                 "q_norm", "k_norm")


class Layer(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in _LAYER_FIELDS]


class QMat(ctypes.Structure):
    """A quantized matrix as stack.c's sv_qlinear reads it: its bytes (a GGUF's block layout), GGML type id, rows."""
    _fields_ = [("data", ctypes.c_void_p), ("type", ctypes.c_int), ("rows", ctypes.c_int)]


class Head(ctypes.Structure):
    _fields_ = [("norm", ctypes.c_void_p), ("w", ctypes.c_void_p), ("b", ctypes.c_void_p), ("vocab", ctypes.c_int),
                ("first", ctypes.c_int), ("h", ctypes.c_void_p), ("logits", ctypes.c_void_p),
                ("seconds", ctypes.c_double)]  # out: the final norm's and the head's wall time


class GLayer(ctypes.Structure):
    """A Gemma-3 layer as sv_gemma_layers reads it: its norms' (1 + w) and its quantized matrices' parts (QMat arrays)."""
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("ln_in", "q_norm", "k_norm", "ln_post_attn", "ln_pre_mlp", "ln_post_mlp", "qkv", "o", "gu", "down")] + \
               [(name, ctypes.c_int) for name in ("nqkv", "no", "ngu", "ndown", "sliding")]


class DLayer(ctypes.Structure):
    """A feature draft's Llama layer as sv_draft_layer reads it: one QMat each, its three RMSNorms' weights."""
    _fields_ = [(name, ctypes.c_void_p) for name in ("fc", "qkv", "o", "gu", "down", "ln_in", "ln_post", "norm")]


class GHead(ctypes.Structure):
    _fields_ = [("parts", ctypes.c_void_p), ("norm", ctypes.c_void_p), ("nparts", ctypes.c_int),
                ("vocab", ctypes.c_int), ("first", ctypes.c_int), ("h", ctypes.c_void_p), ("logits", ctypes.c_void_p),
                ("seconds", ctypes.c_double),  # out: the final norm's and the head's wall time
                ("taps", ctypes.c_void_p), ("ntaps", ctypes.c_int),  # layers whose output the pass writes too
                ("tapped", ctypes.c_void_p)]  # out: (n, ntaps, d)


def unavailable() -> str | None:
    """None where the C stack is built and loaded (building it the first time), else why not, in words."""
    lib()
    return _state.get("why")


def lib():
    """The loaded library, or None (``unavailable`` says why)."""
    if "lib" not in _state:
        with _lock:
            if "lib" not in _state:
                _state["lib"], _state["why"] = load_library()
    return _state["lib"]


def load_library():
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "no", "false"):
        return None, f"{ENV}={os.environ[ENV]}: the lean forward runs on torch"
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None, "no C compiler (cc, gcc or clang) to build specviz/runtime/native/stack.c: the lean forward runs on torch"
    try:
        path = compile_library(cc)
        so = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"specviz/runtime/native/stack.c did not build or load ({e}): the lean forward runs on torch"
    p, i = ctypes.c_void_p, ctypes.c_int
    so.sv_pack.argtypes = [p, i, i, p]
    so.sv_linear.argtypes = [p, i, i, p, i, p, p, p, i]
    so.sv_layers.argtypes = [ctypes.POINTER(Dims), p, p, i, p, i, i, i, p, p, p, p, ctypes.POINTER(Head), i]
    so.sv_rms_norm.argtypes = [p, i, i, p, ctypes.c_float, p]
    so.sv_layers_rows.argtypes = [ctypes.POINTER(Dims), p, p, i, p, i, p, p, i, p, p, p, ctypes.POINTER(Head), i]
    so.sv_set_pin.argtypes = so.sv_set_prefetch.argtypes = so.sv_set_prefetch_l2.argtypes = [i]
    so.sv_set_prefetch.restype = so.sv_set_prefetch_l2.restype = i
    so.sv_qlinear.argtypes = so.sv_qlinear8.argtypes = [p, i, i, ctypes.POINTER(QMat), i, p, p, p, i]
    so.sv_qrows.argtypes = [p, i, i, i, p, i, p]
    for name in ("sv_repack_q5_0_r16", "sv_repack_q8_0_r16", "sv_repack_q4_k_r16", "sv_repack_q6_k_r16"):
        getattr(so, name).argtypes, getattr(so, name).restype = [p, i, i, p], i
    so.sv_quant_block.argtypes = [i, ctypes.POINTER(i), ctypes.POINTER(i)]
    so.sv_gemma_layers.argtypes = [ctypes.POINTER(Dims), p, p, i, p, i, i, i, p, p, p, p, i, p, i]
    so.sv_gemma_layers.restype = i
    so.sv_gemma_layers_rows.argtypes = [ctypes.POINTER(Dims), p, p, i, p, i, p, p, p, i, p, p, p, p, i, p, i]
    so.sv_gemma_layers_rows.restype = i
    so.sv_draft_layer.argtypes = [ctypes.POINTER(Dims), ctypes.POINTER(DLayer), p, i, i, p, i, p, p, p, i]
    so.sv_draft_layer.restype = i
    f = ctypes.c_float
    so.sv_draft_chain.argtypes = [ctypes.POINTER(Dims), ctypes.POINTER(DLayer), ctypes.POINTER(QMat), p, i, f, i, p, i,
                                  p, i, p, p, i, i, f, f, p, p, p, ctypes.POINTER(ctypes.c_double), i]
    so.sv_draft_chain.restype = i
    so.sv_qlinear.restype = so.sv_qlinear8.restype = so.sv_qrows.restype = so.sv_qlinear8_available.restype = i
    sampling_signatures(so)
    so.sv_set_pin(os.environ.get(PIN_ENV, "1").strip().lower() not in ("0", "off", "no", "false"))
    so.sv_layers.restype = so.sv_layers_rows.restype = so.sv_panel_width.restype = so.sv_max_head_dim.restype = i
    for name in ("sv_sizeof_dims", "sv_sizeof_layer", "sv_sizeof_head", "sv_sizeof_qmat", "sv_sizeof_glayer",
                 "sv_sizeof_ghead", "sv_sizeof_dlayer"):
        getattr(so, name).restype = ctypes.c_size_t
    why = disagreement(so)
    return (None, why) if why else (so, None)


def sampling_signatures(so) -> None:
    """The argument and result types of the C stack's sampling over a vocabulary (specviz.slim.sampling's C paths)."""
    p, i, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    so.sv_softmax_t.argtypes, so.sv_softmax_t.restype = [p, i, f, p], i
    so.sv_softmax_norm.argtypes, so.sv_softmax_norm.restype = [p, i, f, p], ctypes.c_double
    so.sv_softmax_at.argtypes, so.sv_softmax_at.restype = [p, i, f, f, f, p, i, p], i
    so.sv_softmax_from.argtypes, so.sv_softmax_from.restype = [p, i, f, f, f, p], i
    so.sv_softmax_norms.argtypes, so.sv_softmax_norms.restype = [p, i, i, f, p, p, p, i], i
    so.sv_residual_draw.argtypes = [p, i, f, f, p, p, i, ctypes.c_double]
    so.sv_residual_draw.restype = i
    so.sv_residual.argtypes, so.sv_residual.restype = [p, p, i, p], ctypes.c_double
    so.sv_residual_over.argtypes, so.sv_residual_over.restype = [p, i, p, p, i, p], ctypes.c_double
    so.sv_invert_cdf.argtypes, so.sv_invert_cdf.restype = [p, i, ctypes.c_double], i
    so.sv_overlap.argtypes, so.sv_overlap.restype = [p, p, i], ctypes.c_double
    so.sv_top_k.argtypes, so.sv_top_k.restype = [p, i, i, p], i


def disagreement(so) -> str | None:
    """Where the loaded library and this module's copies of its limits and structs differ, what differs (a struct
    read with the wrong layout would hand C pointers in the wrong fields), else None."""
    pairs = [("MAX_HEAD_DIM", MAX_HEAD_DIM, so.sv_max_head_dim()),
             ("sizeof(Dims)", ctypes.sizeof(Dims), so.sv_sizeof_dims()),
             ("sizeof(Layer)", ctypes.sizeof(Layer), so.sv_sizeof_layer()),
             ("sizeof(Head)", ctypes.sizeof(Head), so.sv_sizeof_head()),
             ("sizeof(QMat)", ctypes.sizeof(QMat), so.sv_sizeof_qmat())]
    pairs += [("sizeof(GLayer)", ctypes.sizeof(GLayer), so.sv_sizeof_glayer()),
              ("sizeof(GHead)", ctypes.sizeof(GHead), so.sv_sizeof_ghead()),
              ("sizeof(DLayer)", ctypes.sizeof(DLayer), so.sv_sizeof_dlayer())]
    wrong = [f"{name} is {here} here, {there} in stack.c" for name, here, there in pairs if here != there]
    if not wrong:
        return None
    return f"specviz/runtime/native/library.py and stack.c disagree ({'; '.join(wrong)}): the lean forward runs on torch"


def regrouped_bytes(kind: str, rows: int, cols: int) -> int:
    """Bytes of a ``kind`` matrix of rows x cols in its layout regrouped by 16 rows (``REGROUPED``)."""
    return int(rows // 16 * cols * REGROUPED[kind][3])


def regroup(kind: str, src: int, rows: int, cols: int, dst: int) -> None:
    """The GGML bytes of ``rows`` rows at address src into ``REGROUPED[kind]``'s layout at dst (stack.c's
    sv_repack_*_r16); ValueError where C refuses them (rows not whole groups of 16, columns not whole blocks)."""
    need(getattr(lib(), f"sv_repack_{kind.lower()}_r16")(src, rows, cols, dst) == 0,
         f"the C stack refused to regroup {rows} x {cols} {kind} weights")


def need(ok: bool, message: str) -> None:
    """The C boundary's check: a ValueError with the message unless ok (before any pointer reaches C)."""
    if not ok:
        raise ValueError(message)


def compile_library(cc: str) -> Path:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    made = SOURCE.read_bytes() + " ".join(FLAGS).encode() + version.encode() + _cpu().encode()
    key = hashlib.sha256(made).hexdigest()[:16]
    folder = private_folder(Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "specviz" / "native"))
    path = folder / f"stack-{key}.so"
    if trusted(path):  # built by this user and unchanged since; anything else is built again
        return path
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        out = Path(tmp) / path.name
        done = subprocess.run([cc, *FLAGS, "-o", str(out), str(SOURCE), "-lm"], capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            raise OSError(f"{cc} failed: {done.stderr.strip()[-400:]}")
        os.replace(out, path)  # atomic: a concurrent build leaves one whole file
        record(path)
    for older in folder.glob("stack-*.so*"):  # builds of other sources, flags, compilers or CPUs, and their digests
        if older.name.split(".so")[0] != path.name.split(".so")[0]:
            older.unlink(missing_ok=True)  # a process that loaded it keeps its copy
    return path


def _cpu() -> str:
    """What -march=native compiles for: the CPU's model and instruction-set flags (a home folder shared by hosts of
    other CPUs must not load a library built for another's instructions)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    return " ".join(sorted({line for line in lines if line.split(":")[0].strip() in ("model name", "flags", "Features")}))

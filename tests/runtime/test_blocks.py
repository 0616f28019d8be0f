"""specviz.runtime.blocks: a float matrix rounded to GGML's Q8_0 and Q5_0 blocks in numpy, byte for byte what the gguf
package (llama.cpp's gguf-py, its quantize_row_*_ref ported) writes, and refused in words where it cannot be rows of
whole blocks."""
import numpy as np
import pytest

from specviz.runtime import blocks

gguf = pytest.importorskip("gguf")


def awkward(rows: int, cols: int) -> np.ndarray:
    """Random rows, with a block of zeros, one whose largest weight is negative, one whose largest is positive and
    a tie of sizes with opposite signs (the first wins, as in llama.cpp's loop)."""
    w = np.random.default_rng(0).normal(scale=0.05, size=(rows, cols)).astype(np.float32)
    w[0, :32] = 0.0
    w[1, :32] = np.linspace(-0.9, 0.3, 32)
    w[2, :32] = np.linspace(-0.2, 0.8, 32)
    w[3, :32], w[3, 5], w[3, 9] = 0.01, -0.5, 0.5
    return w


@pytest.mark.parametrize("kind", ["Q8_0", "Q5_0"])
def test_rows_read_back_through_the_gguf_packages_dequantizer(kind):
    w = awkward(6, 128)
    mine = blocks.rounded(w, kind)
    back = gguf.quants.dequantize(mine, getattr(gguf.GGMLQuantizationType, kind)).reshape(w.shape)
    steps, most = {"Q8_0": (127, 0.5), "Q5_0": (16, 1.0)}[kind]  # Q5_0's levels run -16..15 steps: a weight as large
    # as the block's largest, of the other sign, is clipped a step short
    step = np.abs(w.reshape(6, 4, 32)).max(-1, keepdims=True) / steps
    slack = steps * 2.0 ** -11  # the scale is stored in float16
    assert np.all(np.abs(back.reshape(6, 4, 32) - w.reshape(6, 4, 32)) <= step * (most + slack) + 1e-7)
    assert np.all(back[0, :32] == 0)


@pytest.mark.parametrize("kind, size", [("Q8_0", 34), ("Q5_0", blocks.Q5_0_BYTES)])
def test_rows_are_the_gguf_packages_byte_for_byte(kind, size):
    w = awkward(8, 640)
    w[4, :32] = [127.0, 2.5, -3.5, 0.5, -0.5, 1.5] + [0.0] * 26  # Q8_0's d is 1: halves, which roundf takes away
    # from zero (np.round would take 2.5 to 2 and 0.5 to 0)
    theirs = gguf.quants.quantize(w, getattr(gguf.GGMLQuantizationType, kind)).reshape(8, -1)
    assert np.array_equal(blocks.rounded(w, kind), theirs)
    assert blocks.rounded(w, kind).shape == (8, 640 // 32 * size)


@pytest.mark.parametrize("w", [np.ones((2, 40), np.float32), np.ones(64, np.float32),
                               np.array([[np.nan] + [0.0] * 31], np.float32)])
def test_what_is_not_rows_of_whole_finite_blocks_is_refused(w):
    for kind in blocks.KINDS:
        with pytest.raises(ValueError, match="finite rows of whole blocks"):
            blocks.rounded(w, kind)


def test_another_kind_is_refused_in_words():
    with pytest.raises(ValueError, match="Q8_0 or Q5_0"):
        blocks.rounded(np.ones((1, 32), np.float32), "Q4_K")

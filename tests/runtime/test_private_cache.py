"""Caches that verify what they load (specviz/runtime/private_cache.py): the C layers' library and a model's GGUF are
cached only in a folder this user alone can write, and a cached file is loaded only if its content hash is the one
recorded when it was written; a file planted under the predictable name is built again, never loaded."""
import os
import shutil

import pytest

from specviz.runtime import private_cache
from specviz.runtime.native import build, library


def test_a_folder_others_can_write_or_a_link_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(ValueError, match="can be written by other users"):
        private_cache.private_folder(shared)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(ValueError, match="not a plain folder"):
        private_cache.private_folder(link)
    made = private_cache.private_folder(tmp_path / "new" / "cache")
    assert os.stat(made).st_mode & 0o777 == 0o700


def test_a_file_is_trusted_only_with_the_hash_recorded_when_it_was_written(tmp_path):
    folder = private_cache.private_folder(tmp_path / "c")
    path = folder / "thing.bin"
    path.write_bytes(b"made here")
    assert not private_cache.trusted(path) and not path.exists()  # never recorded: removed, to be made again
    path.write_bytes(b"made here")
    private_cache.record(path)
    assert private_cache.trusted(path)
    private_cache._written.clear()  # another process: the digest beside it speaks for it
    assert private_cache.trusted(path)
    path.write_bytes(b"changed after")  # changed since it was written
    assert not private_cache.trusted(path) and not path.exists()


@pytest.mark.slow  # a C build, beside the one shared with other tests (c_build)
def test_a_library_planted_under_the_predictable_name_is_built_again_not_loaded(monkeypatch, tmp_path, c_build):
    _, shared, _ = c_build
    path = tmp_path / shared.name  # a copy of that build and its digest, as a cache of this user's holds them
    shutil.copy(shared, path)
    shutil.copy(shared.with_name(shared.name + ".sha256"), path.with_name(path.name + ".sha256"))
    monkeypatch.setenv(library.CACHE_ENV, str(tmp_path))
    cc = shutil.which("cc") or shutil.which("gcc")
    assert build.compile_library(cc) == path  # the copy is trusted: its digest is beside it
    built = path.read_bytes()
    private_cache._written.clear()
    path.with_name(path.name + ".sha256").unlink()
    path.write_bytes(b"\x7fELF planted")  # another user's (or a stale) file under the same name
    assert build.compile_library(cc) == path and path.read_bytes() == built  # built again over it


def test_a_gguf_changed_after_it_was_written_is_written_again(monkeypatch, tmp_path):
    pytest.importorskip("gguf")
    from specviz.runtime import gguf_write
    from tests.helpers.models import tiny_llama

    monkeypatch.setenv(gguf_write.CACHE_ENV, str(tmp_path / "gguf"))
    model = tiny_llama()
    path = gguf_write.gguf_for(model)
    written = path.read_bytes()
    path.write_bytes(written[:-8] + b"tampered")
    assert gguf_write.gguf_for(model) == path and path.read_bytes() == written

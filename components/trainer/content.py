"""Digests of what a training reads, by content: its input files and its model code.

The Trainer's resume identity (:mod:`~ga_tfx.components.trainer.resume`) holds these digests,
not the inputs' URIs: a job submitted again gets new output URIs for the same data (Vertex,
open-source KFP), and must still resume; data changed under an unchanged URI (open-source
KFP's cache keys ExampleGen without a data fingerprint, ``backend/src/v2/driver/cache.go``)
must not.

**What a file digest reads.** Each file's name relative to the folder or pattern it was
found under (never its absolute URI) and its size; a file up to :data:`WHOLE_BYTES` is read
whole; a larger one in :data:`SAMPLES` blocks of :data:`BLOCK_BYTES` spread evenly from its
first byte to its last. What this can miss: a change inside a large file that keeps its size
and touches no sampled block. TFX writes examples as gzip-compressed TFRecord shards, and a
gzip stream ends with the CRC-32 and length of all its uncompressed bytes, which the last
block holds: for those files a change anywhere is seen (CRC-32 collisions aside). The cost
is at most ``WHOLE_BYTES`` read per file, whatever the data's size (measured in
docs/failure-and-resume.md). ExampleGen's own input fingerprint is not used: TFX's
ExampleGen driver computes it, and open-source KFP runs no TFX driver.

**What a code digest reads.** The source file of the module defining ``build_model`` (a
``module_file``, a packaged ``module_path`` as installed, or the module of a dotted
``model_fn``); failing that, the function's source; failing that, its compiled code. Other
modules it imports are not included.
"""

from ga_tfx import tf

import hashlib
import inspect
import marshal
import os
import re
from typing import Callable, Iterable, List, Optional, Tuple

WHOLE_BYTES = 1 << 20  # files up to 1 MiB are read whole
BLOCK_BYTES = 1 << 16  # larger ones: 8 blocks of 64 KiB, first and last included
SAMPLES = 8
_GLOB = re.compile(r"[*?\[]")


def files_digest(locations: Optional[Iterable[str]]) -> Optional[str]:
    """Hex digest of the files under ``locations`` (file patterns, files or folders, searched
    through); ``None`` for no locations (e.g. no base model). A location matching nothing
    digests as empty: the digest is of what was found."""
    if locations is None:
        return None
    if isinstance(locations, str):
        locations = [locations]
    digest = hashlib.sha256()
    for index, location in enumerate(locations):
        for name, path in _files_of(location):
            digest.update(f"{index}:{name}\0".encode())
            digest.update(file_digest(path).encode())
    return digest.hexdigest()


def _files_of(location: str) -> List[Tuple[str, str]]:
    """(name relative to the location's root, path) of every file of ``location``, sorted."""
    root = location
    if _GLOB.search(location):  # a pattern: names relative to the folder before the first *
        root = os.path.dirname(location[: _GLOB.search(location).start()] + "x")
        matches = tf.io.gfile.glob(location)
    else:
        matches = [location] if tf.io.gfile.exists(location) else []
    found = []
    for match in matches:
        if tf.io.gfile.isdir(match):
            for folder, _, names in tf.io.gfile.walk(match):
                found += [os.path.join(folder, name) for name in names]
        else:
            found.append(match)
    if found == [location]:  # one file given by its path: its base name
        root = os.path.dirname(location)
    return sorted((os.path.relpath(path, root), path) for path in found)


def file_digest(path: str) -> str:
    """Hex digest of one file: its size and its bytes (whole, or sampled blocks: module
    docstring)."""
    size = tf.io.gfile.stat(path).length
    digest = hashlib.sha256(f"{size}\0".encode())
    with tf.io.gfile.GFile(path, "rb") as f:
        if size <= WHOLE_BYTES:
            digest.update(f.read())
        else:
            last = size - BLOCK_BYTES
            for i in range(SAMPLES):
                f.seek(last * i // (SAMPLES - 1))
                digest.update(f.read(BLOCK_BYTES))
    return digest.hexdigest()


def code_digest(function: Callable) -> str:
    """Hex digest of the model code that defines ``function`` (module docstring)."""
    namespace = getattr(function, "__globals__", {})
    spec = namespace.get("__spec__")
    for path in (namespace.get("__file__"), getattr(spec, "origin", None)):
        if path and tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path):
            with tf.io.gfile.GFile(path, "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()
    try:
        source = inspect.getsource(function).encode()
    except (OSError, TypeError):
        code = getattr(function, "__code__", None)
        source = marshal.dumps(code) if code is not None else repr(function).encode()
    return hashlib.sha256(source).hexdigest()

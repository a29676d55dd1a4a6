"""A pytest plugin that records a digest of every model a test run writes, keyed by the test that wrote it, so
that two revisions of the converter can be compared model for model (`bench/identical.py` loads it into both
runs with `-p fingerprints`, so both sides digest alike). Active when LITERT_MODEL_DIGESTS names a folder.

One digest covers the file without our metadata entries; another covers those entries read back with each path
reduced to its file name and each line number to `N` (the source locations of a file a change edits move).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re

if os.environ.get("LITERT_MODEL_DIGESTS"):
    from litert_torch import metadata as _metadata
    from litert_torch.flatbuffer import writer as _writer

    _build_model = _writer.build_model
    _counts: dict[str, int] = {}

    def _metadata_digest(model) -> str:
        entries = []
        for key in sorted(k for k in model.metadata if k.startswith("litert_torch.")):
            raw = bytes(model.metadata[key])
            try:
                text = json.dumps(_metadata.decode(raw), sort_keys=True)
            except ValueError:  # an entry of ours that is not JSON: its bytes as they are
                text = raw.hex()
            text = re.sub(r"\.py:\d+", ".py:N", re.sub(r"[^\"\s]*/", "", text))
            entries.append(f"{key}={text}")
        return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]

    def _fingerprinted_build_model(model, *args, **kwargs):
        built = _build_model(model, *args, **kwargs)
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
        _counts[test] = _counts.get(test, 0) + 1
        bare = copy.copy(model)
        bare.metadata = {k: v for k, v in model.metadata.items() if not k.startswith("litert_torch.")}
        digest = hashlib.sha256(_writer._pack(_build_model(bare))).hexdigest()[:16]
        line = json.dumps({"test": test, "n": _counts[test], "model": digest, "metadata": _metadata_digest(model)})
        with open(os.path.join(os.environ["LITERT_MODEL_DIGESTS"], f"{os.getpid()}.jsonl"), "a") as f:
            f.write(line + "\n")
        return built

    _writer.build_model = _fingerprinted_build_model

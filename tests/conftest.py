import os

import pytest
import torch

# Small thread pools: these machines are shared.
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# LITERT_FINGERPRINTS=DIR records a digest of every model the tests write, keyed by the test that wrote it, so that
# two revisions of the converter can be compared model for model (`bench/identical.py`). Each digest covers the
# whole file but the source map, whose paths name the checkout; the source map gets its own digest with each
# path reduced to its file name.
if os.environ.get("LITERT_FINGERPRINTS"):
    import copy
    import hashlib
    import json

    from litert_torch import metadata as _metadata
    from litert_torch.flatbuffer import writer as _writer

    _build_model = _writer.build_model
    _counts: dict[str, int] = {}

    def _source_map_digest(model) -> str:
        raw = model.metadata.get(_metadata.SOURCE_MAP_KEY)
        if raw is None:
            return ""
        text = _metadata.decode(raw) if isinstance(raw, (bytes, bytearray)) else raw
        text = json.dumps(text, sort_keys=True) if not isinstance(text, str) else text
        import re

        return hashlib.sha256(re.sub(r"[^\"\s]*/", "", text).encode()).hexdigest()[:16]

    def _fingerprinted_build_model(model, *args, **kwargs):
        built = _build_model(model, *args, **kwargs)
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
        _counts[test] = _counts.get(test, 0) + 1
        bare = copy.copy(model)
        bare.metadata = {k: v for k, v in model.metadata.items() if k != _metadata.SOURCE_MAP_KEY}
        digest = hashlib.sha256(_writer._pack(_build_model(bare))).hexdigest()[:16]
        line = json.dumps({"test": test, "n": _counts[test], "model": digest, "source_map": _source_map_digest(model)})
        with open(os.path.join(os.environ["LITERT_FINGERPRINTS"], f"{os.getpid()}.jsonl"), "a") as f:
            f.write(line + "\n")
        return built

    _writer.build_model = _fingerprinted_build_model

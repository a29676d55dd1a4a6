import os

import pytest
import torch

# Small thread pools: these machines are shared.
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# LITERT_FINGERPRINTS=DIR records a digest of every model the tests write, keyed by the test that wrote it, so that
# two revisions of the converter can be compared model for model (`bench/identical.py`). One digest covers the
# file without our metadata entries, whose source locations name the checkout; another covers those entries, read
# back with every path reduced to its file name.
if os.environ.get("LITERT_FINGERPRINTS"):
    import copy
    import hashlib
    import json
    import re

    from litert_torch import metadata as _metadata
    from litert_torch.flatbuffer import writer as _writer

    _build_model = _writer.build_model
    _counts: dict[str, int] = {}

    def _metadata_digest(model) -> str:
        entries = []
        for key in sorted(k for k in model.metadata if k.startswith("litert_torch.")):
            raw = model.metadata[key]
            try:
                text = json.dumps(_metadata.decode(bytes(raw)), sort_keys=True)
            except Exception:  # noqa: BLE001 - an entry that is not ours in JSON: its bytes as they are
                text = bytes(raw).hex()
            entries.append(key + "=" + re.sub(r"[^\"\s]*/", "", text))
        return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]

    def _fingerprinted_build_model(model, *args, **kwargs):
        built = _build_model(model, *args, **kwargs)
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
        _counts[test] = _counts.get(test, 0) + 1
        bare = copy.copy(model)
        bare.metadata = {k: v for k, v in model.metadata.items() if not k.startswith("litert_torch.")}
        digest = hashlib.sha256(_writer._pack(_build_model(bare))).hexdigest()[:16]
        line = json.dumps({"test": test, "n": _counts[test], "model": digest, "metadata": _metadata_digest(model)})
        with open(os.path.join(os.environ["LITERT_FINGERPRINTS"], f"{os.getpid()}.jsonl"), "a") as f:
            f.write(line + "\n")
        return built

    _writer.build_model = _fingerprinted_build_model

"""Convert the sample model, check its numbers against PyTorch, and write the .tflite file.

    python samples/convert_sample.py [--out artifacts/tiny_cnn.tflite]

Exit code 0 when every output matches within the numerics contract, 1 otherwise.
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import litert_torch  # noqa: E402
from litert_torch.runtime.compare import compare_outputs  # noqa: E402
from samples.models import tiny_cnn  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="artifacts/tiny_cnn.tflite")
    args = parser.parse_args()

    model, sample = tiny_cnn.build()
    start = time.perf_counter()
    edge = litert_torch.convert(model, sample)
    seconds = time.perf_counter() - start
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    edge.export(args.out)
    print(f"converted TinyCNN in {seconds:.2f}s -> {args.out} ({len(edge.flatbuffer) / 1024:.1f} KiB)")

    generator = torch.Generator().manual_seed(1)
    inputs = [sample] + [(torch.rand(sample[0].shape, generator=generator),) for _ in range(4)]
    ok = True
    for i, x in enumerate(inputs):
        with torch.no_grad():
            reference = model(*x)
        for result in compare_outputs(reference, edge(*x)):
            print(f"input {i}: {result.describe()}")
            ok &= result.passed
    print("numerics: PASS" if ok else "numerics: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

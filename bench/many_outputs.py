"""Conversion time against the size of a model's output structure: a module returning a list of n tensors
(`[x + i for i in range(n)]`), converted for each n given, with torch.export alone timed in the same run as the
reference. Prints per-output costs, so that linear growth (and what is torch.export's) shows directly.

    python bench/many_outputs.py 1000 2000 4000 8000
"""

from __future__ import annotations

import sys
import time

import torch

import litert_torch


class Many(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def forward(self, x):
        return [x + i for i in range(self.n)]


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [1000, 2000, 4000]
    x = torch.randn(2)
    litert_torch.convert(Many(10), (x,))  # imports and first-call costs out of the figures
    print(f"{'outputs':>8} {'export s':>9} {'convert s':>10} {'export ms/out':>14} {'convert ms/out':>15} "
          f"{'convert/export':>15}")
    for n in sizes:
        start = time.perf_counter()
        torch.export.export(Many(n), (x,))
        export_s = time.perf_counter() - start
        start = time.perf_counter()
        litert_torch.convert(Many(n), (x,))
        convert_s = time.perf_counter() - start
        print(f"{n:>8} {export_s:>9.1f} {convert_s:>10.1f} {1e3 * export_s / n:>14.2f} {1e3 * convert_s / n:>15.2f} "
              f"{convert_s / export_s:>15.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

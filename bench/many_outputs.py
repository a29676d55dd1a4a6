"""Conversion time against the size of a model's output structure: modules returning a list of n tensors, each
made by its own op (`[x + i for i in range(n)]`), each indexed out of the input (`[x[i] for i in range(n)]`),
the n rows of one op (`list(x.unbind(0))`) or one tensor n times (`[x] * n`), converted for each n given, with
torch.export alone timed in the same run as the reference. Prints per-output costs, so that linear growth (and
what is torch.export's) shows directly.

    python bench/many_outputs.py 1000 2000 4000 8000
    python bench/many_outputs.py --kinds rows,same 100000
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


class Rows(torch.nn.Module):
    def forward(self, x):
        return list(x.unbind(0))


class Index(torch.nn.Module):
    def forward(self, x):
        return [x[i] for i in range(x.shape[0])]


class Same(Many):
    def forward(self, x):
        return [x] * self.n


KINDS = ("ops", "index", "rows", "same")


def _case(kind: str, n: int) -> tuple[torch.nn.Module, torch.Tensor]:
    if kind in ("rows", "index"):
        return (Rows() if kind == "rows" else Index()), torch.randn(n, 2)
    return (Many(n) if kind == "ops" else Same(n)), torch.randn(2)


def main(argv: list[str]) -> int:
    kinds = KINDS
    if argv[:1] == ["--kinds"]:
        kinds, argv = tuple(argv[1].split(",")), argv[2:]
        if not set(kinds) <= set(KINDS):
            raise SystemExit(f"--kinds takes {','.join(KINDS)}")
    sizes = [int(a) for a in argv] or [1000, 2000, 4000]
    litert_torch.convert(Many(10), (torch.randn(2),))  # imports and first-call costs out of the figures
    print(f"{'outputs':>8} {'kind':>5} {'export s':>9} {'convert s':>10} {'export ms/out':>14} "
          f"{'convert ms/out':>15} {'convert/export':>15}")
    for n in sizes:
        for kind in kinds:
            module, x = _case(kind, n)
            start = time.perf_counter()
            torch.export.export(module, (x,))
            export_s = time.perf_counter() - start
            start = time.perf_counter()
            litert_torch.convert(module, (x,))
            convert_s = time.perf_counter() - start
            print(f"{n:>8} {kind:>5} {export_s:>9.1f} {convert_s:>10.1f} {1e3 * export_s / n:>14.2f} "
                  f"{1e3 * convert_s / n:>15.2f} {convert_s / export_s:>15.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

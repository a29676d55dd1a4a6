"""Runs inside the official converter's own virtual environment (bench/.venv-official): one `export_hf` export,
reporting its time and the process's peak RSS as JSON on the last line of stdout.

    <official-venv>/bin/python bench/official_llm_worker.py MODEL_DIR OUT_DIR PREFILL CACHE RECIPE [OPTIONS_JSON]

OPTIONS_JSON: further keyword arguments of export_hf's export, as a JSON object. A failed export exits non-zero
with the exception on stderr (official_export_worker.py reports it as JSON instead).
"""

import json
import sys
import time

from official_export_worker import official_export  # bench/, this script's directory
from process_memory import peak_rss, reset_peak_rss


def main():
    reset_peak_rss()
    src, out, prefill, cache, recipe = sys.argv[1:6]
    options = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    start = time.perf_counter()  # imports included, as on our side
    export = official_export()
    export.export(model=src, output_dir=out, prefill_lengths=[int(prefill)], cache_length=int(cache),
                  quantization_recipe=recipe, **options)  # "none" is float there too (None: its int8 default)
    print(json.dumps({"seconds": time.perf_counter() - start, "peak_rss": peak_rss()}))


if __name__ == "__main__":
    main()

"""Dataset-scale validation on Ray Data: `validate_dataset(module, {"float": edge, "int8": edge8}, dataset)` runs
every sample of a Ray Dataset (or a folder of .npz files or of images, or a list of arrays) through PyTorch and each
converted model on Ray Data actors, one interpreter per model per actor, and reports per variant the top-1
agreement (and accuracy, for labelled data), percentiles of the per-sample error and the worst samples by id.
Also reached as `litert_torch.batch.validate_dataset` and through `litert_torch.validate(..., dataset=...)`."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Sequence

from litert_torch.errors import InvalidArgumentError, LiteRTTorchError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


@dataclasses.dataclass
class VariantStats:
    samples: int
    top1_agreement: float | None  # share of samples whose argmax matches PyTorch's (class-score outputs)
    abs_error: dict[str, float]  # p50 / p90 / p99 / max of each sample's max |edge - torch|
    rel_error: dict[str, float]  # the same, relative to the sample's max |torch|
    worst: list[tuple[int, float]]  # (sample id, max |edge - torch|), worst first
    accuracy: float | None = None  # share of samples whose argmax is their label (labelled datasets)


@dataclasses.dataclass
class DatasetReport:
    variants: dict[str, VariantStats]
    reference_accuracy: float | None = None  # PyTorch's own accuracy on the labels, when the dataset has them
    names: dict[int, str] = dataclasses.field(default_factory=dict)  # sample id -> file, for the worst samples

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: dataclasses.asdict(v) for name, v in self.variants.items()}
        if self.reference_accuracy is not None:
            out["pytorch"] = {"accuracy": self.reference_accuracy}
        if self.names:
            out["files"] = {str(k): v for k, v in self.names.items()}
        return out

    def render(self) -> str:
        lines = []
        if self.reference_accuracy is not None:
            lines.append(f"pytorch: accuracy {self.reference_accuracy:.2%} on the labels")
        for name, v in self.variants.items():
            top1 = f"top-1 {v.top1_agreement:.2%}" if v.top1_agreement is not None else "top-1 -"
            accuracy = f", accuracy {v.accuracy:.2%}" if v.accuracy is not None else ""
            worst = [self.names.get(i, i) for i, _ in v.worst[:5]]
            lines.append(f"{name}: {v.samples} samples, {top1}{accuracy}, max|err| p50 {v.abs_error['p50']:.2e} "
                         f"p90 {v.abs_error['p90']:.2e} p99 {v.abs_error['p99']:.2e} max {v.abs_error['max']:.2e}; "
                         f"worst samples {worst}")
        return "\n".join(lines)


class _Compare:
    """A Ray Data actor: the PyTorch module and one EdgeModel (one interpreter) per variant, loaded once."""

    def __init__(self, module_ref: Any, models: dict[str, bytes], column: str, paths: Sequence[str] = ()):
        import ray

        from litert_torch.runtime.edge_model import EdgeModel

        # the module's class is pickled by reference: its code must import here as it did in the driver
        sys.path.extend(p for p in paths if p not in sys.path and os.path.isdir(p))
        self.module = ray.get(module_ref) if isinstance(module_ref, ray.ObjectRef) else module_ref
        self.models = {name: EdgeModel(data) for name, data in models.items()}
        self.column = column

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np
        import torch

        out: dict[str, list] = {"id": list(batch["id"]), "pytorch/pred": []}
        if "label" in batch:
            out["label"] = list(batch["label"])
        for name in self.models:
            out[f"{name}/abs"], out[f"{name}/rel"], out[f"{name}/top1"], out[f"{name}/pred"] = [], [], [], []
        for x in batch[self.column]:
            sample = np.asarray(x)[None]
            with torch.no_grad():
                ref = self.module(torch.from_numpy(sample))
            ref = (ref[0] if isinstance(ref, (tuple, list)) else ref).detach().numpy().astype(np.float64)
            scale = float(np.abs(ref).max()) or 1.0
            scores = ref.ndim == 2 and ref.shape[-1] > 1
            out["pytorch/pred"].append(int(np.argmax(ref.reshape(-1))) if scores else -1)
            for name, edge in self.models.items():
                got = edge.call_like_module(sample)
                got = np.asarray(got[0] if isinstance(got, (tuple, list)) else got, np.float64).reshape(ref.shape)
                err = float(np.abs(got - ref).max())
                out[f"{name}/abs"].append(err)
                out[f"{name}/rel"].append(err / scale)
                pred = int(np.argmax(got.reshape(-1))) if scores else -1
                out[f"{name}/pred"].append(pred)
                out[f"{name}/top1"].append(float(pred == out["pytorch/pred"][-1]) if scores else float("nan"))
        return {k: np.asarray(v) for k, v in out.items()}


def validate_dataset(module: Any, models: dict[str, Any], dataset: Any, *, column: str = "x",
                     batch_size: int = 64, actors: int = 2, worst: int = 10, labels: list[str] | None = None,
                     image_size: tuple[int, int] | None = None, mean: Any = None, std: Any = None
                     ) -> DatasetReport:
    """Run every sample of `dataset` through PyTorch and through each converted model on Ray Data actors (one
    interpreter per model per actor): per variant, the top-1 agreement, percentiles of the per-sample error and
    the worst samples.

    `models`: {variant name: EdgeModel, .tflite bytes or path}. `dataset`: a Ray Dataset with a `column` of
    sample arrays (one sample each, without the batch axis; a "label" column makes it a labelled dataset), a
    folder of .npz files (one sample each, read as one), a folder of images, or a sequence of arrays.

    A folder of images (.png, .jpg, ...; in class subfolders, `folder/<class>/<image>`, for a labelled dataset):
    each image is read as RGB (or grayscale, for a one-channel model), resized to `image_size` (height, width;
    by default the model's input size), scaled to [0, 1], then `(x - mean) / std` per channel when given, and laid
    out as the model's input (channels first unless its input is channels-last). Labels are the subfolders'
    positions in `labels` (the model's class names in output order) or, without it, in sorted order, as
    torchvision's ImageFolder numbers them. With labels the report adds each variant's accuracy and PyTorch's."""
    import numpy as np
    import ray

    data = {}
    for name, m in models.items():
        if isinstance(m, (bytes, bytearray)):
            data[name] = bytes(m)
        elif isinstance(m, str):
            with open(m, "rb") as f:
                data[name] = f.read()
        else:
            data[name] = m.flatbuffer
    if not data:
        raise InvalidArgumentError("validate_dataset needs at least one converted model")
    files: list[str] = []
    if isinstance(dataset, (str, os.PathLike)):
        folder = os.fspath(dataset)
        if not os.path.isdir(folder):
            raise InvalidArgumentError(f"dataset {folder} is not a folder")
        if any(n.endswith(".npz") for n in os.listdir(folder)):
            dataset = _npz_dataset(folder, column)
        else:
            dataset, files = _image_dataset(folder, column, next(iter(data.values())), labels, image_size, mean,
                                            std)
    elif not hasattr(dataset, "map_batches"):
        dataset = ray.data.from_items([{column: np.asarray(a)} for a in dataset])
    dataset = _with_ids(dataset)
    module_ref = ray.put(module.eval())
    paths = [p or os.getcwd() for p in sys.path]
    metrics = dataset.map_batches(_Compare, fn_constructor_args=(module_ref, data, column, paths),
                                  batch_size=batch_size, concurrency=actors, batch_format="numpy").take_all()
    ids = np.asarray([m["id"] for m in metrics])
    label = np.asarray([m["label"] for m in metrics]) if metrics and "label" in metrics[0] else None

    def accuracy(key: str) -> float | None:
        if label is None:
            return None
        pred = np.asarray([m[key] for m in metrics])
        return None if (pred < 0).all() else float(np.mean(pred == label))

    report = {}
    for name in models:
        abs_err = np.asarray([m[f"{name}/abs"] for m in metrics])
        rel_err = np.asarray([m[f"{name}/rel"] for m in metrics])
        top1 = np.asarray([m[f"{name}/top1"] for m in metrics])
        order = np.argsort(-abs_err)[:worst]
        report[name] = VariantStats(
            len(abs_err), None if np.isnan(top1).all() else float(np.nanmean(top1)), _percentiles(abs_err),
            _percentiles(rel_err), [(int(ids[i]), float(abs_err[i])) for i in order], accuracy(f"{name}/pred"))
    names = {i: files[i] for v in report.values() for i, _ in v.worst} if files else {}
    return DatasetReport(report, accuracy("pytorch/pred"), names)


def _percentiles(values: Any) -> dict[str, float]:
    import numpy as np

    return {"p50": float(np.percentile(values, 50)), "p90": float(np.percentile(values, 90)),
            "p99": float(np.percentile(values, 99)), "max": float(np.max(values))}


def _with_ids(dataset: Any) -> Any:
    """The dataset with an "id" column (its row number) when it has none."""
    if "id" in (dataset.schema().names or []):
        return dataset
    import numpy as np

    counter = iter(range(1 << 62))

    def number(batch):
        n = len(next(iter(batch.values())))
        return {**batch, "id": np.asarray([next(counter) for _ in range(n)])}

    # one block at a time, in order, so that the numbers are row numbers
    return dataset.repartition(1).map_batches(number, batch_format="numpy", concurrency=1)


def _npz_dataset(folder: str, column: str) -> Any:
    """A folder of .npz files (one sample each; the array named `column`, or the only array) as a Ray Dataset."""
    import numpy as np
    import ray

    paths = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".npz"))
    if not paths:
        raise InvalidArgumentError(f"{folder} holds no .npz files")

    def load(row):
        with np.load(row["path"], allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
        value = arrays.get(column) if column in arrays else (next(iter(arrays.values())) if len(arrays) == 1 else None)
        if value is None:
            raise InvalidArgumentError(f"{row['path']} has no array {column!r} (it holds {sorted(arrays)})")
        return {"id": row["id"], column: value}

    return ray.data.from_items([{"id": i, "path": p} for i, p in enumerate(paths)]).map(load)


def _image_dataset(folder: str, column: str, model: bytes, labels: list[str] | None,
                   image_size: tuple[int, int] | None, mean: Any, std: Any) -> tuple[Any, list[str]]:
    """A folder of images (in class subfolders for labels) as a Ray Dataset of model inputs (see
    validate_dataset), and the files in sample-id order."""
    import numpy as np
    import ray

    try:
        from PIL import Image
    except ImportError:
        raise LiteRTTorchError("reading a folder of images needs Pillow: pip install pillow") from None
    paths = sorted(os.path.relpath(os.path.join(root, n), folder) for root, _, names in os.walk(folder)
                   for n in names if n.lower().endswith(IMAGE_EXTENSIONS))
    if not paths:
        raise InvalidArgumentError(f"{folder} holds no .npz files and no images ({', '.join(IMAGE_EXTENSIONS)})")
    classes = sorted({p.split(os.sep)[0] for p in paths if os.sep in p})
    labelled = bool(classes) and all(os.sep in p for p in paths)
    if labels is not None:
        labels = [str(c) for c in labels]
        missing = [c for c in classes if c not in labels]
        if labelled and missing:
            raise InvalidArgumentError(f"{folder}: subfolder(s) {', '.join(missing[:5])} are not among the labels "
                                       f"({', '.join(labels[:10])}{', ...' if len(labels) > 10 else ''})")
    index = {c: i for i, c in enumerate(labels if labels is not None else classes)}

    shape = _image_input_shape(model)
    channels_last = shape[-1] in (1, 3, 4) and shape[1] not in (1, 3, 4)
    channels = shape[-1] if channels_last else shape[1]
    if channels not in (1, 3):
        raise InvalidArgumentError(f"the model's input {list(shape)} is not an image of 1 or 3 channels")
    height, width = image_size or ((shape[1], shape[2]) if channels_last else (shape[2], shape[3]))
    if not all(isinstance(d, (int, np.integer)) and d > 0 for d in (height, width)):
        raise InvalidArgumentError(f"the model's input {list(shape)} has no fixed image size: give image_size")
    shift = np.asarray(0.0 if mean is None else mean, np.float32).reshape(-1)
    scale = np.asarray(1.0 if std is None else std, np.float32).reshape(-1)
    if shift.size not in (1, channels) or scale.size not in (1, channels) or (scale == 0).any():
        raise InvalidArgumentError(f"mean and std must give one value or one per channel ({channels}), std non-zero")

    def load(row):
        path = os.path.join(folder, row["path"])
        try:
            with Image.open(path) as image:
                image = image.convert("RGB" if channels == 3 else "L").resize((int(width), int(height)),
                                                                              Image.BILINEAR)
                pixels = np.asarray(image, np.float32).reshape(int(height), int(width), channels) / 255.0
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read the image {path}: {exc}") from None
        pixels = (pixels - shift) / scale
        sample = pixels if channels_last else pixels.transpose(2, 0, 1)
        out = {"id": row["id"], column: np.ascontiguousarray(sample, np.float32)}
        if labelled:
            out["label"] = index[row["path"].split(os.sep)[0]]
        return out

    return ray.data.from_items([{"id": i, "path": p} for i, p in enumerate(paths)]).map(load), paths


def _image_input_shape(model: bytes) -> tuple[int, ...]:
    from litert_torch.flatbuffer.reader import read_model

    graph = read_model(model).subgraphs[0]
    if len(graph.inputs) != 1 or len(graph.inputs[0].shape) != 4:
        raise InvalidArgumentError("a folder of images needs a model with one 4-D image input, got inputs "
                                   f"{[list(t.shape) for t in graph.inputs]}")
    return tuple(int(d) for d in graph.inputs[0].shape)


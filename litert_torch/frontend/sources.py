"""Where a traced node comes from, as the converted file records it: the user's source line of each node
('pkg/module.py:LINE in fn', named by module so that the file does not depend on the folder it was made in), the
ATen target's name and the module path (`source_ref`), and the user's line in a failed trace's traceback."""

from __future__ import annotations

import functools
import os
import re
from typing import Any

import torch

from litert_torch.ir import SourceRef

_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_TORCH_DIR = torch.__file__.rsplit("/", 1)[0] + "/"


def _is_library_file(path: str) -> bool:
    return path.startswith(_TORCH_DIR) or "/site-packages/torch/" in path or "/litert_torch/" in path


def user_line_from_traceback(exc: BaseException) -> str | None:
    tb = exc.__traceback__
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _is_library_file(code.co_filename) and not code.co_filename.startswith("<"):
            found = f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}"
        tb = tb.tb_next
    if found is None:
        match = _FRAME_RE.findall(str(exc))
        user = [m for m in match if not _is_library_file(m[0])]
        if user:
            path, line, fn = user[-1]
            found = f"{path}:{line} in {fn}"
    return found


@functools.lru_cache(maxsize=1024)
def module_path(path: str) -> str:
    """`path` as the module it names: relative to the folder above its outermost package (the folders with an
    `__init__.py`), so 'pkg/module.py' for a module of a package and 'model.py' for a module alone. It is the same
    wherever the project is checked out, so a converted file does not depend on the folder it was made in (nor
    tell it). Names that are not files ('<string>') stay as they are."""
    if path.startswith("<"):
        return path
    folder, name = os.path.split(os.path.abspath(path))
    parts = [name]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder, package = os.path.split(folder)
        if not package:
            break
        parts.insert(0, package)
    return "/".join(parts)


def source_location(stack_trace: str | None) -> str | None:
    """The innermost frame of a node's stack trace outside torch itself, as 'pkg/module.py:line in function'
    (the file named as its module, see `module_path`)."""
    if not stack_trace:
        return None
    frames = _FRAME_RE.findall(stack_trace)
    if not frames:
        return None
    user = [f for f in frames if not _is_library_file(f[0]) and not f[0].startswith("<")]
    path, line, fn = (user or frames)[-1]
    return f"{module_path(path)}:{line} in {fn}"


def target_name(target: Any) -> str:
    """'aten.convolution.default' for an OpOverload; the qualified name for anything else."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    return getattr(target, "__qualname__", None) or str(target)


def source_ref(node: torch.fx.Node) -> SourceRef:
    module = None
    stack = node.meta.get("nn_module_stack")
    if stack:
        path, cls = list(stack.values())[-1]
        cls_name = cls.rsplit(".", 1)[-1] if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
        module = f"{path} ({cls_name})" if path else cls_name
    return SourceRef(
        node=node.name,
        target=target_name(node.target),
        location=source_location(node.meta.get("stack_trace")),
        module=module,
    )

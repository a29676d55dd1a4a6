"""`parameterized_class`: one copy of a test class per parameter set (the `parameterized` package's helper, which
the official litert-torch re-exports; written here so that the helpers need no extra package)."""

from __future__ import annotations

import sys
from typing import Any, Callable

# The official suite runs each test on its two converter paths; here one path serves both (see converter_v2).
V1_V2_PARAMETERS = [{"use_v2": False}, {"use_v2": True}]


def parameterized_class(params: list[dict[str, Any]]) -> Callable[[type], type]:
    """Decorator: for each dict in `params`, a subclass `<Name>_<i>` (`<Name>_<i>_<value>` when the first value is a
    string, as the `parameterized` package names them) with those attributes, put in the
    class's module; the decorated class keeps no test methods of its own, so runners collect only the copies."""
    if not isinstance(params, (list, tuple)) or not all(isinstance(p, dict) for p in params):
        raise TypeError("parameterized_class takes a list of dicts of class attributes")

    def decorate(cls: type) -> type:
        module = sys.modules[cls.__module__]
        tests = {name: value for name, value in vars(cls).items() if name.startswith("test") and callable(value)}
        for i, values in enumerate(params):
            first = next(iter(values.values()), None)
            name = f"{cls.__name__}_{i}" + (f"_{_label(first)}" if isinstance(first, str) else "")
            copy = type(name, (cls,), {**tests, **values, "__module__": cls.__module__, "__qualname__": name})
            setattr(module, name, copy)
        for name in tests:
            delattr(cls, name)
        return cls

    return decorate


def _label(value: Any) -> str:
    text = str(value)
    return "".join(c if c.isalnum() else "_" for c in text)[:20]

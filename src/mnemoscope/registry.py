"""A small generic registry: names -> factories, with lazy targets and helpful errors.

In the spirit of lm-evaluation-harness's ``Registry[T]``: a target is a class/callable or a
lazy ``"module:attr"`` string (imported on first use, so listing names costs nothing);
resolved targets are checked against the registry's base class; unknown names raise with
did-you-mean suggestions; third-party packages add entries through an entry-point group.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from mnemoscope.errors import InputError

__all__ = ["Registry"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories of ``T``.

    Example:
        >>> r: Registry[object] = Registry("widget")
        >>> r.register("thing", "fractions:Fraction", numerator=3, denominator=4)
        >>> r.names()
        ['thing']
        >>> r.build("thing", denominator=8)
        Fraction(3, 8)
    """

    def __init__(self, kind: str, base: type | None = None, entry_point_group: str | None = None):
        self.kind = kind
        self.base = base
        self.entry_point_group = entry_point_group
        self._targets: dict[str, Any] = {}
        self._defaults: dict[str, dict[str, Any]] = {}
        self._entry_points_loaded = entry_point_group is None

    def register(self, name: str, target: Any, *, overwrite: bool = False, **defaults: Any) -> None:
        """Register ``target`` (class, callable or ``"module:attr"``) under ``name``.

        ``defaults`` are keyword arguments :meth:`build` passes unless overridden, so one
        class can serve several names (``min_k_10`` = ``MinKAttack(k=0.1)``).
        """
        if not overwrite and name in self._targets and self._targets[name] is not target:
            raise ValueError(f"{self.kind} '{name}' is already registered")
        self._targets[name] = target
        self._defaults[name] = defaults

    def register_as(self, name: str) -> Callable[[Any], Any]:
        """Class decorator form of :meth:`register`."""

        def deco(obj: Any) -> Any:
            self.register(name, obj)
            return obj

        return deco

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=self.entry_point_group or ""):
            if ep.name not in self._targets:
                self._targets[ep.name] = ep.value  # "module:attr", resolved lazily

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._targets)

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._targets

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> Any:
        """The resolved factory for ``name``."""
        self._load_entry_points()
        if name not in self._targets:
            close = difflib.get_close_matches(name, list(self._targets), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise InputError(
                f"unknown {self.kind} '{name}' (known: {', '.join(sorted(self._targets))}){hint}"
            )
        target = self._targets[name]
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
            target = self._targets[name] = obj
        if self.base is not None and isinstance(target, type) and not issubclass(target, self.base):
            raise TypeError(f"{self.kind} '{name}' -> {target!r} is not a subclass of {self.base.__name__}")
        return target

    def build(self, name: str, **kwargs: Any) -> T:
        """Instantiate ``name`` with its registered defaults updated by ``kwargs``."""
        factory = self.get(name)
        obj = factory(**{**self._defaults.get(name, {}), **kwargs})
        if self.base is not None and not isinstance(obj, self.base):
            raise TypeError(f"{self.kind} '{name}' built a {type(obj).__name__}, not a {self.base.__name__}")
        return obj  # type: ignore[no-any-return]

    def defaults(self, name: str) -> dict[str, Any]:
        return dict(self._defaults.get(name, {}))

"""The context of numbers built from flat ``key=value`` pairs: a dotted key (``warehouse.code``)
nests, as the ``{ctx.warehouse.code}`` part of a template reads it. Pure Python (no Django):
the HTTP API's query parameters and the admin's preview lines both go through
:func:`put_dotted`, and each caller words a :class:`ContextKeyConflict` for its own reader.
"""

from __future__ import annotations

from typing import Any

from ..exceptions import InvalidKey


class ContextKeyConflict(InvalidKey):
    """A dotted key that collides with one given before it.

    ``parent`` False: ``key`` nests under ``part``, which already holds a plain value
    (``a=1`` then ``a.b=2``). ``parent`` True: ``key`` (whose last part is ``part``) gives a
    plain value where other keys already nest (``a.b=2`` then ``a=1``)."""

    def __init__(self, key: str, part: str, *, parent: bool) -> None:
        self.key = key
        self.part = part
        self.parent = parent
        if parent:
            message = (
                f"Context key {key!r} is also the parent of other keys; give it either a value "
                f"or nested keys."
            )
        else:
            message = f"Context key {key!r} nests under {part!r}, which already has a value."
        super().__init__(message)


def put_dotted(
    context: dict[str, Any], key: str, value: object, *, replace_parent: bool = False
) -> None:
    """Set ``key`` to ``value`` in ``context``; ``a.b`` is ``context["a"]["b"]``, the inner
    objects made as needed. A key given again replaces its earlier value.

    Raises :class:`ContextKeyConflict` when ``key`` nests under a plain value, and when it
    gives a plain value where other keys already nest, unless ``replace_parent`` (then the
    nested keys are dropped: the last one given wins). The inner objects made before the
    conflict was found stay in ``context``."""
    *parents, leaf = key.split(".")
    node = context
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ContextKeyConflict(key, part, parent=False)
        node = child
    if not replace_parent and isinstance(node.get(leaf), dict):
        raise ContextKeyConflict(key, leaf, parent=True)
    node[leaf] = value

"""Compiling a template into Python: the source of one function rendering its number, made
from its parts (``formats/parts.py``) as ``formats/template.py``'s ``Template`` lays them out.

Pure Python, no Django import. Rendering parses nothing:

- The frame (``Template.frame_at``) holds the texts of the static parts (neighbouring ones
  joined) and each fast check's share of its sum; the function unpacks them (``f.fixed``).
- Every other part is rendered inline: a fixed-width decimal ``{seq:08}`` as lookups of
  zero-padded 4-digit blocks (``value // 10000``, ``value % 10000`` in a table of 10,000
  strings), ``{ctx.NAME}`` from the checked texts, ``{random}`` from ``secrets``, other ``seq``
  forms by their step closure. Templates with custom parts (which may read what parts before
  them rendered) render part by part with those closures instead.
- A fast check adds one table lookup per block of each fixed-width number it covers (for
  ``{seq:08}``, the same blocks as its text) to the frame's share, and reads its character
  from a table; other checks join the covered digits and call the algorithm's ``compute``.

:func:`render_source` writes the lines, :func:`define` makes a function of them with the
caller's lines around them (``Template.compile_function``: how the issuer takes a value and
renders it in one function). ``Template._render_reference`` renders part by part with no frame
and no fast check, and the tests hold the compiled function to it.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

from . import checksums
from .parts import _NON_DIGITS, Owner, _Ctx, _Custom, _Random, _Seq

__all__ = ["Layout", "define", "render_source"]


class Layout(Owner, Protocol):
    """What the compiler reads of a template besides what its parts read (:class:`Owner`):
    ``formats/template.py``'s ``Template`` (a protocol, so that this module does not import
    the one that compiles with it)."""

    @property
    def _runs(self) -> list[list[int]]:
        """The positions of each run of neighbouring static parts."""
        ...

    @property
    def _context_steps(self) -> list[tuple[int, _Ctx]]: ...

    @property
    def _seq(self) -> _Seq: ...

    @property
    def _timeless(self) -> bool: ...

    @property
    def _frame(self) -> Any:
        """The frame of a timeless template: its only one."""
        ...

    def _render_steps_in(
        self, value: int, now: float, frame: Any, context: Any, texts: Sequence[str]
    ) -> str: ...


@functools.cache
def _padded(size: int) -> tuple[str, ...]:
    """Every number of ``size`` digits, zero-padded: ``_padded(2)[7] == "07"``. Rendering
    ``{seq:08}`` as two lookups in ``_padded(4)`` takes less time than ``"%08d" % value``;
    the largest table (10,000 strings, about 0.6 MB) is made once per process."""
    return tuple(f"{n:0{size}d}" for n in range(10**size))


def render_source(t: Layout) -> tuple[list[str], dict[str, Any]]:
    """Source lines rendering ``number`` from the locals ``value``, ``now``, ``f``,
    ``context`` and ``texts``, and the globals they read: the frame's static runs and
    check totals unpacked, each dynamic part rendered inline (a fixed-width decimal
    ``seq`` by tables of zero-padded blocks, four digits a lookup), each fast check by a
    table lookup per block, one f-string. Templates with custom parts render part by part
    (``Template._render_steps_in``)."""
    parts = t._parts
    ns: dict[str, Any] = {}
    if any(isinstance(p, _Custom) for p in parts):
        ns["RENDER_STEPS_IN"] = t._render_steps_in
        return ["number = RENDER_STEPS_IN(value, now, f, context, texts)"], ns
    body: list[str] = []
    fixed = [f"r{j}" for j in range(len(t._runs))]
    fixed += [f"k{j}" for j in range(len(t._checks))]
    unpack = f"({fixed[0]},) = " if len(fixed) == 1 else f"{', '.join(fixed)} = "
    if t._timeless:  # one frame for ever
        ns["FIXED"], ns["P"] = t._frame.fixed, t._frame.pieces
        if fixed:
            body.append(f"{unpack}FIXED")
    else:
        body.append(f"{unpack}f.fixed")
        if any(c.fast is None for c in t._checks):
            body.append("P = f.pieces")
    piece: dict[int, str] = {}  # position -> its text, as a piece of an f-string
    number: dict[int, str] = {}  # position -> an expression of its digits as an int

    def local(i: int) -> str:
        """A local name holding the text of the part at ``i``."""
        if piece[i] != f"{{s{i}}}":
            body.append(f's{i} = f"{piece[i]}"')
            piece[i] = f"{{s{i}}}"
        return f"s{i}"

    for j, run in enumerate(t._runs):
        piece[run[0]] = f"{{r{j}}}"
    for i, _ in t._context_steps:
        piece[i], number[i] = f"{{s{i}}}", f"int(s{i})"
    if t._context_steps:
        names = [f"s{i}" for i, _ in t._context_steps]
        body.append(f"({names[0]},) = texts" if len(names) == 1 else f"{', '.join(names)} = texts")
    seq = t._seq
    i = parts.index(seq)
    piece[i], number[i] = f"{{s{i}}}", f"int(s{i})"
    ns["too_big"], ns["SEQ"] = seq._overflow(t), t._seq_step
    seq_blocks: list[str] = []  # the locals holding the value's blocks, lowest first
    if seq.mode == "decimal" and seq.size is None:
        body += ["if value.__class__ is not int:", "    raise too_big(value)"]
        body.append(f"s{i} = str(value)")
    elif seq.mode == "decimal" and seq.grow:
        body += [
            f"if value.__class__ is not int or value < 0 or value > {seq.limit}:",
            "    raise too_big(value)",
            f's{i} = "%0{seq.min_length}d" % value',
        ]
    elif seq.mode == "decimal":
        body += [
            f"if value.__class__ is not int or value < 0 or value > {seq.limit}:",
            "    raise too_big(value)",
        ]
        width, block, texts = seq.min_length, checksums.BLOCK, []
        for b, k in enumerate(range(0, width, block)):
            count = min(block, width - k)  # its digits
            low, top = k == 0, k + block >= width  # (the value has no more digits)
            part_of = "value" if low else f"value // {10**k}"
            if not top:
                part_of += f" % {10**block}"
            body.append(f"v{b} = {part_of}")
            ns[f"D{count}"] = _padded(count)
            seq_blocks.append(f"v{b}")
            texts.append(f"{{D{count}[v{b}]}}")
        piece[i] = "".join(reversed(texts))
    else:
        body.append(f"s{i} = SEQ(value, None, None, None, 0.0)")
    for i, part in enumerate(parts):
        if isinstance(part, _Random):
            piece[i], number[i] = f"{{s{i}}}", f"n{i}"
            ns["secrets"] = secrets
            if part.digits:
                body.append(f"n{i} = secrets.randbelow({10**part.min_length})")
                body.append(f's{i} = "%0{part.min_length}d" % n{i}')
            else:
                ns[f"STEP{i}"] = part.step(t)
                body.append(f"s{i} = STEP{i}(value, None, None, None, 0.0)")
    for j, check in enumerate(t._checks):
        i = check.position
        if check.fast is None:
            ns[f"COMPUTE{j}"], ns["NONDIGITS"] = check.algorithm.compute, _NON_DIGITS.sub
            covered = ", ".join(f"P[{c}]" if parts[c].static else local(c) for c in check.covered)
            body.append(f's{i} = COMPUTE{j}(NONDIGITS("", "".join(({covered},))))')
        else:
            terms = [f"k{j}"]
            for source, blocks in check.blocks:
                reads_value = t._reads_value(source)
                digits = "value" if reads_value else number[source]
                if digits.startswith("int("):  # convert the text once
                    body.append(f"n{source} = int({local(source)})")
                    digits = number[source] = f"n{source}"
                for b, (divisor, size, table) in enumerate(blocks):
                    ns[f"B{j}_{source}_{b}"] = table
                    if reads_value:  # the same blocks as the text's
                        index = seq_blocks[b]
                    elif divisor == 1 and b == len(blocks) - 1:
                        index = digits  # the number has no more digits than the table
                    elif divisor == 1:
                        index = f"{digits} % {size}"
                    elif b == len(blocks) - 1:
                        index = f"{digits} // {divisor}"
                    else:
                        index = f"{digits} // {divisor} % {size}"
                    terms.append(f"B{j}_{source}_{b}[{index}]")
            # the frame's total and each lookup are below the modulus: a table of the
            # check characters that long takes the sum as it is (no "% modulus")
            finals, modulus = check.fast.finals, check.fast.modulus
            ns[f"FINALS{j}"] = tuple(finals[t % modulus] for t in range(modulus * len(terms)))
            body.append(f"s{i} = FINALS{j}[{' + '.join(terms)}]")
        piece[i], number[i] = f"{{s{i}}}", f"int(s{i})"
    body.append('number = f"' + "".join(piece[i] for i in sorted(piece)) + '"')
    return body, ns


def define(
    signature: str,
    body: Sequence[str],
    ns: Mapping[str, Any],
    *,
    before: Sequence[str] = (),
    after: Sequence[str] = ("return number",),
    names: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """One function, ``def <signature>:``, of the lines ``before``, ``body`` (what
    :func:`render_source` wrote, reading the globals ``ns``) and ``after``, with ``names`` as
    further globals; ``ValueError`` if ``names`` holds a name of ``ns``. What
    ``Template.compile_function`` documents."""
    names = dict(names or {})
    clash = sorted(set(names) & set(ns))
    if clash:
        raise ValueError(f"Names the rendering uses itself: {', '.join(clash)}.")
    lines = [*before, *body, *after]
    source = f"def {signature}:\n" + "".join(f"    {line}\n" for line in lines)
    namespace = {**ns, **names}
    exec(source, namespace)  # our own source, built from the parts compile() validated
    function = namespace[signature.partition("(")[0]]
    function.__source__ = source  # for a reader who wonders what runs
    return cast(Callable[..., Any], function)

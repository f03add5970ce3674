"""Key-space maths for splitting a listing's key range: pure functions of key strings, no I/O.

Names are read as mixed-radix numbers over the characters seen at each position
(`KeySpace`, fed by `Alphabets`), so a span of keys can be bisected, or cut about N names
above its start by extrapolating one page's density (`choose_split`). Every computed key is
checked against the real bounds, so a poor guess costs balance, never correctness.
"""
from __future__ import annotations

import bisect
from typing import Iterable

_MAX_CODEPOINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)


def _next_char(c: str) -> str | None:
    """The smallest valid character above `c` (skipping surrogates), or None above U+10FFFF."""
    o = ord(c) + 1
    if o in _SURROGATES:
        o = 0xE000
    return chr(o) if o <= _MAX_CODEPOINT else None


def prefix_end(prefix: str) -> str | None:
    """The smallest key above every key starting with `prefix` (None: no such key, list to the end)."""
    p = prefix
    while p:
        nxt = _next_char(p[-1])
        if nxt is not None:
            return p[:-1] + nxt
        p = p[:-1]
    return None


_CLASSES = ("0123456789", "0123456789abcdef", "0123456789ABCDEF", "abcdefghijklmnopqrstuvwxyz",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _complete(chars: set[str]) -> set[str]:
    """Fill a position's sampled characters out to the smallest familiar class containing them.

    A page of ``img_00000000..img_00000999`` shows only '0' in the thousands place; without
    the other digits, extrapolating past 999 would jump straight to 1000s of the next digit.
    """
    for cls in _CLASSES:
        if chars and chars.issubset(cls):
            return chars | set(cls)
    return chars


class KeySpace:
    """A monotone map between key suffixes and integers, to bisect and extrapolate key ranges.

    A key is read as a mixed-radix number, one digit per character position: digit 0 is
    "end of key", digits 1..k are the characters seen at that position in sorted order, and
    digit k+1 stands for anything above them. Per-position alphabets make numbered names
    (``img_000123.jpg``) nearly linear, so extrapolating from one page of names lands close
    to the intended count; over raw code points (`uniform`, the fallback) midpoints would land
    among characters no name uses. Unseen characters map to the next seen one, so the map is
    monotone but not injective: callers check every computed key against the real bounds.
    """

    def __init__(self, alphabets: list[Iterable[str]]):
        self.alphs = [sorted(_complete(set(a))) for a in alphabets]
        self.radices = [len(a) + 2 for a in self.alphs]
        self._values: dict[str, int] = {}   # the same few bounds are valued on every page

    @classmethod
    def uniform(cls, n: int) -> "KeySpace":
        """Raw code points (+1, so 0 is "end of key") over n positions."""
        ks = cls([])
        ks.alphs = [None] * n
        ks.radices = [_MAX_CODEPOINT + 2] * n
        return ks

    def _digit(self, i: int, c: str) -> int:
        alph = self.alphs[i]
        if alph is None:
            return ord(c) + 1
        return 1 + bisect.bisect_left(alph, c)

    def _char(self, i: int, d: int) -> str | None:
        """The character for digit `d` >= 1 at position `i`, or None if none is valid there."""
        alph = self.alphs[i]
        if alph is None:
            o = d - 1
            return None if o in _SURROGATES else chr(o)
        if d <= len(alph):
            return alph[d - 1]
        return _next_char(alph[-1]) if alph else None

    def top(self) -> int:
        """The value of the end of the key space (above every key)."""
        v = 1
        for r in self.radices:
            v *= r
        return v

    def value(self, s: str | None) -> int:
        """`s` as an integer (truncated to the known positions); None is the end of the key space."""
        if s is None:
            return self.top()
        v = self._values.get(s)
        if v is not None:
            return v
        v = 0
        for i, r in enumerate(self.radices):
            v = v * r + (self._digit(i, s[i]) if i < len(s) else 0)
        if len(self._values) < 100_000:
            self._values[s] = v
        return v

    def key(self, v: int) -> str | None:
        """A key near the value `v`, rounded up where digits cannot be spelled; None if out of range."""
        if v < 0:
            return None
        digits = []
        for r in reversed(self.radices):
            v, d = divmod(v, r)
            digits.append(d)
        if v:
            return None
        digits.reverse()
        out = []
        for i, d in enumerate(digits):
            if d == 0:
                if any(digits[i + 1:]):
                    # "end of key" followed by more digits has no spelling: round up.
                    c = self._char(i, 1)
                    if c is not None:
                        out.append(c)
                break
            c = self._char(i, d)
            if c is None:
                if self.alphs[i] is None and (d - 1) in _SURROGATES:
                    out.append("\ue000")   # round a surrogate up to the next valid character
                    break
                return None
            out.append(c)
        return "".join(out)


class Alphabets:
    """Characters seen at each position of key suffixes (sampled from listed names)."""

    def __init__(self):
        self.sets: list[set[str]] = []
        self._seen = 0                      # characters recorded over all positions
        self._space: KeySpace | None = None  # cached until a new character is learned

    def learn(self, keys: Iterable[str]) -> None:
        sets = self.sets
        for k in keys:
            if len(k) > len(sets):
                sets.extend(set() for _ in range(len(k) - len(sets)))
            for s, c in zip(sets, k):
                s.add(c)
        seen = sum(map(len, sets))
        if seen != self._seen:
            self._seen, self._space = seen, None

    def space(self) -> KeySpace:
        """A KeySpace over the learned positions (split keys are never learned: they are not names).

        Cached: it is asked for on every page, and after the first pages nothing new is learned.
        """
        if self._space is None:
            self._space = KeySpace(self.sets)
        return self._space


def choose_split(lo: str, hi: str | None, *, alphabets: Alphabets | None = None,
                 keep: tuple[str, str, int, int] | None = None) -> str | None:
    """A key `m` with lo < m < hi (hi None: no upper bound), or None when the range cannot be split.

    All arguments are key suffixes (after the listing prefix). By default `m` is a midpoint.
    With `keep = (ref, last, intervals, items)` (a density sample: `intervals` name gaps
    between `ref` and `last`), `m` is placed about `items` names above `lo` by extrapolation.
    Falls back to midpoints over the learned alphabets, then over raw code points; every
    candidate is checked against the real bounds, so a poor guess costs balance, never
    correctness.
    """
    def ok(m: str | None) -> bool:
        return m is not None and m > lo and (hi is None or m < hi)

    spaces = []
    if alphabets is not None:
        ks = alphabets.space()
        if keep is not None:
            ref, last, intervals, items = keep
            gap = ks.value(last) - ks.value(ref)
            if gap > 0 and intervals > 0:
                m = ks.key(ks.value(lo) + gap * items // intervals)
                if ok(m):
                    return m
        spaces.append(ks)
    n = max(len(lo), len(hi or "")) + 2
    spaces += [KeySpace.uniform(n), KeySpace.uniform(n + 2)]
    for ks in spaces:
        m = ks.key((ks.value(lo) + ks.value(hi)) // 2)
        if ok(m):
            return m
    # Last resort, lopsided but valid: just above `lo` (e.g. between U+D7FF and U+E000 only
    # surrogates lie at the first position, so no midpoint can be spelled there).
    m = lo + "\U0010ffff"
    return m if ok(m) else None

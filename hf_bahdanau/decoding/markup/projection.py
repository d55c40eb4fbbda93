"""Inline elements put back on a translation: from source words to target words through a word alignment.

An element of a sentence is a span of source words `[start, end)` or, when it holds no word (`<img>`, `<br/>`-like
elements, a comment, `<code>` kept as it is), a gap between words (`start == end`: before word `start`). Each span
goes onto the smallest run of target words that holds every target word aligned to one of its source words (an
element whose words are all unaligned: the same relative position as in the source); a gap goes before the target
words of the next aligned source word (else after those of the previous one). Then the spans are made properly
nested: a child stays within its parent, and a span that would cross one placed before it (in source order) keeps
the side of the crossing that holds more of its aligned words. `layout` turns the placements into the sequence of
opening and closing events and words to write.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Element:
    """An inline element of the source: words `[start, end)` (a gap when `atomic`: before word `start`), the index of
    the element it sits in (None: the sentence), in source order (a parent before its children)."""

    start: int
    end: int
    parent: int | None = None
    atomic: bool = False


def parse_links(alignment: str) -> list[tuple[int, int]]:
    """Pharaoh `i-j` pairs as `(source word, target word)` tuples (malformed pairs left out)."""
    links = []
    for pair in alignment.split():
        source, _, target = pair.partition("-")
        if source.isdigit() and target.isdigit():
            links.append((int(source), int(target)))
    return links


def relative_links(n_source: int, n_target: int) -> list[tuple[int, int]]:
    """Each target word linked to the source word at the same relative position: the alignment of nothing known."""
    if not n_source:
        return []
    return [(min(n_source - 1, (2 * j + 1) * n_source // (2 * n_target)), j) for j in range(n_target)]


def project(
    elements: Sequence[Element], n_source: int, n_target: int, links: Iterable[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Where each element goes in the translation: `(start, end)` target words, `start == end` for a gap (the
    element before target word `start`); spans are properly nested and each lies within its parent's."""
    targets: list[list[int]] = [[] for _ in range(n_source)]
    for source, target in links:
        if 0 <= source < n_source and 0 <= target < n_target:
            targets[source].append(target)
    following: list[int | None] = [None] * (n_source + 1)  # from each source word on: the next aligned one's first
    for source in range(n_source - 1, -1, -1):  # target word
        following[source] = min(targets[source]) if targets[source] else following[source + 1]
    preceding: list[int | None] = [None] * (n_source + 1)  # before each source word: the gap after the last aligned
    for source in range(n_source):  # one's target words
        preceding[source + 1] = max(targets[source]) + 1 if targets[source] else preceding[source]
    placed: list[tuple[int, int]] = []
    spans = _Spans()
    for element in elements:
        low, high = (0, n_target) if element.parent is None else placed[element.parent]
        if element.atomic or not n_target:
            gap = following[element.start]
            gap = gap if gap is not None else preceding[element.start]
            gap = gap if gap is not None else round(element.start * n_target / max(n_source, 1))
            placed.append((min(max(gap, low), high),) * 2)
            continue
        aligned = sorted({t for source in range(element.start, element.end) for t in targets[source]})
        if aligned:
            start, end = aligned[0], aligned[-1] + 1
        else:  # unaligned words: after their aligned neighbours' words, as many as they are (scaled)
            start = min(preceding[element.start] or 0, n_target - 1)
            size = max(1, round((element.end - element.start) * n_target / n_source))
            after = following[element.end]
            end = min(max(n_target if after is None else after, start + 1), start + size, n_target)
        start, end = max(start, low), min(end, high)
        if start >= end:  # every aligned word is outside the parent: the parent's nearest word
            start, end = (low, low + 1) if aligned and aligned[0] < low else (high - 1, high)
        while (other := spans.crossing((start, end))) is not None:  # cut where it crosses one placed before it
            start, end = _uncross((start, end), other, aligned)
        inside = [t for t in aligned if start <= t < end]
        if inside and spans.crossing((inside[0], inside[-1] + 1)) is None:
            start, end = inside[0], inside[-1] + 1  # no foreign words at its edges after a cut
        placed.append((start, end))
        spans.add((start, end))
    return placed


class _Spans:
    """Placed spans sorted by start and by end: the ones that may cross a span are found without looking at all."""

    def __init__(self) -> None:
        self.by_start: list[tuple[int, int]] = []
        self.by_end: list[tuple[int, int]] = []

    def add(self, span: tuple[int, int]) -> None:
        insort(self.by_start, span)
        insort(self.by_end, (span[1], span[0]))

    def crossing(self, span: tuple[int, int]) -> tuple[int, int] | None:
        """A placed span that overlaps `span` with neither holding the other, or None."""
        start, end = span
        for i in range(bisect_right(self.by_start, (start, _MAX)), bisect_left(self.by_start, (end, -1))):
            if self.by_start[i][1] > end:  # starts inside `span`, ends after it
                return self.by_start[i]
        for i in range(bisect_right(self.by_end, (start, _MAX)), bisect_left(self.by_end, (end, -1))):
            if self.by_end[i][1] < start:  # ends inside `span`, starts before it
                return self.by_end[i][1], self.by_end[i][0]
        return None


_MAX = 1 << 62


def _crosses(span: tuple[int, int], other: tuple[int, int]) -> bool:
    """Whether two spans overlap with neither holding the other."""
    return span[0] < other[0] < span[1] < other[1] or other[0] < span[0] < other[1] < span[1]


def _uncross(span: tuple[int, int], other: tuple[int, int], aligned: list[int]) -> tuple[int, int]:
    """`span` cut at `other`'s edge where the two cross, keeping the side with more aligned words (ties: the side
    outside `other`, as the two were in the source)."""
    (start, end), (o_start, o_end) = span, other
    if not _crosses(span, other):
        return span
    outside, inside = ((start, o_start), (o_start, end)) if start < o_start else ((o_end, end), (start, o_end))

    def weight(side: tuple[int, int]) -> tuple[int, bool]:
        return sum(side[0] <= t < side[1] for t in aligned), side == outside

    return max((outside, inside), key=weight)


def layout(elements: Sequence[Element], placed: Sequence[tuple[int, int]], n_target: int) -> list[tuple[str, int]]:
    """The translation as events in writing order: `("word", j)`, `("open", k)`, `("close", k)` and `("atomic", k)`
    for a gap element. Equal spans nest in source order; a gap element at a span's edge is inside it only when it was
    inside it in the source."""
    spans = sorted((k for k, e in enumerate(elements) if not e.atomic), key=lambda k: (placed[k][0], -placed[k][1], k))
    children: dict[int | None, list[int]] = {}
    stack: list[int] = []
    for k in spans:  # each span's container: the innermost span holding it
        while stack and placed[stack[-1]][1] < placed[k][1]:  # (laminar: it ends before k starts)
            stack.pop()
        children.setdefault(stack[-1] if stack else None, []).append(k)
        stack.append(k)
    stack = []
    following = 0  # the next span (in `spans`) not yet on the stack
    for gap, k in sorted((placed[k][0], k) for k, element in enumerate(elements) if element.atomic):
        while following < len(spans) and placed[spans[following]][0] < gap:  # the spans that start before it
            while stack and placed[stack[-1]][1] < placed[spans[following]][1]:
                stack.pop()
            stack.append(spans[following])
            following += 1
        while stack and placed[stack[-1]][1] < gap:
            stack.pop()
        ancestors = _ancestors(elements, k)
        holder = None  # the innermost span holding the gap: strictly, or at an edge of a source ancestor
        at = following
        while at < len(spans) and placed[spans[at]][0] == gap:  # starting at the gap, outermost first
            holder = spans[at] if spans[at] in ancestors else holder
            at += 1
        for span in reversed(stack if holder is None else []):  # around the gap, innermost first
            if gap < placed[span][1] or span in ancestors:
                holder = span
                break
        children.setdefault(holder, []).append(k)
    events: list[tuple[str, int]] = []
    work: list[tuple[int | None, int, int]] = [(None, 0, n_target)]  # (element, next position, end)
    ordered = {
        parent: sorted(kids, key=lambda k: (placed[k][0], not elements[k].atomic, k))
        for parent, kids in children.items()
    }
    cursor: dict[int | None, int] = {}
    while work:
        node, position, end = work.pop()
        kids = ordered.get(node, [])
        index = cursor.get(node, 0)
        while True:
            if index < len(kids) and placed[kids[index]][0] <= position:
                kid = kids[index]
                index += 1
                if elements[kid].atomic:
                    events.append(("atomic", kid))
                    continue
                events.append(("open", kid))
                cursor[node] = index
                work.append((node, placed[kid][1], end))  # resumed after the child is written
                work.append((kid, position, placed[kid][1]))
                break
            if position >= end:
                if node is not None:
                    events.append(("close", node))
                break
            events.append(("word", position))
            position += 1
    return events


def _ancestors(elements: Sequence[Element], k: int) -> set[int]:
    """The elements element k sits in, in the source."""
    found = set()
    parent = elements[k].parent
    while parent is not None:
        found.add(parent)
        parent = elements[parent].parent
    return found


__all__ = ["Element", "layout", "parse_links", "project", "relative_links"]

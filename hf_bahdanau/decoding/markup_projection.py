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
    placed: list[tuple[int, int]] = []
    spans: list[int] = []  # placed elements with words, in the order they were placed
    for element in elements:
        low, high = (0, n_target) if element.parent is None else placed[element.parent]
        if element.atomic or not n_target:
            gap = _gap(element.start, targets, n_source, n_target)
            placed.append((min(max(gap, low), high),) * 2)
            continue
        aligned = sorted({t for source in range(element.start, element.end) for t in targets[source]})
        if aligned:
            start, end = aligned[0], aligned[-1] + 1
        else:  # unaligned words: between their aligned neighbours' words, as many as they are (scaled)
            following = _before(element.end, targets)
            start = min(_after(element.start, targets), n_target - 1)
            size = max(1, round((element.end - element.start) * n_target / n_source))
            end = min(max(n_target if following is None else following, start + 1), start + size, n_target)
        start, end = max(start, low), min(end, high)
        if start >= end:  # every aligned word is outside the parent: the parent's nearest word
            start, end = (low, low + 1) if aligned and aligned[0] < low else (high - 1, high)
        for other in spans:  # cut where it would cross an element placed before it
            start, end = _uncross((start, end), placed[other], aligned)
        inside = [t for t in aligned if start <= t < end]
        if inside and not any(_crosses((inside[0], inside[-1] + 1), placed[other]) for other in spans):
            start, end = inside[0], inside[-1] + 1  # no foreign words at its edges after a cut
        placed.append((start, end))
        spans.append(len(placed) - 1)
    return placed


def _before(position: int, targets: list[list[int]]) -> int | None:
    """The first target word of the next aligned source word from `position` on (None: none is aligned)."""
    return next((min(targets[source]) for source in range(position, len(targets)) if targets[source]), None)


def _after(position: int, targets: list[list[int]]) -> int:
    """The target gap after the last target word of the last aligned source word before `position` (0: none)."""
    return next((max(targets[source]) + 1 for source in range(position - 1, -1, -1) if targets[source]), 0)


def _gap(position: int, targets: list[list[int]], n_source: int, n_target: int) -> int:
    """The target gap of the source gap before word `position`: before the next aligned word's translation, else
    after the previous one's, else at the same relative position."""
    following = _before(position, targets)
    if following is not None:
        return following
    if any(targets[source] for source in range(position)):
        return _after(position, targets)
    return round(position * n_target / n_source) if n_source else 0


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
    depth = _depths(children)
    for k, element in enumerate(elements):
        if element.atomic:  # the innermost span holding its gap: strictly, or at an edge of a source ancestor
            gap, ancestors = placed[k][0], _ancestors(elements, k)
            holders = [s for s in spans if placed[s][0] < gap < placed[s][1]
                       or (s in ancestors and placed[s][0] <= gap <= placed[s][1])]  # fmt: skip
            children.setdefault(max(holders, key=depth.__getitem__) if holders else None, []).append(k)
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


def _depths(children: dict[int | None, list[int]]) -> dict[int, int]:
    """Each span's nesting depth in the translation (1: outermost)."""
    depth: dict[int, int] = {}
    todo = [(kid, 1) for kid in children.get(None, [])]
    while todo:
        k, level = todo.pop()
        depth[k] = level
        todo.extend((kid, level + 1) for kid in children.get(k, []))
    return depth


__all__ = ["Element", "layout", "parse_links", "project", "relative_links"]

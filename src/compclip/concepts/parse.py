"""From a spaCy parse to concepts: noun phrases with character spans, universal POS tags, scene graphs.

Noun phrases start from spaCy's noun chunks (determiner + adjectives/compounds/numbers +
head noun, coordinated modifiers included), drop pronouns and the nouns of spatial
phrases ("the left" in "to the left of"), and optionally keep one prepositional modifier
("a man in a red shirt"). Scene-graph edges come from prepositions and spatial phrases
("on", "next to", "to the left of", "in front of") and from verbs with objects
("a man riding a horse" -> (riding, man, horse)); a personal pronoun stands for the nearest earlier
subject that agrees in number ("there is a cup, and it is on a table" -> (on, cup, table)).
"""
from __future__ import annotations

from typing import Any

from spacy.tokens import Doc, Span, Token

Phrase = tuple[str, int, int]  # text, start, end: caption[start:end] == text

# Nouns that, as the object of a preposition with an "of"/"to" after them, spell a spatial
# relation rather than a thing: "to the left of", "in front of", "on top of", "at the back of".
SPATIAL_NOUNS = frozenset(
    ["left", "right", "front", "top", "bottom", "middle", "side", "back", "center", "centre", "edge", "rear", "corner", "end", "far"]
)
# Words whose "to"/"of"/"from" makes a two-word relation: "next to", "close to", "away from".
SPATIAL_HEADS = frozenset(
    ["next", "close", "closer", "adjacent", "near", "nearer", "opposite", "away", "ahead", "out", "outside", "inside"]
)
RELATIVE_PRONOUNS = frozenset(["that", "which", "who", "whom", "whose"])
ANAPHORS = frozenset(["it", "they", "them", "he", "she", "him", "her"])


def _wordless(token: Token) -> bool:
    return not any(ch.isalnum() for ch in token.text)


def _trim(span: Span) -> Span | None:
    """Drop leading/trailing tokens without a letter or digit (punctuation, emoji, spaces)."""
    start, end = span.start, span.end
    doc = span.doc
    while start < end and _wordless(doc[start]):
        start += 1
    while end > start and _wordless(doc[end - 1]):
        end -= 1
    return doc[start:end] if end > start else None


def _is_spatial_noun(token: Token) -> bool:
    """`front` in "in front of": a spatial noun under a preposition, with its own of/to."""
    return (
        token.lower_ in SPATIAL_NOUNS
        and token.dep_ == "pobj"
        and any(c.dep_ == "prep" and c.lower_ in ("of", "to") for c in token.children)
    )


def base_chunks(doc: Doc) -> list[Span]:
    chunks = []
    for chunk in doc.noun_chunks:
        if chunk.root.pos_ == "PRON" or _is_spatial_noun(chunk.root):
            continue
        trimmed = _trim(chunk)
        if trimmed is not None:
            chunks.append(trimmed)
    return chunks


def _phrase(span: Span) -> Phrase:
    return span.text, span.start_char, span.end_char


def noun_phrases(doc: Doc, chunks: list[Span], with_prep: bool = False) -> list[Phrase]:
    """The chunks as phrases; `with_prep` extends a chunk over its first prepositional modifier."""
    if not with_prep:
        return [_phrase(c) for c in chunks]
    by_root = {c.root.i: c for c in chunks}
    phrases = []
    for chunk in chunks:
        end = chunk.end
        prep = next((t for t in chunk.root.rights if t.dep_ == "prep"), None)
        pobj = next((t for t in prep.children if t.dep_ == "pobj"), None) if prep is not None else None
        if pobj is not None and pobj.i in by_root:
            end = by_root[pobj.i].end
        phrases.append(_phrase(doc[chunk.start:end]))
    return phrases


def pos_tags(doc: Doc) -> list[tuple[str, int, int, str]]:
    """Universal POS per token, with its character span."""
    return [(t.text, t.idx, t.idx + len(t.text), t.pos_) for t in doc if not t.is_space]


class _Graph:
    """Scene-graph edges over the chunk nodes of one parse."""

    def __init__(self, chunks: list[Span]):
        self.chunks = chunks
        self.node_by_root = {c.root.i: n for n, c in enumerate(chunks)}
        self.edges: list[tuple[str, int, int]] = []

    def node(self, token: Token) -> int | None:
        """The node a token heads; a relative pronoun stands for the noun its clause modifies, a personal
        pronoun for its antecedent."""
        if token.i in self.node_by_root:
            return self.node_by_root[token.i]
        if token.lower_ in RELATIVE_PRONOUNS and token.head.dep_ == "relcl":
            return self.node_by_root.get(token.head.head.i)
        if token.lower_ in ANAPHORS:
            return self.antecedent(token)
        return None

    def antecedent(self, pronoun: Token) -> int | None:
        """The nearest earlier subject (or the noun of "there is") that agrees in number: "there is a red
        square, and it is above the blue circle" relates the square; without it a paraphrase loses its edges."""
        number = pronoun.morph.get("Number")
        for n in range(len(self.chunks) - 1, -1, -1):
            root = self.chunks[n].root
            if root.i < pronoun.i and root.dep_ in ("nsubj", "nsubjpass", "attr", "ROOT") and root.morph.get("Number") == number:
                return n
        return None

    def nodes(self, token: Token) -> list[int]:
        """The node of a token and of the nouns coordinated with it ("a cup and a plate")."""
        found = [self.node(token)] + [self.node(c) for c in token.conjuncts if c.i > token.i]
        return [n for n in found if n is not None]

    def subjects(self, verb: Token) -> list[int]:
        """Who does what a verb says: its subject, the noun it modifies, or its coordinated head's subject."""
        for child in verb.children:
            if child.dep_ in ("nsubj", "nsubjpass"):
                found = self.nodes(child)
                if found:
                    return found
        if verb.dep_ in ("acl", "relcl"):
            return self.nodes(verb.head)
        if verb.dep_ in ("conj", "xcomp", "advcl") and verb.head.pos_ in ("VERB", "AUX"):
            return self.subjects(verb.head)
        return []

    def attach(self, head: Token, relation: str, objects: list[int]) -> None:
        """Add edges from what `head` stands for: a noun node, or a verb's subjects."""
        subjects = self.nodes(head)
        if not subjects and head.pos_ in ("VERB", "AUX"):
            subjects = self.subjects(head)
            if head.pos_ == "VERB":  # copulas add nothing: "is on" is "on"
                relation = f"{head.text} {relation}".strip()
        for s in subjects:
            for o in objects:
                edge = (relation, s, o)
                if s != o and edge not in self.edges:
                    self.edges.append(edge)

    def add_preposition(self, prep: Token) -> None:
        pobj = next((c for c in prep.children if c.dep_ == "pobj"), None)
        if pobj is None or _is_spatial_noun(prep.head):
            return  # the inner "of" of "in front of" is handled with its outer preposition
        doc, head = prep.doc, prep.head
        relation = prep.text
        if _is_spatial_noun(pobj):  # "to the left of X", "in front of X"
            inner = next(c for c in pobj.children if c.dep_ == "prep" and c.lower_ in ("of", "to"))
            relation = doc[prep.i : inner.i + 1].text
            pobj = next((c for c in inner.children if c.dep_ == "pobj"), None)
            if pobj is None:
                return
        elif head.lower_ in SPATIAL_HEADS and head.i + 1 == prep.i:  # "next to X"
            relation = f"{head.text} {prep.text}"
            head = head.head
        self.attach(head, relation, self.nodes(pobj))

    def add_verb_objects(self, verb: Token) -> None:
        for child in verb.children:
            if child.dep_ in ("dobj", "obj"):
                self.attach(verb, "", self.nodes(child))

    def build(self, doc: Doc) -> list[tuple[str, int, int]]:
        for token in doc:
            if token.dep_ in ("prep", "agent"):
                self.add_preposition(token)
            elif token.pos_ == "VERB":
                self.add_verb_objects(token)
        return self.edges


def scene_graph(doc: Doc, chunks: list[Span]) -> dict[str, Any]:
    """`{"nodes": [phrase...], "edges": [(relation, subject node, object node)...]}`."""
    return {"nodes": [_phrase(c) for c in chunks], "edges": _Graph(chunks).build(doc)}

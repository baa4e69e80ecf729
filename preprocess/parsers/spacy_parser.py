"""spaCy 1-best dependency parses (any installed pipeline with a parser), batched with nlp.pipe."""
from typing import Iterator, Sequence

from .base import ParsedSentence, ParseError, Parser

# A line that spaCy splits into several sentences has several roots; later roots are attached to the first one
# with this label, so the line stays one tree (counted in the preprocess report).
EXTRA_ROOT_LABEL = "dep"


class SpacyParser(Parser):
    def __init__(self, model: str, n_process: int = 1):
        import spacy

        self.name = f"spacy:{model}"
        try:
            self.nlp = spacy.load(model, exclude=["ner", "lemmatizer", "textcat"])
        except OSError as error:
            raise SystemExit(f"cannot load spaCy pipeline {model!r}: {error}") from None
        if "parser" not in self.nlp.pipe_names:
            raise SystemExit(f"spaCy pipeline {model!r} has no dependency parser")
        self.n_process = n_process
        self.joined_roots = 0

    def label_inventory(self):
        labels = list(self.nlp.get_pipe("parser").labels)
        return labels + [EXTRA_ROOT_LABEL] if EXTRA_ROOT_LABEL not in labels else labels

    def parse(self, sentences: Sequence[str], batch_size: int = 256) -> Iterator[object]:
        for text, doc in zip(sentences, self.nlp.pipe(sentences, batch_size=batch_size, n_process=self.n_process)):
            try:
                yield self.from_doc(text, doc)
            except ParseError as error:
                yield error

    def from_doc(self, text: str, doc) -> ParsedSentence:
        if len(doc) == 0:
            raise ParseError("the parser found no words")
        if any(token.is_space for token in doc):
            raise ParseError("the parser produced a whitespace token")
        roots = [token.i for token in doc if token.head.i == token.i]
        heads = [0 if token.head.i == token.i else token.head.i + 1 for token in doc]
        labels = [token.dep_ for token in doc]
        for extra in roots[1:]:
            heads[extra] = roots[0] + 1
            labels[extra] = EXTRA_ROOT_LABEL
        self.joined_roots += len(roots) - 1
        previous_end = 0
        spaces = []
        for token in doc:
            spaces.append(text[previous_end:token.idx])
            previous_end = token.idx + len(token.text)
        parsed = ParsedSentence([t.text for t in doc], spaces, heads, labels)
        if parsed.text != text:
            raise ParseError("the parser's words do not reproduce the sentence")
        parsed.validate()
        return parsed

"""spaCy 1-best dependency parses (any installed pipeline with a parser), batched with nlp.pipe.

Only the components the parser needs run (its tok2vec/transformer and the parser: tagger, NER, lemmatizer...
do not change the parse). With several workers, the sentences are split into chunks parsed by forked processes
that send back compact trees, not spaCy Docs: spaCy's own n_process serialises whole Docs and gains little.
`parse_words` parses sentences already split into words (a Doc built from the words, then the pipeline: spaCy's
tokenizer does not run, so the words stay exactly as given).
"""
import multiprocessing
from typing import Iterator, List, Optional, Sequence

from .base import ParsedSentence, ParseError, Parser, given_spaces

PARSER_COMPONENTS = ("tok2vec", "transformer", "parser")
CHUNK_SIZE = 1000
_FORKED_PARSER = None  # the parser a forked worker inherits

# A line that spaCy splits into several sentences has several roots; later roots are attached to the first one
# with this label, so the line stays one tree (counted in the preprocess report).
EXTRA_ROOT_LABEL = "dep"


class SpacyParser(Parser):
    def __init__(self, model: str, n_process: int = 1):
        self.name = f"spacy:{model}"
        self.nlp = load_parser_pipeline(model)
        self.n_process = n_process
        self.joined_roots = 0

    def label_inventory(self):
        labels = list(self.nlp.get_pipe("parser").labels)
        return labels + [EXTRA_ROOT_LABEL] if EXTRA_ROOT_LABEL not in labels else labels

    def parse(self, sentences: Sequence[str], batch_size: int = 256) -> Iterator[object]:
        sentences = list(sentences)
        forkable = "fork" in multiprocessing.get_all_start_methods()
        if self.n_process <= 1 or len(sentences) < 2 * CHUNK_SIZE or not forkable:
            yield from self.parse_chunk(sentences, batch_size)
            return
        global _FORKED_PARSER
        _FORKED_PARSER = self
        chunks = [(sentences[i:i + CHUNK_SIZE], batch_size) for i in range(0, len(sentences), CHUNK_SIZE)]
        try:
            with multiprocessing.get_context("fork").Pool(self.n_process) as pool:
                for results, joined_roots in pool.imap(_parse_in_worker, chunks):
                    self.joined_roots += joined_roots
                    yield from results
        finally:
            _FORKED_PARSER = None

    def parse_words(self, word_lists: Sequence[Sequence[str]],
                    spaces_before: Optional[Sequence[Sequence[str]]] = None,
                    batch_size: int = 256) -> Iterator[object]:
        """A ParsedSentence (or ParseError) per word list, over exactly those words: a spaCy Doc is made from the
        words (a space after a word when the next one has whitespace before it) and parsed by the pipeline without
        its tokenizer. The results keep the given whitespace (`spaces_before`, see Parser.parse_words)."""
        from spacy.tokens import Doc

        word_lists = [list(words) for words in word_lists]
        spaces = [given_spaces(words, None if spaces_before is None else spaces_before[i])
                  for i, words in enumerate(word_lists)]
        docs, results = [], []
        for words, before in zip(word_lists, spaces):
            if not words:
                results.append(ParseError("no words"))
                continue
            try:
                docs.append(Doc(self.nlp.vocab, words=words, spaces=[bool(s) for s in before[1:]] + [False]))
                results.append(None)
            except ValueError as error:
                results.append(ParseError(f"spaCy cannot make a document of these words: {error}"))
        parsed = iter(self.nlp.pipe(docs, batch_size=batch_size))
        for words, before, result in zip(word_lists, spaces, results):
            if result is not None:
                yield result
                continue
            doc = next(parsed)
            try:
                if [token.text for token in doc] != words:
                    raise ParseError("spaCy changed the words")
                tree = self.from_doc(doc.text, doc)
                yield ParsedSentence(words, before, tree.heads, tree.labels)
            except ParseError as error:
                yield error

    def parse_chunk(self, sentences: Sequence[str], batch_size: int) -> List[object]:
        results = []
        for text, doc in zip(sentences, self.nlp.pipe(sentences, batch_size=batch_size)):
            try:
                results.append(self.from_doc(text, doc))
            except ParseError as error:
                results.append(error)
        return results

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


def load_parser_pipeline(model: str):
    """The spaCy pipeline with only what its dependency parser needs enabled."""
    import spacy

    try:
        nlp = spacy.load(model)
    except OSError as error:
        raise SystemExit(f"cannot load spaCy pipeline {model!r}: {error}") from None
    if "parser" not in nlp.pipe_names:
        raise SystemExit(f"spaCy pipeline {model!r} has no dependency parser")
    nlp.select_pipes(enable=[name for name in nlp.pipe_names if name in PARSER_COMPONENTS])
    return nlp


def _parse_in_worker(job):
    sentences, batch_size = job
    parser = _FORKED_PARSER
    before = parser.joined_roots
    results = parser.parse_chunk(sentences, batch_size)
    return results, parser.joined_roots - before

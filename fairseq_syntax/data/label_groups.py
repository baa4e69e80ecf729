"""The 16 dependency label groups of LDD (Liu & Sima'an), and how our parsers' labels fall into them.
(Over 400 lines because about 180 of them are the per-label decision tables of the three label schemes: data the
functions below read, kept beside them.)

LDD gives every attention head of the encoder the dependency distribution of one label group l_1..l_16 (section 3;
footnote 3: "We group the original dependency labels into 16 alternative group labels"). Appendix A, "Table A: 16
alternative dependency group labels", lists the groups in Stanford basic dependency labels:

    l_1  root                         l_9  advcl
    l_2  aux, auxpass, cop            l_10 amod
    l_3  acomp, ccomp, pcomp, xcomp   l_11 advmod
    l_4  dobj, iobj, pobj             l_12 npadvmod, tmod
    l_5  csubj, csubjpass             l_13 det, predet
    l_6  nsubj, nsubjpass             l_14 num, number, quantmod
    l_7  cc                           l_15 appos
    l_8  conj, preconj                l_16 punct

The table leaves many labels out (prep, poss, nn, mark, neg, prt, dep, ...), and our parsers do not speak Stanford:
SuPar models trained on UD treebanks output UD v2 labels (with subtypes such as nsubj:pass, obl:tmod), and spaCy's
English pipelines output ClearNLP labels (ROOT, dobj, dative, ...). This module makes an explicit decision for every
label of the three schemes ("stanford", "ud", "clearnlp"): a group index 0..15 (= l_1..l_16) or None, each with a
one-line reason.

The rule for labels Table A does not list: a label goes into a group only when it is the same relation as a Table A
label under another name (dobj -> UD obj, num -> nummod, tmod -> obl:tmod, auxpass -> aux:pass, ROOT -> root, ...),
or a subtype of one. A label whose Stanford counterpart the paper leaves out (prep, poss, nn, mark, neg, prt, rcmod,
...: UD case, nmod, obl, compound, acl:relcl, ...; ClearNLP prep, poss, relcl, ...), or that has no Stanford
counterpart at all (UD list, reparandum, ...), is outside the 16 groups (None). So the 16 groups stay the paper's:
no relation the paper left out is added to a group.

This decides which part of a parser's arc mass falls outside the 16 groups: an arc whose label is outside every
group feeds no head's distribution. `group_matrix` turns a label inventory into the (num labels, 16) 0/1 matrix that
sums labelled arc probabilities into the 16 group distributions; `format_table` prints the whole decision table
(for the CLI and docs/methods.md).

UD subtypes: `group_of` looks up the full label first, then the part before ':', so subtypes not in the table (e.g.
a treebank's "nsubj:caus") get their base relation's decision. Subtypes whose decision differs from their base are
listed explicitly (cc:preconj -> conj group as Stanford preconj; det:poss -> outside as Stanford poss; obl:tmod ->
npadvmod group; advcl:relcl -> outside as Stanford rcmod). Labels match exactly, case included: spaCy writes the
root label "ROOT" and UD writes "root"; neither scheme accepts the other's spelling.
"""
from types import MappingProxyType
from typing import Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

GROUPS = ("root", "aux", "comp", "obj", "csubj", "nsubj", "cc", "conj", "advcl", "amod", "advmod", "npadvmod", "det",
          "num", "appos", "punct")
NUM_GROUPS = len(GROUPS)
SCHEMES = ("stanford", "ud", "clearnlp")

# Appendix A, Table A, literally: group index (0 = l_1) -> the Stanford labels the paper puts in it.
PAPER_GROUPS: Tuple[Tuple[str, ...], ...] = (
    ("root",),
    ("aux", "auxpass", "cop"),
    ("acomp", "ccomp", "pcomp", "xcomp"),
    ("dobj", "iobj", "pobj"),
    ("csubj", "csubjpass"),
    ("nsubj", "nsubjpass"),
    ("cc",),
    ("conj", "preconj"),
    ("advcl",),
    ("amod",),
    ("advmod",),
    ("npadvmod", "tmod"),
    ("det", "predet"),
    ("num", "number", "quantmod"),
    ("appos",),
    ("punct",),
)
_PAPER_INDEX = {label: group for group, labels in enumerate(PAPER_GROUPS) for label in labels}

Decision = Tuple[Optional[int], str]  # (group index or None, reason)


def _l(group: int) -> str:
    return f"l_{group + 1}"


# The helpers below write the reasons; every reason says which kind of decision it is.
def _paper(label: str) -> Decision:
    """A Stanford label Table A lists."""
    group = _PAPER_INDEX[label]
    return group, f"Table A lists {label} in {_l(group)}"


def _same(stanford: str, note: str = "") -> Decision:
    """A label of another scheme that is the Table A relation of the same name."""
    group = _PAPER_INDEX[stanford]
    return group, f"same relation as Stanford {stanford} (Table A, {_l(group)})" + (f"; {note}" if note else "")


def _renamed(stanford: str, note: str = "") -> Decision:
    """A label of another scheme that is a Table A relation under another name."""
    group = _PAPER_INDEX[stanford]
    return group, f"renamed Stanford {stanford} (Table A, {_l(group)})" + (f"; {note}" if note else "")


def _subtype(base: str, stanford: str, note: str = "") -> Decision:
    """A UD subtype kept with its base relation, itself a Table A relation."""
    group = _PAPER_INDEX[stanford]
    return group, f"subtype of {base} = Stanford {stanford} (Table A, {_l(group)})" + (f"; {note}" if note else "")


def _left_out(stanford: str, what: str) -> Decision:
    """Outside: the Stanford counterpart is a label the paper leaves out."""
    return None, f"the paper leaves out {stanford} ({what})"


def _no_counterpart(what: str) -> Decision:
    """Outside: no Stanford relation corresponds, so Table A cannot place it."""
    return None, f"no Stanford counterpart ({what}); not in Table A"


# Stanford basic dependencies (de Marneffe & Manning's manual, v1.x-3.x labels; discourse, goeswith and vmod are
# v3.3+, abbrev, attr, complm, infmod, partmod, purpcl and rel older ones). Table A is written in these labels.
_STANFORD_LEFT_OUT = {
    "abbrev": "abbreviation modifier",
    "agent": "agent of a passive verb",
    "attr": "attributive, e.g. wh-word of a copular question",
    "complm": "complementizer",
    "dep": "unclassified dependent",
    "discourse": "discourse element, interjection",
    "expl": "expletive",
    "goeswith": "part of a wrongly split word",
    "infmod": "infinitival modifier",
    "mark": "marker of an adverbial clause",
    "mwe": "multi-word expression",
    "neg": "negation modifier",
    "nn": "noun compound modifier",
    "parataxis": "loosely joined clause",
    "partmod": "participial modifier",
    "poss": "possession modifier",
    "possessive": "possessive 's",
    "prep": "prepositional modifier",
    "prepc": "prepositional clausal modifier",
    "prt": "phrasal verb particle",
    "purpcl": "purpose clause modifier",
    "rcmod": "relative clause modifier",
    "ref": "referent of a relative pronoun",
    "rel": "wh-word heading a relative clause",
    "vmod": "reduced non-finite verbal modifier",
    "xsubj": "controlling subject",
}
STANFORD: Mapping[str, Decision] = MappingProxyType(dict(sorted(
    [(label, _paper(label)) for label in _PAPER_INDEX]
    + [(label, _left_out(label, what)) for label, what in _STANFORD_LEFT_OUT.items()])))

# Only same-relation renames (and subtypes of them) enter a group, so the 16 groups stay the paper's; a label whose
# Stanford counterpart Table A leaves out stays outside even where it is related to a group (UD obl, ClearNLP attr).
# UD v2: the 37 universal relations, every subtype in the shared UD treebanks (EWT, GSD, PUD, CLTT, IMST, Japanese
# GSD) and the older English/German subtypes (obl:tmod, obl:npmod, nmod:tmod, nmod:npmod). Other subtypes fall back
# to their base relation in `group_of`.
UD: Mapping[str, Decision] = MappingProxyType(dict(sorted({
    "root": _same("root"),
    # l_2
    "aux": _same("aux"),
    "aux:pass": _renamed("auxpass"),
    "aux:q": _subtype("aux", "aux", "question particle"),
    "cop": _same("cop"),
    # l_3 (Stanford acomp is UD xcomp; Stanford pcomp has no single UD label)
    "ccomp": _same("ccomp"),
    "xcomp": _same("xcomp", "also Stanford acomp"),
    # l_4
    "obj": _renamed("dobj"),
    "iobj": _same("iobj"),
    # l_5, l_6
    "csubj": _same("csubj"),
    "csubj:pass": _renamed("csubjpass"),
    "csubj:outer": _subtype("csubj", "csubj", "outer subject of a clausal predicate"),
    "nsubj": _same("nsubj"),
    "nsubj:pass": _renamed("nsubjpass"),
    "nsubj:outer": _subtype("nsubj", "nsubj", "outer subject of a clausal predicate"),
    # l_7, l_8
    "cc": _same("cc"),
    "cc:preconj": _renamed("preconj", "listed so that it does not fall back to cc"),
    "conj": _same("conj"),
    # l_9 .. l_11
    "advcl": _same("advcl"),
    "advcl:pred": _subtype("advcl", "advcl", "secondary predication"),
    "amod": _same("amod"),
    "advmod": _same("advmod", "UD advmod also covers Stanford neg"),
    "advmod:emph": _subtype("advmod", "advmod", "emphasizing word"),
    # l_12
    "obl:tmod": _renamed("tmod"),
    "obl:npmod": _renamed("npadvmod"),
    "obl:unmarked": _renamed("tmod", "UD 2.14 merger of obl:tmod and obl:npmod (Stanford npadvmod, also l_12)"),
    "nmod:tmod": _renamed("tmod"),
    "nmod:npmod": _renamed("npadvmod"),
    "nmod:unmarked": _renamed("npadvmod", "UD 2.14 merger of nmod:npmod and nmod:tmod (Stanford tmod, also l_12)"),
    # l_13
    "det": _same("det"),
    "det:predet": _renamed("predet"),
    "det:numgov": _subtype("det", "det", "pronominal quantifier governing the noun's case"),
    "det:nummod": _subtype("det", "det", "pronominal quantifier agreeing with the noun"),
    # l_14 (Stanford number and quantmod have no UD label of their own: compound/flat and advmod)
    "nummod": _renamed("num"),
    "nummod:gov": _subtype("nummod", "num", "numeral governing the noun's case"),
    # l_15, l_16
    "appos": _same("appos"),
    "punct": _same("punct"),
    # outside: the Stanford counterpart is a label the paper leaves out
    "acl": _left_out("infmod/partmod/vmod", "clausal modifier of a noun"),
    "acl:relcl": _left_out("rcmod", "relative clause"),
    "advcl:relcl": _left_out("rcmod", "relative clause modifying a predicate; listed so that it does not fall back "
                                      "to advcl"),
    "case": _left_out("prep/possessive", "case marker: the word of Stanford prep or possessive"),
    "compound": _left_out("nn", "compound; also some of Stanford number, which has no UD label of its own"),
    "compound:lvc": _left_out("nn", "light verb construction"),
    "compound:prt": _left_out("prt", "phrasal verb particle"),
    "compound:redup": _left_out("nn", "reduplicated compound"),
    "dep": _left_out("dep", "unspecified dependency"),
    "det:poss": _left_out("poss", "possessive determiner; listed so that it does not fall back to det"),
    "discourse": _left_out("discourse", "discourse element, interjection"),
    "expl": _left_out("expl", "expletive"),
    "expl:pass": _left_out("expl", "reflexive passive"),
    "expl:pv": _left_out("expl", "reflexive clitic of an inherently reflexive verb"),
    "fixed": _left_out("mwe", "fixed multiword expression"),
    "flat": _left_out("nn", "flat multiword name; Stanford used nn"),
    "flat:foreign": _left_out("nn", "foreign words"),
    "flat:name": _left_out("nn", "multiword name"),
    "goeswith": _left_out("goeswith", "part of a wrongly split word"),
    "mark": _left_out("mark/complm", "marker of a subordinate clause"),
    "nmod": _left_out("prep", "nominal modifier of a noun: the Stanford prep + pobj path, headed like prep"),
    "nmod:desc": _left_out("nn", "descriptive part of a name, e.g. President X"),
    "nmod:poss": _left_out("poss", "possessive nominal"),
    "obl": _left_out("prep", "oblique nominal: the Stanford prep + pobj path, headed like prep"),
    "obl:agent": _left_out("agent", "agent of a passive verb"),
    "obl:arg": _left_out("prep", "oblique argument"),
    "parataxis": _left_out("parataxis", "loosely joined clause"),
    # outside: no Stanford counterpart
    "clf": _no_counterpart("classifier"),
    "dislocated": _no_counterpart("dislocated element"),
    "list": _no_counterpart("element of a list"),
    "orphan": _no_counterpart("dependent of an elided predicate"),
    "reparandum": _no_counterpart("overridden disfluency"),
    "vocative": _no_counterpart("vocative; Stanford used dep"),
}.items())))

# ClearNLP labels: every label of the parser of spaCy's English pipelines (en_core_web_sm 3.8: 45 labels). "dep"
# is also what fairseq_syntax/parsers/spacy_parser.py gives the extra roots it joins to the first one.
CLEARNLP: Mapping[str, Decision] = MappingProxyType(dict(sorted({
    "ROOT": _renamed("root", "spaCy writes the root label in capitals"),
    "aux": _same("aux"),
    "auxpass": _same("auxpass"),
    "acomp": _same("acomp"),
    "ccomp": _same("ccomp"),
    "pcomp": _same("pcomp"),
    "xcomp": _same("xcomp"),
    "dobj": _same("dobj"),
    "pobj": _same("pobj"),
    "dative": _renamed("iobj", "ClearNLP's indirect object; also the to/for of a dative PP, which Stanford "
                               "labels prep"),
    "csubj": _same("csubj"),
    "csubjpass": _same("csubjpass"),
    "nsubj": _same("nsubj"),
    "nsubjpass": _same("nsubjpass"),
    "cc": _same("cc"),
    "conj": _same("conj"),
    "preconj": _same("preconj"),
    "advcl": _same("advcl"),
    "amod": _same("amod"),
    "advmod": _same("advmod"),
    "npadvmod": _same("npadvmod", "ClearNLP has no tmod: bare-NP temporal modifiers are npadvmod"),
    "det": _same("det"),
    "predet": _same("predet"),
    "nummod": _renamed("num"),
    "quantmod": _same("quantmod"),
    "appos": _same("appos"),
    "punct": _same("punct"),
    # outside: the Stanford counterpart is a label the paper leaves out
    "acl": _left_out("infmod/partmod/vmod", "clausal modifier of a noun"),
    "agent": _left_out("agent", "agent of a passive verb"),
    "attr": _left_out("attr", "attribute: the nominal after a copula"),
    "case": _left_out("possessive", "ClearNLP case is the possessive 's"),
    "compound": _left_out("nn", "noun compound modifier"),
    "dep": _left_out("dep", "unclassified dependent; also the extra roots our spaCy parser joins"),
    "expl": _left_out("expl", "expletive"),
    "intj": _left_out("discourse", "interjection"),
    "mark": _left_out("mark/complm", "marker of a subordinate clause"),
    "neg": _left_out("neg", "negation modifier"),
    "nmod": _left_out("nn/dep", "ClearNLP's other modifier of a nominal"),
    "parataxis": _left_out("parataxis", "loosely joined clause"),
    "poss": _left_out("poss", "possession modifier"),
    "prep": _left_out("prep", "prepositional modifier"),
    "prt": _left_out("prt", "phrasal verb particle"),
    "relcl": _left_out("rcmod", "relative clause modifier"),
    # outside: no Stanford counterpart
    "meta": _no_counterpart("meta modifier, e.g. a bracketed remark or list marker"),
    "oprd": _no_counterpart("object predicate, e.g. consider him [a fool]; Stanford spreads it over xcomp, acomp "
                            "and dep, so it is no rename of one Table A label"),
}.items())))

TABLES: Mapping[str, Mapping[str, Decision]] = MappingProxyType(
    {"stanford": STANFORD, "ud": UD, "clearnlp": CLEARNLP})


def is_special(label: str) -> bool:
    """Dictionary symbols such as <pad>, <unk>, <s>: not dependency labels."""
    return len(label) >= 2 and label.startswith("<") and label.endswith(">")


def _table(scheme: str) -> Mapping[str, Decision]:
    try:
        return TABLES[scheme]
    except KeyError:
        raise ValueError(f"unknown label scheme {scheme!r}; expected one of {', '.join(SCHEMES)}") from None


def decision(label: str, scheme: str) -> Decision:
    """(group index or None, reason) of a label; UD subtypes not in the table take their base relation's decision."""
    table = _table(scheme)
    if label in table:
        return table[label]
    if scheme == "ud" and ":" in label:
        base = label.split(":", 1)[0]
        if base in table:
            group, reason = table[base]
            return group, f"unlisted subtype of {base}: {reason}"
    hint = ""
    if is_special(label):
        hint = " (a dictionary symbol, not a dependency label; group_matrix gives these a zero row)"
    elif scheme == "clearnlp" and label == "root":
        hint = " (spaCy/ClearNLP writes the root label 'ROOT')"
    elif scheme == "ud" and label == "ROOT":
        hint = " (UD writes the root label 'root')"
    elif scheme != "ud" and ":" in label:
        hint = " (subtypes with ':' are UD labels: pass scheme 'ud'?)"
    raise KeyError(f"dependency label {label!r} is not a {scheme} label{hint}; "
                   f"see fairseq_syntax/data/label_groups.py for the {scheme} labels")


def group_of(label: str, scheme: str) -> Optional[int]:
    """Group index 0..15 (= l_1..l_16) of a label, or None if the label is outside the 16 groups.

    Looks up the full label, then (scheme "ud") the part before ':'. KeyError for a label the scheme does not have;
    ValueError for an unknown scheme."""
    return decision(label, scheme)[0]


def group_matrix(labels: Sequence[str], scheme: Optional[str]) -> np.ndarray:
    """float32 (len(labels), 16): row r is one-hot on group_of(labels[r], scheme), all zeros for a label outside the
    16 groups or a dictionary symbol like <pad>. scheme None: guess_scheme(labels)."""
    if scheme is None:
        scheme = guess_scheme(labels)
    matrix = np.zeros((len(labels), NUM_GROUPS), dtype=np.float32)
    for row, label in enumerate(labels):
        if is_special(label):
            continue
        group = group_of(label, scheme)
        if group is not None:
            matrix[row, group] = 1.0
    return matrix


def _is_ud_only(label: str) -> bool:
    if ":" in label:
        return label.split(":", 1)[0] in UD
    return label in UD and label not in CLEARNLP


def guess_scheme(labels: Iterable[str]) -> str:
    """"clearnlp" or "ud" from a label inventory; ValueError when the labels do not tell (or mix both)."""
    labels = [label for label in labels if not is_special(label)]
    clearnlp_only = sorted({label for label in labels if label in CLEARNLP and label not in UD})
    ud_only = sorted({label for label in labels if _is_ud_only(label)})
    if clearnlp_only and not ud_only:
        return "clearnlp"
    if ud_only and not clearnlp_only:
        return "ud"
    if clearnlp_only and ud_only:
        why = (f"they mix ClearNLP-only labels ({', '.join(clearnlp_only[:5])}) with UD-only labels "
               f"({', '.join(ud_only[:5])}), as Stanford labels do")
    else:
        why = "they have neither ClearNLP-only labels (ROOT, prep, pobj, dobj, ...) nor UD-only ones (obj, obl, ...)"
    raise ValueError(f"cannot tell the dependency label scheme of these labels: {why}; "
                     f"pass the scheme explicitly (one of {', '.join(SCHEMES)})")


def _labels_in(scheme: str, group: Optional[int]):
    return [label for label, (g, _) in TABLES[scheme].items() if g == group]


def format_table() -> str:
    """Markdown: the 16 groups with each scheme's labels, the labels mapped into a group though Table A does not list
    them, and the labels outside the 16 groups with their reasons."""
    def code(labels):
        return ", ".join(f"`{label}`" for label in labels) or "-"

    lines = ["Dependency label groups (Liu & Sima'an, appendix A, Table A). Stanford column = Table A itself.", "",
             "| group | Stanford (paper) | UD | ClearNLP |", "|---|---|---|---|"]
    for group, name in enumerate(GROUPS):
        lines.append(f"| {_l(group)} {name} | " + " | ".join(code(_labels_in(s, group)) for s in SCHEMES) + " |")
    lines += ["", "UD subtypes not listed take their base relation's decision (nsubj:outer -> nsubj).", "",
              "Mapped into a group though Table A does not list the label (a Table A relation renamed, or a subtype "
              "of one):", "",
              "| scheme | label | group | reason |", "|---|---|---|---|"]
    for scheme in SCHEMES[1:]:
        for label, (group, reason) in TABLES[scheme].items():
            if group is not None and label not in _PAPER_INDEX:
                lines.append(f"| {scheme} | `{label}` | {_l(group)} {GROUPS[group]} | {reason} |")
    lines += ["", "Outside the 16 groups (their arcs feed no group):", "",
              "| scheme | label | reason |", "|---|---|---|"]
    for scheme in SCHEMES:
        for label in _labels_in(scheme, None):
            lines.append(f"| {scheme} | `{label}` | {TABLES[scheme][label][1]} |")
    return "\n".join(lines) + "\n"


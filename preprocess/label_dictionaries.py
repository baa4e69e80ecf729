"""The label dictionaries of the parsed sides (dict.{lang}.labels.txt): given, or the parser's labels and those
seen; with closed labels, a line with an unknown label is dropped."""
from typing import Dict

from fairseq_syntax.data.channels import LabelDictionary


class LabelDictionaries:
    """Preprocessor's label dictionaries (preprocessor.py); uses its parsers, parser_specs, given_label_dicts and
    closed_labels."""

    def build_label_dicts(self, datas) -> Dict[str, LabelDictionary]:
        """Given dictionaries, else the parser's label inventory plus (unless labels are closed) the labels seen.
        With closed labels, a line with an unknown label is dropped with that reason."""
        label_dicts = {}
        for lang in sorted({lang for data in datas for lang in data.trees}):
            if lang in self.given_label_dicts:
                label_dicts[lang] = self.given_label_dicts[lang]
                continue
            parser = self.parsers.get(lang)
            inventory = parser.label_inventory() if parser is not None else None
            if inventory is None and lang in self.closed_labels:
                raise SystemExit(f"{lang}: the {self.parser_specs[lang]} side has no fixed label set; sharded runs "
                                 f"need --label-dict {lang}=PATH (e.g. dict.{lang}.labels.txt of a full run)")
            label_dicts[lang] = LabelDictionary(inventory or [])
            if lang not in self.closed_labels:
                for data in datas:
                    for tree in data.trees[lang]:
                        for label in tree.labels:
                            label_dicts[lang].add(label)
        for data in datas:
            unknown = {}
            for lang, labels in label_dicts.items():
                for position, tree in enumerate(data.trees.get(lang, [])):
                    missing = [label for label in tree.labels if label not in labels.index]
                    if missing and position not in unknown:
                        unknown[position] = (lang, f"label {missing[0]!r} is not in the label dictionary")
            for position, (lang, reason) in unknown.items():
                data.drops.append((data.line_numbers[position], lang, reason, data.texts[lang][position]))
            data.select([p for p in range(len(data.line_numbers)) if p not in unknown])
        return label_dicts

"""Write Multi30k En-De (train, valid = val, test = test_2016_flickr) as RAW/{split}.{en,de}.

Reads $DATA_ROOT/multi30k/task1_raw (default ../shared/data); with --download and no local copy, fetches the
official files from the multi30k/dataset repository instead."""
import argparse
import gzip
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fairseq_syntax.paths import data_root  # noqa: E402

SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}.{lang}.gz"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir")
    parser.add_argument("--data-root", default=str(data_root()))
    parser.add_argument("--download", action="store_true", help="fetch the official files if no local copy")
    args = parser.parse_args()
    source = Path(args.data_root) / "multi30k" / "task1_raw"
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, name in SPLITS.items():
        for lang in ("en", "de"):
            local = source / f"{name}.{lang}.gz"
            if local.exists():
                data = local.read_bytes()
            elif args.download:
                print(f"downloading {URL.format(name=name, lang=lang)}", file=sys.stderr)
                with urllib.request.urlopen(URL.format(name=name, lang=lang), timeout=60) as response:
                    data = response.read()
            else:
                sys.exit(f"{local} not found: set DATA_ROOT or pass --download")
            (out / f"{split}.{lang}").write_bytes(gzip.decompress(data))
    print(f"wrote Multi30k En-De to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()

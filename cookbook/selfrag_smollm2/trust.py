"""Record the trust suite's test part on the model card: ``trust_eval.json`` in the bundle folder.

``python -m cookbook.selfrag_smollm2.trust RESULT.json --build NAME [--baseline FILE --baseline-build NAME]``
takes the JSON that ``benchmarks/trust_suite.py --split test --json RESULT.json`` wrote for this build
(and, when a build replaces another, the one it replaced) and writes them where the card's trust
section (:mod:`.card.trust`) reads them. Nothing is measured here: the figures are the benchmark's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_selfrag import bundled

from .card.trust import TRUST_FILE


def read_test_part(path: str | Path) -> dict[str, Any]:
    """A trust-suite result file, refused unless it measured the test part."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    split = (data.get("settings") or {}).get("split")
    if split != "test" or not (data.get("figures") or {}).get("kinds"):
        raise SystemExit(f"{path}: not a trust-suite result of the test part (split {split!r})")
    return data


def trust_record(current: Mapping[str, Any], build: str, baseline: Mapping[str, Any] | None = None,
                 baseline_build: str | None = None) -> dict[str, Any]:
    """The ``trust_eval.json`` document: this build's result, and the replaced build's when given."""
    out: dict[str, Any] = {"current": {"build": build, "result": dict(current)}}
    if baseline is not None:
        out["baseline"] = {"build": baseline_build or "previous build", "result": dict(baseline)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", help="benchmarks/trust_suite.py --split test --json output for this build")
    ap.add_argument("--build", required=True, help="this build's name on the card, e.g. v4")
    ap.add_argument("--baseline", help="the same for the build this one replaces")
    ap.add_argument("--baseline-build", help="that build's name on the card")
    ap.add_argument("--folder", default=str(bundled.bundle_dir()), help="the bundle folder (default: the shipped one)")
    args = ap.parse_args(argv)
    record = trust_record(read_test_part(args.result), args.build,
                          read_test_part(args.baseline) if args.baseline else None, args.baseline_build)
    out = Path(args.folder) / TRUST_FILE
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

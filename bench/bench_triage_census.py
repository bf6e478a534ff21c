"""Where the held-out samples' first runs missed, and whether a generic look-alike match would have named them.

Every fresh sample in bench/triage_fresh/ keeps its first run (`first-run.txt`, recorded before any fix it led to) and
its labels (`index.toml`). This reads them all and prints:

- per sample, the first run's catalog causes named (the rate issue 48 sets at 90 %);
- the misses grouped by the entry (or class) their label names: which kinds of text the matcher keeps missing;
- with `--similarity`, a backtest of two generic fallbacks, each run only on the texts the first run named nothing
  on, against the catalog as it stood at that first run (the TOML data at the parent of the commit that added the
  sample's labels, read from git):
  - `wording`: an entry is named where the text holds most of one of its wordings' words, in any order (each word
    weighted by how few entries use it);
  - `neighbours`: an entry is named where the text is close (TF-IDF cosine) to a text of an earlier sample labelled
    with it.
  Each prints what it would have added: texts named right, texts of a catalog cause named wrong, and false claims on
  texts whose cause the catalog lacks.

Needs the repository's git history (a clone, not an export). Usage, from the repository root:
    python bench/bench_triage_census.py [--similarity] [--threshold X] [--verbose]
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

from bench_triage_heldout import (
    MISSED,
    RIGHT,
    RIGHT_POSSIBLY,
    SILENT,
    WRONG,
    WRONG_POSSIBLY,
    Label,
    read_labels,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FRESH = HERE / "triage_fresh"
DATA = "doctor/knowledge/data/"
RESULT = re.compile(
    r"^(\S+)\s+\d+ ms\s+("
    + "|".join(re.escape(v) for v in (RIGHT, RIGHT_POSSIBLY, WRONG, WRONG_POSSIBLY, MISSED, SILENT))
    + r")\s+expected"
)
# words too common in tickets to tell entries apart
STOP = frozenset(
    """the a an and or of to in on for is are was were be been being it its this that these those with without by from
    as at not no but if then than so can cannot could should would will may might must do does did done has have had
    you your we our they their use used using please check make sure set get got error errors exception failed
    failure fail fails raise raised warning info debug note traceback file line call most recent last expected value
    values type types when which what where while how why all any each one two more other some such only also into
    out up down over under same both before after about there here none true false self args kwargs return returns
    function object objects module modules class found find see run running runs time times python torch pytorch
    cuda gpu gpus cpu rank ranks process processes model models train training trainer step steps data
    dataset""".split()
)
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Text:
    label: Label
    verdict: str
    body: str


def words(text: str) -> set[str]:
    """The distinct lowered words of a text (a dotted name also as its parts), minus the common ones."""
    out: set[str] = set()
    for match in WORD.finditer(text):
        whole = match.group(0)
        for part in (whole, *whole.split(".")) if "." in whole else (whole,):
            word = part.lower().strip("_")
            if len(word) >= 3 and word not in STOP:
                out.add(word)
    return out


def git(*args: str) -> str:
    """git's output, or "" where there is no git or no history (an export, a shallow clone): the backtest then
    skips the samples whose labels' commit it cannot find."""
    try:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return done.stdout


def samples() -> list[tuple[str, list[Text], str]]:
    """Each sample in order: its name, its texts with their first-run verdicts, the commit that added its labels."""
    out = []
    for folder in sorted(p for p in FRESH.iterdir() if (p / "first-run.txt").is_file()):
        verdicts = {}
        for line in (folder / "first-run.txt").read_text().splitlines():
            if match := RESULT.match(line):
                verdicts[match.group(1)] = match.group(2)
        texts = [
            Text(label, verdicts[label.file], (folder / label.file).read_text(errors="replace"))
            for label in read_labels(folder / "index.toml")
            if label.file in verdicts
        ]
        added = git("log", "--format=%H", "--diff-filter=A", "--", str(folder / "index.toml")).split()
        out.append((folder.name, texts, added[-1] if added else ""))
    return out


@functools.cache
def catalog_at(commit: str) -> tuple[dict, ...]:
    """The catalog's entries as the TOML data stood just before `commit` (read once: each fallback asks)."""
    entries: list[dict] = []
    for name in git("ls-tree", "--name-only", f"{commit}^", DATA).split():
        if name.endswith(".toml") and not name.endswith(("frames.toml", "measured.toml")):
            entries += tomllib.loads(git("show", f"{commit}^:{name}")).get("issue", [])
    return tuple(entries)


class WordingMatch:
    """An entry whose one wording's words the text mostly holds, in any order."""

    def __init__(self, entries: tuple[dict, ...], cover: float) -> None:
        self.cover = cover
        self.wordings: list[tuple[str, set[str]]] = []
        seen: dict[str, set[str]] = {}
        for entry in entries:
            for wording in entry.get("wording", []):
                got = words(wording.get("text", ""))
                if len(got) >= 3:
                    self.wordings.append((entry["id"], got))
                    seen.setdefault(entry["id"], set()).update(got)
        self.df = Counter(w for got in seen.values() for w in got)
        n = len(seen)
        self.idf = {w: math.log((n + 1) / (c + 0.5)) for w, c in self.df.items()}

    def name(self, text: str) -> str | None:
        have = words(text)
        best, best_score = None, 0.0
        for entry, got in self.wordings:
            found = got & have
            total = sum(self.idf[w] for w in got)
            score = sum(self.idf[w] for w in found) / total if total else 0.0
            rare = any(self.df[w] <= 2 for w in found)
            if score >= self.cover and rare and len(found) >= 3 and score > best_score:
                best, best_score = entry, score
        return best


class Neighbours:
    """The label of the closest earlier labelled text, where it is close enough and names an entry."""

    def __init__(self, earlier: list[Text], threshold: float) -> None:
        self.threshold = threshold
        df = Counter(w for t in earlier for w in set(self._tokens(t.body)))
        self.idf = {w: math.log(len(earlier) / c) for w, c in df.items()}
        self.vectors = [(self._vector(t.body), t.label.expected) for t in earlier]

    @staticmethod
    def _tokens(text: str) -> list[str]:
        return [w for w in re.findall(r"[a-z][a-z0-9_]{2,}", text[:20000].lower()) if w not in STOP]

    def _vector(self, text: str) -> dict[str, float]:
        counts = Counter(self._tokens(text))
        vector = {w: (1 + math.log(n)) * self.idf.get(w, 0.0) for w, n in counts.items()}
        norm = math.sqrt(sum(x * x for x in vector.values())) or 1.0
        return {w: x / norm for w, x in vector.items()}

    def name(self, text: str) -> str | None:
        vector = self._vector(text)
        score, label = max(
            ((sum(x * other.get(w, 0.0) for w, x in vector.items()), lab) for other, lab in self.vectors),
            default=(0.0, "none"),
        )
        return label if score >= self.threshold and label != "none" else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--similarity", action="store_true", help="backtest the two generic look-alike fallbacks"
    )
    parser.add_argument(
        "--cover", type=float, default=0.7, help="wording: the share of a wording's weight found"
    )
    parser.add_argument(
        "--threshold", type=float, default=0.4, help="neighbours: the least cosine that names"
    )
    parser.add_argument("--verbose", action="store_true", help="print each text a fallback would name")
    args = parser.parse_args(argv)
    every = samples()
    census(every)
    if args.similarity:
        for mode in ("wording", "neighbours"):
            backtest(every, mode, args.cover, args.threshold, args.verbose)
    return 0


def census(every: list[tuple[str, list[Text], str]]) -> None:
    """Each sample's first-run rate, and its misses grouped by the entry their label names."""
    misses: Counter[str] = Counter()
    known_total = right_total = 0
    print("sample        texts  catalog causes named (first run)")
    for name, texts, _ in every:
        known = [t for t in texts if t.label.accepted]
        right = sum(t.verdict in (RIGHT, RIGHT_POSSIBLY) for t in known)
        known_total, right_total = known_total + len(known), right_total + right
        print(
            f"{name:<13} {len(texts):>5}  {right:>3} of {len(known):<3} ({100 * right / max(len(known), 1):.0f} %)"
        )
        for t in known:
            if t.verdict == MISSED:
                misses[
                    t.label.expected
                    if t.label.expected != "none"
                    else "/".join(t.label.also_ok) + " (neighbour)"
                ] += 1
    print(
        f"all           {sum(len(t) for _, t, _ in every):>5}  {right_total} of {known_total}"
        f" ({100 * right_total / max(known_total, 1):.0f} %)"
    )
    print(f"\nmissed, by the entry the label names ({sum(misses.values())} texts):")
    for entry, n in misses.most_common():
        print(f"  {n:>3}  {entry}")


def backtest(
    every: list[tuple[str, list[Text], str]], mode: str, cover: float, threshold: float, verbose: bool
) -> None:
    """What one fallback would have added on the texts each first run named nothing on."""
    added = Counter[str]()
    for i, (name, texts, commit) in enumerate(every):
        if not commit:
            continue
        earlier = [t for _, ts, _ in every[:i] for t in ts]
        if mode == "neighbours" and len(earlier) < 50:
            continue
        entries = catalog_at(commit)
        ids = {e["id"] for e in entries}
        namer = WordingMatch(entries, cover) if mode == "wording" else Neighbours(earlier, threshold)
        for t in texts:
            if t.verdict not in (MISSED, SILENT):
                continue
            entry = namer.name(t.body)
            if entry is None or entry not in ids:
                continue
            kind = "right" if entry in t.label.accepted else "wrong" if t.label.accepted else "false claim"
            added[kind] += 1
            if verbose:
                print(f"  {mode}: {name}/{t.label.file[:60]} -> {entry} ({kind})")
    print(
        f"\n{mode}: would have named {added['right']} more texts right, {added['wrong']} texts of a catalog"
        f" cause wrong, and made {added['false claim']} false claims on texts whose cause the catalog lacks"
    )


if __name__ == "__main__":
    sys.exit(main())

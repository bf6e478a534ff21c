"""Set up the next held-out triage sample of issue 48's protocol, and file a gathered one under bench/triage_fresh.

`new` writes, outside the repository, what the four gatherers start from (docs/triage.md, "The protocol"):
- `<out>/PROTOCOL.md`: the previous sample's protocol with this sample's changes (its output folder, its 8 new query
  shapes and their numbers, the order of work);
- `<out>/<P>/queries.toml` for the parts A-D: the new queries of each tracker first, then every query of the
  previous sample's part file in its order (its new block renamed as an older one);
- `<out>/.chk.sh`: rule (e), a thread's URL in any spelling of its repository under the repository or in this
  sample's kept texts.
`widen` does the same for twelve trackers no earlier sample walked (WIDENED: training stacks built on the same
libraries): by 48zz the twelve trackers' pools were spent (280 look-ups, 2 texts), so a fresh sample of them measured
nothing. Each new tracker's queries are the four base shapes of 2026-11-29f and the 8 given shapes, all new.
`collect` copies the parts' texts, meta.toml, queries.toml and walklog and the labeller's index.toml into
bench/triage_fresh/<name>, the form `bench_triage_heldout.py --collection` reads.

Usage, from the repository root:
    python bench/triage_sample.py new --prev bench/triage_fresh/2026-11-30ze --name 48zf --out /work/heldout48zf \\
        --shape "{p} error with X" ... (8 shapes)
    python bench/triage_sample.py widen --prev bench/triage_fresh/2026-12-02zz --name 48zza --out /work/heldout48zza \\
        --shape "{p} error with X" ... (8 shapes)
    python bench/triage_sample.py collect /work/heldout48zf bench/triage_fresh/2026-11-30zf
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shutil
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
#: each part's trackers, with the words their queries use for the project
PARTS = {
    "A": (("DeepSpeed", "DeepSpeed"), ("Accelerate", "accelerate"), ("transformers", "transformers Trainer")),
    "B": (
        ("PEFT", "peft LoRA"),
        ("TRL", "trl"),
        ("torch distributed (pytorch/pytorch)", "pytorch distributed DDP FSDP"),
    ),
    "C": (("NCCL (NVIDIA/nccl)", "NCCL"), ("LLaMA-Factory", "LLaMA-Factory"), ("axolotl", "axolotl")),
    "D": (("ms-swift", "ms-swift"), ("OpenRLHF", "OpenRLHF"), ("verl", "verl")),
}
#: rule (e)'s keys: every owner/repo spelling a thread of the tracker may be recorded under
REPOS = {
    "ds": "deepspeedai/DeepSpeed microsoft/DeepSpeed",
    "acc": "huggingface/accelerate",
    "tf": "huggingface/transformers",
    "peft": "huggingface/peft",
    "trl": "huggingface/trl",
    "torch": "pytorch/pytorch",
    "nccl": "NVIDIA/nccl",
    "lf": "hiyouga/LLaMA-Factory hiyouga/LlamaFactory",
    "ax": "axolotl-ai-cloud/axolotl OpenAccess-AI-Collective/axolotl",
    "swift": "modelscope/ms-swift modelscope/swift",
    "orl": "OpenRLHF/OpenRLHF OpenLLMAI/OpenRLHF",
    "verl": "volcengine/verl verl-project/verl",
}
#: the widened protocol's trackers (`widen`): trainers and training stacks built on DeepSpeed, Accelerate, FSDP and
#: transformers that no sample before 48zza walked
WIDENED = {
    "A": (
        ("PyTorch Lightning (Lightning-AI/pytorch-lightning)", "pytorch lightning"),
        ("unsloth", "unsloth"),
        ("torchtitan (pytorch/torchtitan)", "torchtitan"),
    ),
    "B": (
        ("Megatron-LM (NVIDIA/Megatron-LM)", "Megatron-LM"),
        ("NeMo (NVIDIA/NeMo)", "NeMo"),
        ("ColossalAI (hpcaitech/ColossalAI)", "ColossalAI"),
    ),
    "C": (
        ("FastChat (lm-sys/FastChat)", "FastChat"),
        ("open-instruct (allenai/open-instruct)", "open-instruct"),
        ("alignment-handbook (huggingface/alignment-handbook)", "alignment-handbook"),
    ),
    "D": (
        ("xtuner (InternLM/xtuner)", "xtuner"),
        ("DeepSpeedExamples (DeepSpeed-Chat)", "DeepSpeed-Chat DeepSpeedExamples"),
        ("torchtune (pytorch/torchtune)", "torchtune"),
    ),
}
WIDENED_REPOS = {
    "pl": "Lightning-AI/pytorch-lightning Lightning-AI/lightning PyTorchLightning/pytorch-lightning",
    "unsloth": "unslothai/unsloth",
    "titan": "pytorch/torchtitan meta-pytorch/torchtitan",
    "mega": "NVIDIA/Megatron-LM",
    "nemo": "NVIDIA/NeMo NVIDIA-NeMo/NeMo NVIDIA-NeMo/Speech",
    "colossal": "hpcaitech/ColossalAI",
    "fastchat": "lm-sys/FastChat",
    "oi": "allenai/open-instruct",
    "ah": "huggingface/alignment-handbook",
    "xtuner": "InternLM/xtuner",
    "dsx": "deepspeedai/DeepSpeedExamples microsoft/DeepSpeedExamples",
    "tune": "pytorch/torchtune meta-pytorch/torchtune",
}
#: 2026-11-29f's four base shapes, each new tracker's first queries
BASE_SHAPES = (
    "{p} error traceback training",
    "{p} CUDA out of memory",
    "{p} loss nan",
    "{p} hang timeout distributed",
)
CHECK = """#!/bin/bash
# Rule (e) of held-out sample {name}: .chk.sh <key> issues|discussions <N>
# CLEAR when no spelling of the thread's full URL occurs under {repo} (outside .venv, build, .git) or in another
# kept text of this sample ({out}/*/meta.toml); EXCLUDED (with where) otherwise.
key=$1; kind=$2; n=$3
case $kind in issues|discussions) ;; *) echo "usage: .chk.sh <key> issues|discussions <N>"; exit 2;; esac
[[ $n =~ ^[0-9]+$ ]] || {{ echo "usage: .chk.sh <key> issues|discussions <N>"; exit 2; }}
case $key in
{cases}
  *) echo "unknown key $key ({keys})"; exit 2;;
esac
for r in $repos; do
  hit=$(grep -rEil --exclude-dir=.venv --exclude-dir=build --exclude-dir=.git \\
    -e "github\\.com/$r/$kind/$n([^0-9]|\\$)" {repo} \\
    {out}/A/meta.toml {out}/B/meta.toml {out}/C/meta.toml {out}/D/meta.toml 2>/dev/null | head -3)
  if [ -n "$hit" ]; then echo "EXCLUDED $r/$kind/$n: $hit"; exit 1; fi
done
echo CLEAR
"""
#: the budget and rule (e), as every protocol states them
BUDGET_AND_CHECK = """\
  Budget: at most 70 look-ups per part (search + read_file + find_string together; search excerpt only, source =
  "excerpt"). The `search` tool's budget is shared by the whole session: should it refuse a call, stop, and say so.
[{name}] Rule (e) = `{out}/.chk.sh <key> issues <N>` (or `discussions`) for every candidate; keys {keys}. It greps
  {repo} (every earlier sample, the catalog and docs) and the four parts' meta.toml of this sample, for every
  owner/repo spelling of the tracker: CLEAR means the thread may be kept. Run it BEFORE keeping a candidate, and write
  the candidate into meta.toml at once when kept.
"""
#: the rules every sample keeps, the last paragraph of each protocol
EVERYTHING_ELSE = """\
[{name}] Everything else as in the previous samples: rules (a)-(d) of the 2026-11-29f header (a thread, not a PR, of
  the tracker's repository; dated 2023-01-01 or later where a date shows, "unknown" where none; shows an error
  message / traceback end / error log line / NaN or hang log in the title or excerpt; a training or fine-tuning
  job), the FIRST result that passes all rules is kept, no cherry-picking; a text is the thread's title line, a
  blank line, then the excerpt's log / traceback part as posted (machine output verbatim, user prose trimmed, at most
  ~4,000 characters); texts and walk only, no labels (one labeller labels all four parts afterwards, against the
  catalog at that moment); nothing under the repository edited; no git / make / tests / triage run / catalog regex or
  script over the texts beyond .chk.sh.
"""

PROTOCOL = (
    """# Held-out sample {name}: protocol (fixed {when} by this machine's clock, before any search of it)

This is the {prev_dir} protocol ({prev_index}, its header up to its "Outcome" paragraph, which amends the earlier
samples' back to 2026-11-29f, whose rules (a)-(d) and text / meta format stand) with these changes only, marked
[{name}]:

[{name}] Output: {out}/<part>/ (A DeepSpeed, Accelerate, transformers, texts 101..; B PEFT, TRL, torch distributed,
  texts 201..; C NCCL, LLaMA-Factory, axolotl, texts 301..; D ms-swift, OpenRLHF, verl, texts 401..). Each part
  writes only its own folder: the texts NNN-short-slug.txt, meta.toml (one [[text]] per kept text: file, url, date,
  project, query, source, note - as in {prev_dir}/part-<P>.meta.toml; NO labels), walklog (one line per query run),
  and its queries.toml (already written: only NEW-{name} rewordings may be appended, at its end, each before it is
  run). At the end of meta.toml, an outcome comment block: texts kept per tracker, look-ups answered, where the walk
  stopped, the queries left unrun, and the least sure judgement calls.
"""
    + BUDGET_AND_CHECK
    + """[{name}] Queries per tracker: all its queries of the previous sample (copied into <P>/queries.toml), PLUS 8 NEW
  queries per tracker, fixed here before any search, q{first}..q{last} in tracker order (DeepSpeed, Accelerate,
  transformers, PEFT, TRL, torch distributed, NCCL, LLaMA-Factory, axolotl, ms-swift, OpenRLHF, verl), in this order
  of shapes: {shapes},
  with <project> the same words the tracker's q-queries use. {ranges}.
[{name}] Order within a part: pass 1 runs the part's NEW-{name} queries first, then the previous sample's new block,
  then the older blocks in the order they stand in <P>/queries.toml, then its base queries in number order; pass 2
  (the recorded rewording, else ONE NEW-{name} rewording in the same shape and the tracker's own words, written at
  the end of the part's queries.toml before it is run), in qN order of the queries that gave nothing usable, until
  all are run or the budget is spent. Any query left unrun for lack of budget is listed in the part's outcome.
"""
) + EVERYTHING_ELSE


def next_number(prev: Path) -> int:
    """One after the highest qN any part of the previous sample holds."""
    numbers = [
        int(key[1:].rstrip("b"))
        for part in PARTS
        for key in tomllib.loads((prev / f"part-{part}.queries.toml").read_text())["queries"]
    ]
    return max(numbers) + 1


def part_queries(prev: Path, part: str, name: str, prev_name: str, first: int, shapes: list[str]) -> str:
    lines = (prev / f"part-{part}.queries.toml").read_text().split("[queries]\n", 1)[1].splitlines()
    if lines and lines[0].startswith(f"# [{prev_name}] NEW queries"):
        lines[0] = f"# [{prev_name}] queries (NEW in {prev_name})"
    cut = next(
        (i for i, line in enumerate(lines) if line.startswith(f"# NEW-{prev_name} rewordings")), len(lines)
    )
    written = [
        line for line in lines[cut:] if line.strip() and not line.startswith("#")
    ]  # its own rewordings
    kept = [
        line
        for line in lines[:cut]
        if not line.startswith(f"# Check (before any search): none of the 24 NEW-{prev_name}")
    ]
    old = {m.group(1) for m in (re.match(r'^q\d+b? = "(.*)"', line) for line in kept + written) if m}
    block = [f"# [{name}] NEW queries (exact strings per PROTOCOL.md), run first"]
    n = first
    for heading, words in PARTS[part]:
        block.append(f"# {heading}")
        for shape in shapes:
            query = shape.format(p=words)
            if query in old:
                raise SystemExit(f"{query!r} is an older query of part {part}: pick another shape")
            block.append(f'q{n} = "{query}"')
            n += 1
    block += [
        f"# Check (before any search): none of the 24 NEW-{name} strings equals an older string of this file.",
        "",
    ]
    header = (
        f"# Held-out sample {name}, part {part}: queries, written before any search of this part.\n"
        f"# NEW queries q{first}..q{n - 1} first, then every query of {prev}/part-{part}.queries.toml in its order.\n"
        '# Search tool, corpus "issues", excerpt only. Budget 70 look-ups.\n\nformat = 1\n\n[queries]\n'
    )
    tail = [*written, "", f"# NEW-{name} rewordings (each written here before it is run):"]
    return header + "\n".join(block + kept + tail) + "\n"


def check_shapes(shapes: list[str]) -> None:
    """Both kinds of sample take exactly 8 new query shapes, each with {p} where a tracker's words go."""
    if len(shapes) != 8 or any("{p}" not in s for s in shapes):
        raise SystemExit("give 8 --shape strings, each with {p} where the project's words go")


def write_rules(
    template: str,
    out: Path,
    prev: Path,
    name: str,
    repos: dict[str, str],
    *,
    shapes: list[str],
    **fields: object,
) -> None:
    """A sample's rule-(e) check (`.chk.sh`, over `repos`' spellings) and its PROTOCOL.md from `template`."""
    cases = "\n".join(f'  {key}) repos="{spellings}";;' for key, spellings in repos.items())
    check = out / ".chk.sh"
    check.write_text(CHECK.format(name=name, repo=REPO, out=out, cases=cases, keys=" ".join(repos)))
    check.chmod(0o755)
    (out / "PROTOCOL.md").write_text(
        template.format(
            name=name,
            when=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            prev_dir=prev,
            prev_index=prev / "index.toml",
            out=out,
            repo=REPO,
            keys=" ".join(repos),
            shapes=", ".join(f'"{s.format(p="<project>")}"' for s in shapes),
            **fields,
        )
    )


def new(prev: Path, name: str, out: Path, shapes: list[str]) -> int:
    prev, out = prev.resolve(), out.resolve()
    check_shapes(shapes)
    named = re.match(r"# Held-out sample (\S+?):", (prev / "index.toml").read_text())
    if named is None:
        raise SystemExit(f"{prev}/index.toml does not open with '# Held-out sample <name>:'")
    prev_name = named.group(1)
    first = next_number(prev)
    # each part's new queries: its three trackers' shapes, the parts in order
    starts = {part: first + i * len(shapes) * len(PARTS[part]) for i, part in enumerate(PARTS)}
    for part, start in starts.items():
        (out / part).mkdir(parents=True, exist_ok=True)
        (out / part / "queries.toml").write_text(part_queries(prev, part, name, prev_name, start, shapes))
    per_part = len(shapes) * 3
    last = first + per_part * len(PARTS) - 1
    ranges = ", ".join(f"part {p} q{start}..q{start + per_part - 1}" for p, start in starts.items())
    write_rules(PROTOCOL, out, prev, name, REPOS, first=first, last=last, shapes=shapes, ranges=ranges)
    print(f"{out}: PROTOCOL.md, .chk.sh, A-D/queries.toml (q{first}..q{last})")
    return 0


WIDEN_PROTOCOL = (
    """# Held-out sample {name}: protocol (fixed {when} by this machine's clock, before any search of it)

This is the {prev_dir} protocol ({prev_index}, its header up to its "Outcome" paragraph, which amends the earlier
samples' back to 2026-11-29f, whose rules (a)-(d) and text / meta format stand) with these changes only, marked
[{name}]. WIDENED (from 48zza): the twelve trackers of the samples up to 48zz are spent (48zz: 280 look-ups, 2
texts); this sample walks the widened set, twelve training stacks built on the same libraries (first walked by 48zza;
threads an earlier sample kept are excluded by rule (e)).

[{name}] Output: {out}/<part>/ ({parts}). Each part writes only its own folder: the texts NNN-short-slug.txt,
  meta.toml (one [[text]] per kept text: file, url, date, project, query, source, note - as in
  {prev_dir}/part-<P>.meta.toml; NO labels), walklog (one line per query run), and its queries.toml (already
  written: only NEW-{name} rewordings may be appended, at its end, each before it is run). At the end of meta.toml,
  an outcome comment block: texts kept per tracker, look-ups answered, where the walk stopped, the queries left
  unrun, and the least sure judgement calls.
"""
    + BUDGET_AND_CHECK
    + """[{name}] Queries per tracker: 12, all new, fixed here before any search, q{first}..q{last} in tracker order, in
  this order of shapes: {shapes}, with <project> the words its queries use. {ranges}.
[{name}] Order within a part: pass 1 runs the part's queries in number order; pass 2 (ONE NEW-{name} rewording in
  the same shape and the tracker's own words, written at the end of the part's queries.toml before it is run), in qN
  order of the queries that gave nothing usable, until all are run or the budget is spent. Any query left unrun for
  lack of budget is listed in the part's outcome.
[{name}] A thread of the tracker's own repository only (rule (a)): a DeepSpeed, transformers or torch thread that a
  query meets is not this sample's, whatever it shows.
"""
) + EVERYTHING_ELSE


def widen(prev: Path, name: str, out: Path, shapes: list[str]) -> int:
    """A sample of the WIDENED trackers: each tracker's 4 base shapes and the 8 given ones, all new."""
    prev, out = prev.resolve(), out.resolve()
    check_shapes(shapes)
    every = [*BASE_SHAPES, *shapes]
    first = n = next_number(prev)
    ranges = []
    for part, trackers in WIDENED.items():
        start = n
        lines = [f"# [{name}] queries (WIDENED: every query new; exact strings per PROTOCOL.md)"]
        for heading, words in trackers:
            lines.append(f"# {heading}")
            for shape in every:
                lines.append(f'q{n} = "{shape.format(p=words)}"')
                n += 1
        ranges.append(f"part {part} q{start}..q{n - 1}")
        header = (
            f"# Held-out sample {name}, part {part}: queries, written before any search of this part.\n"
            '# Search tool, corpus "issues", excerpt only. Budget 70 look-ups.\n\nformat = 1\n\n[queries]\n'
        )
        (out / part).mkdir(parents=True, exist_ok=True)
        tail = ["", f"# NEW-{name} rewordings (each written here before it is run):"]
        (out / part / "queries.toml").write_text(header + "\n".join(lines + tail) + "\n")
    parts = "; ".join(
        f"{part} {', '.join(h.split(' (')[0] for h, _ in trackers)}, texts {i + 1}01.."
        for i, (part, trackers) in enumerate(WIDENED.items())
    )
    write_rules(
        WIDEN_PROTOCOL,
        out,
        prev,
        name,
        WIDENED_REPOS,
        first=first,
        last=n - 1,
        shapes=every,
        ranges=", ".join(ranges),
        parts=parts,
    )
    print(f"{out}: PROTOCOL.md, .chk.sh, A-D/queries.toml (q{first}..q{n - 1}, widened)")
    return 0


def collect(source: Path, target: Path) -> int:
    target.mkdir(parents=True, exist_ok=True)
    for part in PARTS:
        folder = source / part
        for text in sorted(folder.glob("*.txt")):
            shutil.copy2(text, target / text.name)
        for own in ("meta.toml", "queries.toml", "walklog"):
            shutil.copy2(folder / own, target / f"part-{part}.{own}")
    shutil.copy2(source / "index.toml", target / "index.toml")
    print(f"{target}: {len(list(target.glob('*.txt')))} texts")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    new_p = sub.add_parser("new", help="the next sample's protocol, queries and rule-(e) check")
    new_p.add_argument(
        "--prev", type=Path, required=True, help="the previous sample's folder in bench/triage_fresh"
    )
    new_p.add_argument("--name", required=True, help='the sample\'s name in the protocol ("48zf")')
    new_p.add_argument(
        "--out", type=Path, required=True, help="where the gatherers work (outside the repository)"
    )
    new_p.add_argument("--shape", action="append", default=[], help="a new query shape with {p} (8 of them)")
    wide_p = sub.add_parser("widen", help="the next sample, of twelve trackers no earlier sample walked")
    wide_p.add_argument("--prev", type=Path, required=True, help="the previous sample's folder")
    wide_p.add_argument("--name", required=True, help='the sample\'s name in the protocol ("48zza")')
    wide_p.add_argument("--out", type=Path, required=True, help="where the gatherers work")
    wide_p.add_argument("--shape", action="append", default=[], help="a query shape with {p} (8 of them)")
    col_p = sub.add_parser("collect", help="a labelled sample into bench/triage_fresh")
    col_p.add_argument("source", type=Path)
    col_p.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    if args.command == "new":
        return new(args.prev, args.name, args.out, args.shape)
    if args.command == "widen":
        return widen(args.prev, args.name, args.out, args.shape)
    return collect(args.source, args.target)


if __name__ == "__main__":
    sys.exit(main())

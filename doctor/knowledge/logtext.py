"""A user's log made matchable, and the versions it shows.

`normalise` undoes what a cluster does to a traceback on its way into a ticket: colour codes, tqdm bars the
traceback got glued onto (`\\r` redraws included), the per-rank prefixes of torchrun `--tee`/`--role`, `srun
--label` and `mpirun --tag-output`, several ranks' tracebacks interleaved line by line (each rank's lines are put
back together, in the order the ranks first speak), and lines a terminal or a CI viewer wrapped at a fixed width.

`log_versions` reads the versions a log reports of the packages the known issues are judged on: pip freeze/list/
show lines, `ds_report`, `accelerate env` and `transformers-cli env` output, versioned package paths, and
"name v1.2.3".
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable

_ANSI = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")
#: a tqdm bar: "  5%|▌     | 5/100 [00:02<00:40,  2.3it/s, loss=1.2]"; it goes, and what follows it on the line is a
#: new line. What precedes it on its line stays: its description ("Converting format of dataset (num_proc=15): ") is
#: what a title saying the bar stops there names ("...examples/s]卡住": stuck); a redraw's repeats are lines of their
#: own. (The text before it went too until 48zf's 301.) The regex has no leading `[^\n]*?`: tried from every position
#: of a long line, that took quadratic time (a 80 KB line, 57 s).
_BAR = re.compile(
    r"\d{1,3}%\|[^|\n]{0,1000}\|\s{0,100}[\d.]{1,20}[kMG]?/[\d.?]{1,20}[kMG]?\s{0,100}\[[^\]\n]{0,200}\]"
)
_PREFIX = re.compile(
    r"^(?:\(\w{1,100} pid=\d{1,10}\) )?(?:\[(?:rank|default)(\d{1,7})\]:|rank(\d{1,7}): |(\d{1,7}): |"
    r"\[\d{1,7},(\d{1,7})\]<std(?:out|err)>:) ?"
)
#: pdsh's "<host>: " before every line a node prints (DeepSpeed's multi-node launcher, its default runner): a host
#: name with a letter and a digit ("worker-0", "gpu-node-12", "675d-5"), taken as a prefix only where it starts
#: HOST_LINES lines or more, so that "cuda12: ..." said once stays text
_HOST = re.compile(r"^((?=[\w.-]{0,62}\d)(?=[\w.-]{0,62}[A-Za-z])[A-Za-z0-9][\w.-]{0,62}): ")
HOST_LINES = 3
WRAP_MIN = 60  # narrowest width taken for a wrap...
WRAP_LINES = 3  # ...when at least this many lines are cut at exactly it
_PADDED = ("  ", "\t", " \t")


def _strip_bars(text: str) -> str:
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    out: list[str] = []
    kept = 0  # text[kept:] is not written yet
    for bar in _BAR.finditer(text):
        out += [text[kept : bar.start()], "\n"]
        kept = bar.end()
    return "".join(out) + text[kept:]


def _deinterleave(lines: list[str]) -> list[str]:
    """Each rank's lines together (prefix gone), ranks in the order they first speak; unprefixed lines are a
    speaker of their own. A pdsh host prefix goes first, its host part of the speaker."""
    found = [_HOST.match(line) for line in lines]
    counts = collections.Counter(host.group(1) for host in found if host)
    hosts = {host for host, n in counts.items() if n >= HOST_LINES}
    by_speaker: dict[tuple[str | None, str | None] | None, list[str]] = collections.OrderedDict()
    for line, host in zip(lines, found, strict=True):
        on = host.group(1) if host and host.group(1) in hosts else None
        if host and on is not None:
            line = line[host.end() :]
        match = _PREFIX.match(line)
        rank = next((g for g in match.groups() if g is not None), None) if match else None
        speaker = None if on is None and rank is None else (on, rank)
        by_speaker.setdefault(speaker, []).append(line[match.end() :] if match else line)
    if list(by_speaker) == [None]:
        return lines
    return [line for speaker_lines in by_speaker.values() for line in speaker_lines]


def _unwrap(lines: list[str]) -> list[str]:
    """Join lines cut at a fixed width: the longest line length, when several lines have exactly it. A line ending
    in two blanks or more was padded out to the width (a copied terminal screen), not cut there."""
    lengths = collections.Counter(
        len(line) for line in lines if len(line) >= WRAP_MIN and not line.endswith(_PADDED)
    )
    if not lengths:
        return lines
    width = max(lengths)
    if lengths[width] < WRAP_LINES:
        return lines
    out: list[list[str]] = []
    joining = False
    for line in lines:
        if joining and out:
            out[-1].append(line)  # joined at the end: adding to a string in the loop took quadratic time
        else:
            out.append([line])
        joining = len(line) == width and not line.endswith(_PADDED)
    return ["".join(parts) for parts in out]


#: a CJK character touching an ASCII letter or digit ("报错No module named"): to a regex both are word characters, so
#: no word boundary lies between them, and a message glued to a Chinese title would not match
_CJK_TOUCHING = re.compile(
    r"(?<=[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff])(?=[A-Za-z0-9])"
    r"|(?<=[A-Za-z0-9])(?=[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff])"
)


def normalise(text: str) -> str:
    lines = _strip_bars(_CJK_TOUCHING.sub(" ", text)).split("\n")
    return "\n".join(_deinterleave(_unwrap(lines)))  # a viewer wraps what the launcher prefixed: unwrap first


_VERSION = (
    # "0.7.0.dev": PEP 440's .dev0; a local part's dots only between its words ("Torch: 2.6.0+cu124. CUDA: 8.0.",
    # Unsloth's banner: the sentence's period is not the release's)
    r"(\d+\.\d+(?:\.\d+)*(?:(?:a|b|rc|\.post)\d+|\.dev\d*)?(?:\+\w+(?:\.\w+)*)?)"
)
_TEMPLATES = (
    r"^{n}\s*==\s*" + _VERSION,  # pip freeze
    r"^{n}\s+" + _VERSION + r"\s*$",  # pip list
    r"^Name:\s*{n}\s*\nVersion:\s*" + _VERSION,  # pip show
    r"^[ \t]*{n} (?:info|version)[ \t]*\.{{2,}}[ \t]*\[?" + _VERSION,  # ds_report (not \s*: it spans lines)
    r"^-{3,}[ \t]*{n} Info[ \t]*-{3,}[ \t]*\nVersion[ \t]*:[ \t]*v?"
    + _VERSION,  # verl's diagnose: its section
    # accelerate env, transformers-cli env: "PyTorch version (GPU?): 2.1.2 (True)", "(accelerator?)" since 4.46, and
    # what a reporter writes in its place ("PyTorch version (cuda 12.2): 2.1.2 (True)")
    r"`?{n}`? version(?: \([^()\n]{1,30}\))?:\s*" + _VERSION,
    r"[/\\]{n}-" + _VERSION + r"(?:\.dist-info|\.egg|-py\d|[/\\])",  # versioned package paths
    # a list of name-version pairs, as a wheel or sdist names its release ("peft-0.10.0, datasets-2.19.0,
    # transformers-4.40.1"): each followed by a separator or the line's end (a file's name goes on: ".tar.gz", "-cp311")
    r"(?<![\w./\\-]){n}-" + _VERSION + r"(?=[ \t]*(?:[,;]|$))",
    # pip's own line after an install, its pairs separated by spaces ("Successfully installed ... transformers-4.56.1
    # trl-0.23.0 unsloth-2025.9.4", 48zzb's 105)
    r"^Successfully installed\b[^\n]*?(?<=[ \t]){n}-" + _VERSION + r"(?=[ \t]|$)",
    # a traceback's source listing of the package's own __init__.py (IPython's "File .../peft/__init__.py:22", then
    # its lines): the __version__ it assigns, alone on a listing line (double underscores are read as emphasis, so
    # spaces, by then)
    r"[/\\]{n}[/\\][_ ]{2}init[_ ]{2}\.py\b[^\n]*(?:\n[^\n]*){0,40}?\n[ \t]*(?:-+>[ \t]*)?(?:\d+[ \t]+)?"
    r"(?:__|[ ]{2})version(?:__|[ ]{2})[ \t]*=[ \t]*['\"]" + _VERSION,
    # an upgrade the failure came after: the release it went to ("after upgrading trl 0.21.0 > 0.22.0", "updated
    # transformers from 4.45.2 to 4.46.0")
    r"\b(?:upgrad|updat|bump|downgrad)\w*[ \t]+(?:from[ \t]+)?{n}[ \t]+(?:from[ \t]+)?v?\d+(?:\.\d+)+[\w.+]*[ \t]*"
    r"(?:->|=>|→|>|\bto\b)[ \t]*v?" + _VERSION,
    # a library's own check naming the release it found ("you need flash_attn package version to be greater or equal
    # than 2.1.0. Detected version 2.0.4."): the installed one, not the one required, with no other package's
    # requirement between them
    r"(?<![\w.-]){n}\b(?:(?![\w.-]+[ \t]*[<>=!~]=?[ \t]*\d)[^\n]){0,80}?\b(?:detected|found|installed|got)[ \t]+"
    r"(?:version[ \t]+)?v?" + _VERSION,
    # DeepSpeed's op builders on the torch they found, past the range they name ("sparse_attn requires a torch
    # version >= 1.5 and < 2.0 but detected 2.4", op_builder/sparse_attn.py, read in 0.16.9): major.minor
    r"\brequires an? {n} version >= [\d.]+ and < [\d.]+ but detected[ \t]+" + _VERSION,
    r"(?<![\w-]){n}\s+v" + _VERSION + r"\b",  # "prodigy-plus-schedule-free v1.8.51"
    # what tickets write in prose and issue templates
    r"(?<![\w.-]){n}\s*\(\s*v?" + _VERSION + r"\s*\)",  # "deepspeed (0.14.2)"
    r"(?<![\w.-]){n}[ \t]*={1,2}[ \t]*v?"
    + _VERSION,  # "deepspeed=0.17.6", collect_env's "[pip3] torch==2.3.0"
    # (after a word and one hyphen it is another name, "py-torch 1.0"; after a dash it is the name, "--NCCL 2.7.8")
    r"(?<![\w.])(?<![\w.]-){n}[ \t]+(?:version[ \t]+|release[ \t]+)?v?[ \t]?"
    + _VERSION
    + r"(?!\w|\.\w)",  # "with transformers 4.45.2,", "Deepspeed v 0.14.3", a sentence's period after it
    r"(?<![\w.-]){n}(?:[ \t]+version|[ \t]*版本)?[ \t]*[:：][ \t]*(?:\([ \t]*)?v?"
    + _VERSION
    + r"(?!\w|\.\w)",  # "DeepSpeed version: V0.14.3", "transformers version :  (4.33.3)", "torch版本: 2.10.0",
    # "Transformers: 5.3.0." (a banner's sentence)
    r"\bv(?:ersion)?[ \t]?" + _VERSION + r"[ \t]+of[ \t]+{n}\b",  # "I use V0.14.3 of DeepSpeed"
    r"(?<![\w.-]){n}(?:'s)?[ \t]+version[ \t]+(?:is|was)[ \t]+v?"
    + _VERSION
    + r"(?!\.?\d)",  # "My DeepSpeed version is 0.16.4."
    # the name and its release written as one word in an environment line ("环境：v100，torch2.1.0+cu118，xtuner0.1.18",
    # 48zza's 414): a release with a dot, the word ending there, never inside a path or a longer name
    r"(?<![\w./\\-]){n}v?" + _VERSION + r"(?![\w.-])",
    # a Markdown table of an issue template: "| deepspeed | 0.14.3 |", "| DeepSpeed version | v0.14.3 |"
    r"^[ \t]*\|?[ \t]*`?{n}`?(?:[ \t]+version)?[ \t]*\|[ \t]*`?v?" + _VERSION + r"`?[ \t]*(?:\||$)",
)
#: Markdown's strong emphasis, which issue templates put around a package's name or its label
_EMPHASIS = re.compile(r"\*\*|(?<![\w])__|__(?![\w])")
#: sentences of the libraries themselves that cite a release: history, not the version the user runs
_QUOTED = re.compile(r"(?i)\bin (?:py)?torch \d+(?:\.\d+)+, we changed")
#: names a log may use for a distribution besides its own (an import name, an informal one)
ALIASES = {
    "torch": ("pytorch",),
    "prodigy-plus-schedule-free": ("prodigyplus", "prodigy plus", "prodigy-plus"),
    "mosaicml": ("composer",),
    "deepspeed": ("ds",),  # "ds 0.14": read where a version follows it, as a word of its own
    # what `llamafactory-cli version` is pasted as, and the project's own name as tickets write it ("Llama-factory
    # 版本：0.8.2", 48zy's 301)
    "llamafactory": ("llamafactory-cli", "llama-factory", "llama_factory", "llama factory"),
    # the wheel torch's CUDA builds load NCCL from, versioned as the NCCL it holds (a pip list's "nvidia-nccl-cu12
    # 2.20.5")
    "nccl": ("nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13"),
}


def _spellings(package: str) -> list[str]:
    names = {package, package.replace("-", "_"), package.replace("_", "-"), *ALIASES.get(package, ())}
    return sorted(names, key=len, reverse=True)


#: a further version listed right after the first ("deepspeed: 0.15.3 & 0.14.5", "NCCL versions tested: 2.27.5,
#: 2.30.4", "torch 2.4.1 or 2.5.0"): each one a version the user ran
_FURTHER = re.compile(r"[ \t]*(?:&|,|/|\band\b|\bor\b)[ \t]*v?" + _VERSION + r"(?![\w.+])", re.IGNORECASE)
MAX_LISTED = 8


def log_versions(text: str, packages: Iterable[str]) -> dict[str, str]:
    """package -> the first version the log shows for it (packages it does not mention are left out)."""
    return {package: listed[0] for package, listed in log_version_lists(text, packages).items()}


def log_version_lists(text: str, packages: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """package -> the first version the log shows for it, and those listed right after it (`_FURTHER`)."""
    found: dict[str, tuple[int, tuple[str, ...]]] = {}
    text = _QUOTED.sub(
        lambda m: " " * len(m.group(0)), text
    )  # same length: positions still order the matches
    # Markdown emphasis around a name or its label ("**DeepSpeed version**: 0.16.4", "- __torch__: 2.5.1") read as
    # spaces, of the same length
    text = _EMPHASIS.sub(lambda m: " " * len(m.group(0)), text)
    lowered = text.lower()
    for package in packages:
        names = _spellings(package)
        if not any(name.lower() in lowered for name in names):  # one quick look before seven regex passes
            continue
        alternatives = "|".join(re.escape(name) for name in names)
        for template in _TEMPLATES:
            pattern = template.replace("{n}", f"(?:{alternatives})").replace("{{2,}}", "{2,}")
            match = re.search(pattern, text, re.IGNORECASE | re.MULTILINE)
            if match and (package not in found or match.start() < found[package][0]):
                found[package] = (match.start(), _listed(text, match))
    return {package: listed for package, (_, listed) in found.items()}


def _listed(text: str, match: re.Match[str]) -> tuple[str, ...]:
    versions = [match.group(1)]
    pos = match.end(1)
    while len(versions) < MAX_LISTED and (further := _FURTHER.match(text, pos)):
        if further.group(1) not in versions:
            versions.append(further.group(1))
        pos = further.end()
    return tuple(versions)

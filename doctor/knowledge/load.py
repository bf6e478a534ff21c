"""The known-issue catalog as data: one TOML file per library in `doctor/knowledge/data/`, read and checked here.

Schema of a data file, format 1 (the comment at the top of each file says how it is written)::

    format = 1                          # the schema version; another is refused
    [[issue]]                           # one table per known issue, in catalog order
    id = 'ds_...'                       # required; [a-z][a-z0-9_]*, unique across every file
    title = '...'                       # required; one line
    package = 'deepspeed'               # required; the distribution whose installed version decides the verdict
    patterns = ['regex', ...]           # any one matching the error text is a hit (re.MULTILINE | re.DOTALL)...
    requires = ['regex', ...]           # ...provided all of these match too (frames that disambiguate)
    evidence = ['regex', ...]           # a generic message: named as the cause only where one of these matches too
    confirm = '...'                     # ...else triage says "possibly", and this is how to confirm it
    banners = ['regex', ...]            # a warning the library prints before this error: alone, "possibly" it
    paraphrases = ['regex', ...]        # how people name this failure in prose ("CUDA OOM"): alone, "possibly" it
    native_frames = ['regex', ...]      # the C++ function raising it in a native stack: alone, "possibly" it
    silent = '...'                      # instead of patterns: why no log shows it (then invariants find it)
    cause = '...'                       # required
    remedy = '...'                      # required
    refs = ['https://...', ...]         # required, at least one http(s) URL
    affected = '>=0.14.1,<0.14.3'       # PEP 440 specifier on `package`; absent = every version
    fixed_in = '0.14.3'                 # PEP 440 version, outside `affected`; absent = no fix known
    families = ['zero_offload']         # probe families that exercise it
    invariants = ['clip_norm_device']   # invariants whose error findings show it
    knobs = ['schedule=cosine', ...]    # a silent entry's conditions on a knob-matrix setting: name=glob|glob (the
                                        # Knobs' fields, route, world_size); a diverging case that fits names it
    alongside = ['transformers>=5.0.0'] # the range holds only beside these releases of other distributions (a
                                        # bug where two libraries meet); absent = the package's range alone
    fallback = 1                        # a class, named only where nothing more specific matches the text: 1 a
                                        # class of causes (a segfault), 2 a summary that a process failed (a
                                        # launcher's line: it gives way to a class too); absent = 0, a cause
    [[issue.wording]]                   # after the entry's keys, one table per wording its message ever had
    text = '...'                        # the message as printed, placeholders filled with sample values
    source = 'torch torch/x/y.py'       # the distribution and its file that raise it
    versions = '>=2.1'                  # PEP 440 specifier on that distribution: the releases printing it
    read = ['2.1.2', '2.13.0']          # the releases whose source was read; each inside versions
    [[issue.lookalike]]                 # one table per look-alike: a text of another cause sharing its words...
    text = '...'                        # ...that this entry must not be named on (a test holds it to that)
    why = '...'                         # what the text's cause is, and why it is not this entry

Strings are strings and lists are lists of non-empty strings; an entry has patterns or silent, never both, and a
silent one names invariants (and has no requires) and no wording. Any other key is refused, so a typo cannot drop
a field. That the entry's patterns match each wording is a test's business (tests/knowledge/test_wording.py), not
the loader's: a data file that disagrees with its patterns still loads. What was measured of an entry, release by
release, is not here: `data/measured.toml`, written by `make verify-catalog` and read by `ds_doctor.knowledge.measured`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ds_doctor.knowledge.issues import REGEX_FLAGS, KnownIssue, Lookalike, Wording

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

FORMAT = 1
#: data/<name>.toml, in catalog order
LIBRARIES = (
    "deepspeed",
    "accelerate",
    "fsdp",
    "launch",
    "equivalence",
    "reported",
    "field_deepspeed",
    "field_hf",
    "field_trainers",
    "field_distributed",
    "everyday",
)

_REQUIRED = ("id", "title", "package", "cause", "remedy", "refs")
_TEXTS = ("id", "title", "package", "cause", "remedy", "affected", "fixed_in", "silent", "confirm")
_LISTS = (
    "patterns",
    "requires",
    "refs",
    "families",
    "invariants",
    "evidence",
    "banners",
    "paraphrases",
    "native_frames",
    "knobs",
    "alongside",
)
_KEYS = frozenset((*_TEXTS, *_LISTS, "wording", "lookalike", "fallback"))
_WORDING_KEYS = ("text", "source", "versions", "read")
_LOOKALIKE_KEYS = ("text", "why")
_ID = re.compile(r"[a-z][a-z0-9_]*")
_KNOB = re.compile(r"[a-z_0-9]+=[^=|\s]+(\|[^=|\s]+)*")


class CatalogError(ValueError):
    """A data file that breaks the schema; the message names the file and the entry."""


def data_files() -> list[Traversable]:
    """The shipped data files, in catalog order (read through importlib.resources, so from a wheel too)."""
    folder = resources.files("ds_doctor.knowledge") / "data"
    return [folder / f"{name}.toml" for name in LIBRARIES]


def load_catalog(files: Iterable[Path | Traversable] | None = None) -> tuple[KnownIssue, ...]:
    """Every entry of `files` (default: the shipped ones), in order; ids must be unique across the files."""
    issues: list[KnownIssue] = []
    where: dict[str, str] = {}
    for path in data_files() if files is None else files:
        for issue in load_file(path):
            if issue.id in where:
                raise CatalogError(f"{path}: issue {issue.id!r}: id already used in {where[issue.id]}")
            where[issue.id] = str(path)
            issues.append(issue)
    return tuple(issues)


def load_file(path: Path | Traversable) -> tuple[KnownIssue, ...]:
    """The entries of one data file, checked."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: cannot be read: {exc}") from exc
    return parse(text, str(path))


def parse(text: str, source: str) -> tuple[KnownIssue, ...]:
    """The entries of one data file's text; `source` names the file in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{source}: not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - {"format", "issue"})
    if unknown:
        raise CatalogError(
            f"{source}: unknown top-level key(s) {', '.join(unknown)} (a file holds `format` and [[issue]])"
        )
    if data.get("format") != FORMAT:
        raise CatalogError(f"{source}: format {data.get('format')!r}; this ds-doctor reads format = {FORMAT}")
    entries = data.get("issue", [])
    if not isinstance(entries, list):
        raise CatalogError(f"{source}: `issue` must be an array of tables ([[issue]])")
    issues: list[KnownIssue] = []
    for number, raw in enumerate(entries, 1):
        name = raw.get("id") if isinstance(raw, dict) else None
        label = (
            f"{source}: issue {name!r}"
            if isinstance(name, str) and name
            else f"{source}: issue #{number} (no id)"
        )
        if not isinstance(raw, dict):
            raise CatalogError(f"{label}: not a table")
        issue = _entry(raw, label)
        if any(issue.id == seen.id for seen in issues):
            raise CatalogError(f"{label}: id used twice in this file")
        issues.append(issue)
    return tuple(issues)


def _entry(raw: Mapping[str, Any], label: str) -> KnownIssue:
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise CatalogError(f"{label}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}")
    missing = [key for key in _REQUIRED if key not in raw]
    if missing:
        raise CatalogError(f"{label}: missing required key(s) {', '.join(missing)}")
    for key in _TEXTS:
        if key in raw and not isinstance(raw[key], str):
            raise CatalogError(f"{label}: {key} must be a string, not {type(raw[key]).__name__}")
        if key in raw and key != "affected" and not raw[key].strip():
            raise CatalogError(f"{label}: {key} is empty (leave the key out instead)")
    for key in _LISTS:
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            raise CatalogError(f"{label}: {key} must be a list of non-empty strings, not {value!r}")
    if raw.get("fallback", 0) not in (0, 1, 2) or isinstance(raw.get("fallback"), bool):
        raise CatalogError(f"{label}: fallback must be 1 (a class) or 2 (a summary), not {raw['fallback']!r}")
    _check(raw, label)
    fixed_in: str | None = raw.get("fixed_in")
    return KnownIssue(
        id=raw["id"],
        title=raw["title"],
        package=raw["package"],
        patterns=tuple(raw.get("patterns", ())),
        cause=raw["cause"],
        remedy=raw["remedy"],
        refs=tuple(raw["refs"]),
        requires=tuple(raw.get("requires", ())),
        affected=raw.get("affected", ""),
        fixed_in=fixed_in,
        families=tuple(raw.get("families", ())),
        invariants=tuple(raw.get("invariants", ())),
        silent=raw.get("silent", ""),
        wordings=_wordings(raw.get("wording", []), label),
        evidence=tuple(raw.get("evidence", ())),
        confirm=raw.get("confirm", ""),
        banners=tuple(raw.get("banners", ())),
        paraphrases=tuple(raw.get("paraphrases", ())),
        native_frames=tuple(raw.get("native_frames", ())),
        lookalikes=_lookalikes(raw.get("lookalike", []), label),
        knobs=tuple(raw.get("knobs", ())),
        fallback=raw.get("fallback", 0),
        alongside=tuple(raw.get("alongside", ())),
    )


def _lookalikes(raw: Any, label: str) -> tuple[Lookalike, ...]:
    """The [[issue.lookalike]] tables of an entry: each exactly a text and why it is another cause."""
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise CatalogError(f"{label}: lookalike must be an array of tables ([[issue.lookalike]])")
    for number, table in enumerate(raw, 1):
        if sorted(table) != sorted(_LOOKALIKE_KEYS) or not all(
            isinstance(table[key], str) and table[key].strip() for key in _LOOKALIKE_KEYS
        ):
            raise CatalogError(f"{label}: lookalike #{number} must have exactly a non-empty text and why")
    return tuple(Lookalike(table["text"], table["why"]) for table in raw)


def _wordings(raw: Any, label: str) -> tuple[Wording, ...]:
    """The [[issue.wording]] tables of an entry, checked: every key, a "<distribution> <file>" source, a range,
    and releases read that lie inside it."""
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise CatalogError(f"{label}: wording must be an array of tables ([[issue.wording]])")
    wordings = []
    for number, table in enumerate(raw, 1):
        where = f"{label}: wording #{number}"
        if sorted(table) != sorted(_WORDING_KEYS):
            raise CatalogError(
                f"{where}: keys {', '.join(sorted(table))}; a wording has exactly {', '.join(_WORDING_KEYS)}"
            )
        if not all(isinstance(table[key], str) and table[key].strip() for key in _WORDING_KEYS[:3]):
            raise CatalogError(f"{where}: text, source and versions must be non-empty strings")
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]* \S+", table["source"]):
            raise CatalogError(f"{where}: source {table['source']!r} must be '<distribution> <file in it>'")
        read = table["read"]
        if not isinstance(read, list) or not read or not all(isinstance(v, str) for v in read):
            raise CatalogError(f"{where}: read must list the releases whose source was read")
        try:
            versions, seen = SpecifierSet(table["versions"]), [Version(v) for v in read]
        except (InvalidSpecifier, InvalidVersion) as exc:
            raise CatalogError(f"{where}: {exc}") from exc
        outside = [str(v) for v in seen if not versions.contains(v, prereleases=True)]
        if outside:
            raise CatalogError(
                f"{where}: read {', '.join(outside)} lies outside versions {table['versions']!r}"
            )
        wordings.append(Wording(table["text"], table["source"], table["versions"], tuple(read)))
    return tuple(wordings)


def _check(raw: Mapping[str, Any], label: str) -> None:
    """What the types alone do not say: the id's shape, regexes, URLs, versions, patterns-or-silent."""
    if not _ID.fullmatch(raw["id"]):
        raise CatalogError(f"{label}: id must match {_ID.pattern}")
    if "\n" in raw["title"]:
        raise CatalogError(f"{label}: title must be one line")
    _check_regexes(raw, label)
    _check_refs(raw["refs"], label)
    _check_versions(raw, label)
    _check_kind(raw, label)


def _check_regexes(raw: Mapping[str, Any], label: str) -> None:
    for key in ("patterns", "requires", "evidence", "banners", "paraphrases", "native_frames"):
        for pattern in raw.get(key, ()):
            try:
                re.compile(pattern, REGEX_FLAGS)
            except re.error as exc:
                raise CatalogError(f"{label}: {key} regex {pattern!r} does not compile: {exc}") from exc


def _check_refs(refs: list[str], label: str) -> None:
    if not refs:
        raise CatalogError(f"{label}: refs is empty; cite at least one upstream thread")
    for ref in refs:
        parts = urlsplit(ref)
        if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in ref):
            raise CatalogError(f"{label}: ref {ref!r} is not an http(s) URL")


def _check_versions(raw: Mapping[str, Any], label: str) -> None:
    """`affected` a specifier set, `fixed_in` a version outside it, `alongside` requirements on other
    distributions, each with a range."""
    for condition in raw.get("alongside", ()):
        try:
            requirement = Requirement(condition)
        except InvalidRequirement as exc:
            raise CatalogError(f"{label}: alongside {condition!r} is not a requirement: {exc}") from exc
        if not str(requirement.specifier) or requirement.name == raw["package"] or requirement.marker:
            raise CatalogError(
                f"{label}: alongside {condition!r} must be another distribution with a range, like "
                "'transformers>=5.0.0'"
            )
    try:
        affected = SpecifierSet(raw.get("affected", ""))
    except InvalidSpecifier as exc:
        raise CatalogError(
            f"{label}: affected {raw['affected']!r} is not a PEP 440 specifier set: {exc}"
        ) from exc
    if "fixed_in" not in raw:
        return
    try:
        fixed = Version(raw["fixed_in"])
    except InvalidVersion as exc:
        raise CatalogError(f"{label}: fixed_in {raw['fixed_in']!r} is not a PEP 440 version: {exc}") from exc
    if str(affected) and affected.contains(fixed, prereleases=True):
        raise CatalogError(f"{label}: fixed_in {raw['fixed_in']} lies inside affected {raw['affected']!r}")


def _check_kind(raw: Mapping[str, Any], label: str) -> None:
    """An entry shows a message (patterns, optionally narrowed) or is silent (named invariants find it)."""
    if bool(raw.get("patterns")) == bool(raw.get("silent")):
        raise CatalogError(
            f"{label}: give patterns (the error text it shows) or silent (why none shows it), not both"
        )
    if raw.get("silent") and not raw.get("invariants"):
        raise CatalogError(f"{label}: a silent issue must name the invariants that find it")
    if raw.get("wording") and not raw.get("patterns"):
        raise CatalogError(f"{label}: a silent issue prints no message, so it has no wording")
    if any(raw.get(key) for key in ("requires", "banners", "paraphrases", "native_frames")) and not raw.get(
        "patterns"
    ):
        raise CatalogError(
            f"{label}: requires, banners, paraphrases and native frames go with patterns (the error they narrow, "
            "precede, name or raise), not without"
        )
    if raw.get("fallback") and not raw.get("patterns"):
        raise CatalogError(f"{label}: a fallback is named by what a text shows, so it needs patterns")
    if raw.get("knobs") and not raw.get("silent"):
        raise CatalogError(
            f"{label}: knobs are a silent issue's conditions on a matrix setting, not an error's"
        )
    for condition in raw.get("knobs", ()):
        if not _KNOB.fullmatch(condition):
            raise CatalogError(f"{label}: knob condition {condition!r} is not name=value or name=value|value")
    if bool(raw.get("evidence")) != bool(raw.get("confirm")) or (
        raw.get("evidence") and not raw.get("patterns")
    ):
        raise CatalogError(
            f"{label}: evidence (what corroborates a generic message) and confirm (how to check it where nothing "
            "does) go together, on an entry with patterns"
        )

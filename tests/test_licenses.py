"""License terms: accelrl ships its MIT LICENSE, and a plain ``pip install accelrl`` pulls in no
copyleft package other than the ones docs/third-party.md names.

The rule for GPL code (MinAtar and any later one): an optional extra, imported only when asked
for, never a core requirement. The check reads the installed distributions' own license metadata
for the core requirement closure (accelrl's requirements without extras, recursively).
"""

import re
from email.message import Message
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]

# Copyleft core requirements accepted on purpose, each with why. The test fails on any other
# copyleft package in the closure, and on an entry here that is no longer in it or no longer
# copyleft, so the list stays exact.
ACCEPTED_COPYLEFT: dict[str, str] = {
    # None: ale-py (GPL-2.0) and minatar (GPL-3.0) are the optional extras atari and minatar.
}

# LGPL and AGPL count as copyleft too. Importing an LGPL library from MIT code is generally
# allowed, but shipping or changing it carries conditions a legal review asks about, so an LGPL
# requirement needs its own ACCEPTED_COPYLEFT entry, like a GPL one.
SPDX_COPYLEFT = re.compile(r"[AL]?GPL-", re.IGNORECASE)  # GPL-3.0-only, LGPL-2.1-or-later, ...
TEXT_COPYLEFT = re.compile(
    r"\b[AL]?GPL(?!-compatible)|\bGNU\b[\w ]*\bGeneral Public License", re.IGNORECASE
)


def _spdx_copyleft(tokens: list[str]) -> bool:
    """True when every choice an SPDX expression leaves includes a GPL-family license:
    ``MIT OR GPL-2.0-only`` can be taken as MIT, ``MIT AND GPL-2.0-only`` cannot."""
    if not tokens:
        return False
    for op, combine in (("OR", all), ("AND", any)):  # OR binds loosest
        parts: list[list[str]] = [[]]
        depth = 0
        for tok in tokens:
            depth += (tok == "(") - (tok == ")")
            if depth == 0 and tok.upper() == op:
                parts.append([])
            else:
                parts[-1].append(tok)
        if len(parts) > 1:
            return combine(_spdx_copyleft(part) for part in parts)
    if tokens[0] == "(":
        return _spdx_copyleft(tokens[1:-1])
    return bool(SPDX_COPYLEFT.match(tokens[0]))  # "GPL-2.0-only WITH ..." is still GPL


def _license_fields(meta: Message) -> tuple[str, str, list[str]]:
    """``License-Expression``, the first line of ``License``, the ``License ::`` classifiers."""
    lines = (meta.get("License") or "").strip().splitlines()
    classifiers = [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    return meta.get("License-Expression") or "", lines[0] if lines else "", classifiers


def copyleft_license(meta: Message) -> str | None:
    """The license text that makes a distribution copyleft (GPL, LGPL, AGPL), else None.

    ``License-Expression`` (PEP 639) is authoritative when present. Otherwise the ``License``
    field and the ``License ::`` classifiers are read, and any GPL mention among them counts.
    Of ``License`` only the first line is read: some packages put their whole license file there
    (matplotlib's lists bundled components, one of them dual-licensed FTL OR GPL-2.0-or-later).
    Metadata that names no license at all is not copyleft here.
    """
    expression, first_line, classifiers = _license_fields(meta)
    if expression:
        tokens = re.findall(r"[()]|[^\s()]+", expression)
        return expression if _spdx_copyleft(tokens) else None
    candidates = [first_line, *classifiers] if first_line else classifiers
    return next((c for c in candidates if TEXT_COPYLEFT.search(c)), None)


def names_no_license(meta: Message) -> bool:
    expression, first_line, classifiers = _license_fields(meta)
    return not (expression or first_line or classifiers)


def requirement_closure(requirements, distribution=metadata.distribution, extras=("",)) -> dict:
    """Every distribution the requirement strings pull in, by canonical name (None when not
    installed). Markers are evaluated for this machine: the given strings' with ``extras``, a
    dependency's own with the extras its requirement names (torch asks for
    ``cuda-toolkit[cublas,...]``)."""
    found: dict = {}
    walked: set = set()
    todo = [(Requirement(text), extras) for text in requirements]
    while todo:
        req, active = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in active):
            continue
        name = canonicalize_name(req.name)
        wanted = {"", *req.extras}
        if {(name, e) for e in wanted} <= walked:
            continue
        walked |= {(name, e) for e in wanted}
        try:
            dist = found[name] = distribution(req.name)
        except metadata.PackageNotFoundError:
            found[name] = None
            continue
        todo += [(Requirement(text), tuple(wanted)) for text in dist.requires or []]
    return found


def copyleft_problems(closure: dict, accepted: dict) -> list[str]:
    """Why the closure breaks the rule: unaccepted copyleft packages, and stale accepted ones."""
    flagged = {}
    for name, dist in closure.items():
        if dist is not None and (lic := copyleft_license(dist.metadata)):
            flagged[name] = lic
    problems = [
        f"{name} is copyleft ({lic}): make it an optional extra imported only when asked for, "
        "or accept it in ACCEPTED_COPYLEFT and docs/third-party.md"
        for name, lic in sorted(flagged.items())
        if name not in accepted
    ]
    problems += [
        f"{name} is in ACCEPTED_COPYLEFT but not a copyleft package of the closure: remove it"
        for name in sorted(set(accepted) - set(flagged))
    ]
    if problems:
        missing = sorted(name for name, dist in closure.items() if dist is None)
        unknown = sorted(n for n, d in closure.items() if d and names_no_license(d.metadata))
        problems.append(f"not installed (unchecked): {missing}; no license metadata: {unknown}")
    return problems


def fake_dist(requires=(), **fields):
    meta = Message()
    for key, value in fields.items():
        for item in value if isinstance(value, list) else [value]:
            meta[key.replace("_", "-")] = item
    return SimpleNamespace(metadata=meta, requires=list(requires))


@pytest.mark.parametrize(
    "fields",
    [
        {"License_Expression": "GPL-3.0-only"},
        {"License_Expression": "GPL-3.0-or-later"},
        {"License_Expression": "LGPL-2.1-only"},
        {"License_Expression": "AGPL-3.0-or-later"},
        {"License_Expression": "MIT AND (GPL-2.0-only WITH Classpath-exception-2.0)"},
        {"License": "GPL"},
        {"License": "GPLv3"},
        {"License": "GNU GENERAL PUBLIC LICENSE\n   Version 3, 29 June 2007\n..."},
        {"Classifier": ["License :: OSI Approved :: GNU General Public License v3 (GPLv3)"]},
        {
            "Classifier": [
                "License :: OSI Approved :: GNU Lesser General Public License v3 (LGPLv3)"
            ]
        },
        {
            "Classifier": [
                "License :: OSI Approved :: MIT License",
                "License :: OSI Approved :: GNU Affero General Public License v3",
            ]
        },
    ],
)
def test_gpl_family_metadata_is_flagged(fields):
    assert copyleft_license(fake_dist(**fields).metadata)


@pytest.mark.parametrize(
    "fields",
    [
        {"License_Expression": "MIT"},
        {"License_Expression": "BSD-3-Clause"},
        {"License_Expression": "Apache-2.0 OR BSD-2-Clause"},
        {"License_Expression": "MPL-2.0 AND (Apache-2.0 OR MIT)"},
        {"License_Expression": "MIT OR GPL-2.0-or-later"},  # MIT can be chosen
        {"License": "MIT"},
        {"License": "Apache 2.0"},
        {"License": "BSD 3-Clause License\n\nA bundled font is FTL OR GPL-2.0-or-later"},
        {"License": "Python: GPL-compatible"},
        {"Classifier": ["License :: OSI Approved :: BSD License"]},
        {"Classifier": ["License :: OSI Approved :: Apache Software License"]},
        {},
    ],
)
def test_permissive_metadata_is_not_flagged(fields):
    assert copyleft_license(fake_dist(**fields).metadata) is None


def test_closure_finds_a_copyleft_package_behind_a_requirement_and_its_extra():
    fakes = {
        "top": fake_dist(["mid[gpu]", 'optional-gpl; extra == "minatar"'], License="MIT"),
        "mid": fake_dist(['deep-gpl; extra == "gpu"', 'other; extra == "cpu"'], License="MIT"),
        "deep-gpl": fake_dist(License_Expression="GPL-3.0-only"),
        "optional-gpl": fake_dist(License_Expression="GPL-3.0-only"),
        "other": fake_dist(License_Expression="GPL-3.0-only"),
    }

    def distribution(name):
        if name not in fakes:
            raise metadata.PackageNotFoundError(name)
        return fakes[name]

    closure = requirement_closure(["top", "absent>=1"], distribution)
    assert set(closure) == {"top", "mid", "deep-gpl", "absent"}
    assert closure["absent"] is None
    problems = copyleft_problems(closure, accepted={"optional-gpl": "an extra, not reached"})
    assert problems[0].startswith("deep-gpl is copyleft (GPL-3.0-only)"), problems
    assert problems[1].startswith("optional-gpl is in ACCEPTED_COPYLEFT but not"), problems
    assert "not installed (unchecked): ['absent']" in problems[2], problems
    assert copyleft_problems(closure, accepted={"deep-gpl": "accepted"}) == []


COPYLEFT_EXTRAS = {
    "atari": {"ale-py": "GPL-2.0-only: the Atari emulator and its ROMs"},
    "minatar": {"minatar": "GPL-3.0: MinAtar's games"},
}
"""The extras that exist to hold a copyleft package, and those packages; ``test`` installs both."""


def test_plain_install_pulls_in_no_copyleft_package():
    closure = requirement_closure(metadata.requires("accelrl") or [])
    assert "torch" in closure, sorted(closure)
    assert "ale-py" not in closure and "minatar" not in closure, sorted(closure)
    problems = copyleft_problems(closure, ACCEPTED_COPYLEFT)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("extra", ["export", "trackers", "atari", "minatar", "test"])
def test_optional_extras_add_only_the_copyleft_packages_they_exist_for(extra):
    requires = metadata.requires("accelrl") or []
    core = requirement_closure(requires)
    with_extra = requirement_closure(requires, extras=("", extra))
    added = {name: dist for name, dist in with_extra.items() if name not in core}
    assert added, f"accelrl[{extra}] adds nothing"
    if extra == "test":
        accepted = {k: v for packages in COPYLEFT_EXTRAS.values() for k, v in packages.items()}
    else:
        accepted = COPYLEFT_EXTRAS.get(extra, {})
    assert copyleft_problems(added, accepted=accepted) == []


def test_license_file_ships_with_the_package():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "accelrl contributors" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]

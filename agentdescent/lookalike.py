"""The letters a reader takes for others: in a word that mixes scripts, a Cyrillic `а` drawn exactly
like the Latin `a` it stands beside, so that `https://аpi.example.com` reads as a host it is not.

    mistaken("send to https://\\u0430pi.example.com")  ==  [16]     # the Cyrillic а of "аpi"

A word is a run of letters; each letter's script is the first word of its Unicode name, and only
the scripts of `SCRIPTS` count (Latin and those whose letters pass for Latin ones). A word is found
when it holds letters of two of them and one of its letters passes for a letter of the other:

- a letter of `LOOKS_LIKE` (a Cyrillic `а`, a Greek `ο`, an Armenian `օ`) beside a Latin letter;
- a Latin letter inside a word mostly of another script that has a letter drawn like it (the Latin
  `e` of "сeрвер").

A word of one script is found only when it passes whole for a Latin word where Latin is read:
every one of its letters (two at least) a letter of `LOOKS_LIKE`, on a line with more Latin letters
than letters of other scripts of `SCRIPTS` besides it (the Cyrillic "аррӏе" of `https://аррӏе.com`).
So a Russian sentence is never found, though many Russian words ("хор", "а") are spelt wholly with
such letters, nor a Greek word or a Greek letter alone ("the angle α"), nor a word whose other
letters look like no Latin one: "Δt", "sinθ" and "μs" are maths, and no reader takes Δ for a Latin
letter. A Greek letter that passes for a Latin one is found beside Latin letters, in maths too ("ρgh":
ρ passes for p), as is a Russian word of look-alikes quoted in English prose. What is found is every
letter of the word that is not Latin: escaped, what is left drawn as it is holds only Latin letters.

Left out: letters of no script of `SCRIPTS` that draw as Latin ones (fullwidth, mathematical), which
a host name folds to the Latin letter they draw as (IDNA).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

__all__ = ["LOOKS_LIKE", "SCRIPTS", "mistaken"]

SCRIPTS = frozenset({"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "LISU"})
# Each letter of another script drawn like a Latin one, then that Latin letter: the pairs of Unicode's
# confusables (UTS #39) between single letters, less the weak ones (Greek σ for o, Cyrillic г for r).
_PAIRS = (
    "аa еe оo рp сc уy хx ѕs іi јj һh ԁd ԛq ԝw ӏl ѵv үy ҽe "  # Cyrillic
    "АA ВB ЕE КK МM НH ОO РP СC ТT ХX ЅS ІI ЈJ УY ҮY ӀI ԌG ԚQ ԜW ѴV "
    "ΑA ΒB ΕE ΖZ ΗH ΙI ΚK ΜM ΝN ΟO ΡP ΤT ΥY ΧX ϹC ͿJ αa γy ιi νv οo ρp υu ϲc ϳj "  # Greek
    "ՍU ՏS ՕO գq զq հh ոn ռn սu ցg օo "  # Armenian
    "ᎠD ᎡR ᎢT Ꭵi ᎩY ᎪA ᎫJ ᎬE ᎳW ᎷM ᎻH ᎽY ᏀG Ꮒh ᏃZ Ꮟb ᏒR ᏔW ᏕS ᏙV ᏚS ᏞL ᏟC ᏢP ᏦK Ꮷd ᏳG ᏴB "  # Cherokee
    "ꓐB ꓑP ꓒd ꓓD ꓔT ꓖG ꓗK ꓙJ ꓚC ꓜZ ꓝF ꓟM ꓠN ꓡL ꓢS ꓣR ꓦV ꓧH ꓪW ꓫX ꓬY ꓮA ꓰE ꓲI ꓳO ꓴU"  # Lisu
)
LOOKS_LIKE = {pair[0]: pair[1] for pair in _PAIRS.split()}
_WORD = re.compile(r"[^\W\d_]+")  # a run of letters: digits, underscores and marks end it


def mistaken(text: str) -> list[int]:
    """Where in `text` the letters stand that are not Latin, of each word a reader can take for
    another (see above), in order; [] for text of one script. One look at each character."""
    if text.isascii():
        return []
    found: list[int] = []
    line, end = Counter[str](), -1  # the scripts of the letters of the line that ends at `end`
    for word in _WORD.finditer(text):
        letters = word.group()
        if letters.isascii():
            continue
        at = _mistaken_in(letters)
        if not at and len(letters) > 1 and all(c in LOOKS_LIKE for c in letters):
            if word.start() > end:  # a line not counted yet: each is counted once, and only from its first such word
                start = text.rfind("\n", end + 1, word.start()) + 1 or end + 1
                end = text.find("\n", word.end())
                end = len(text) if end < 0 else end
                line = Counter(map(_script, text[start:end]))
            if line["LATIN"] > sum(line.values()) - line[""] - line["LATIN"] - len(letters):  # Latin read around it
                at = list(range(len(letters)))
        found.extend(word.start() + i for i in at)
    return found


def _mistaken_in(word: str) -> list[int]:
    scripts = [_script(letter) for letter in word]
    counts = Counter(script for script in scripts if script)
    if len(counts) < 2:
        return []
    main = max(counts, key=lambda script: (counts[script], script == "LATIN"))  # of most letters; Latin on a tie
    latin = [c for c, script in zip(word, scripts) if script == "LATIN"]
    others = [at for at, script in enumerate(scripts) if script not in ("", "LATIN")]
    passes = (bool(latin) and any(word[at] in LOOKS_LIKE for at in others)) or any(c in _DRAWN.get(main, ()) for c in latin)
    return others if passes else []


def _script(letter: str) -> str:
    """The script of a letter of `SCRIPTS`, "" for any other: _script("а") == "CYRILLIC" """
    script = unicodedata.name(letter, "").split(" ", 1)[0]
    return script if script in SCRIPTS else ""


def _drawn() -> dict[str, frozenset[str]]:
    """Each script of `LOOKS_LIKE`'s letters, with the Latin letters some letter of it is drawn like."""
    found: dict[str, set[str]] = {}
    for letter, latin in LOOKS_LIKE.items():
        found.setdefault(_script(letter), set()).add(latin)
    return {script: frozenset(letters) for script, letters in found.items()}


_DRAWN = _drawn()

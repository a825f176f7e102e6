"""The letters a reader takes for others: in a word that mixes scripts, a Cyrillic `а` drawn exactly
like the Latin `a` it stands beside, so that `https://аpi.example.com` reads as a host it is not.

    mistaken("send to https://\\u0430pi.example.com")  ==  [16]     # the Cyrillic а of "аpi"

A word is a run of letters; each letter's script is the first word of its Unicode name, and only
the scripts of `SCRIPTS` count (Latin and those whose letters pass for Latin ones). A word is found
when it holds letters of two of them and one of its letters passes for a letter of the other:

- a letter of `LOOKS_LIKE` (a Cyrillic `а`, a Greek `ο`, an Armenian `օ`) beside a Latin letter;
- a Latin letter inside a word mostly of another script that has a letter drawn like it (the Latin
  `e` of "сeрвер").

So a word of one script (a Russian sentence, "π", "αβγ") is never found, nor one whose other letters
look like no Latin one: "Δt", "sinθ" and "μs" are maths, and no reader takes Δ for a Latin letter. A
Greek letter that passes for a Latin one is found beside Latin letters, in maths too ("ρgh": ρ passes
for p). What is found is every letter of the word that is not Latin: escaped, what is left drawn
as it is holds only Latin letters.

Left out: a word made wholly of another script's look-alikes (a Cyrillic "аре" for "ape"), whose
one script gives nothing away, and letters of no script of `SCRIPTS` that draw as Latin ones
(fullwidth, mathematical), which a host name folds to the Latin letter they draw as (IDNA).
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
    for word in _WORD.finditer(text):
        if not word.group().isascii():
            found.extend(word.start() + at for at in _mistaken_in(word.group()))
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

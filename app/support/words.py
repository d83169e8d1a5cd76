"""Words as the support check reads them: tokens, stop words, negation cues and stems, per
language. Stems come from the Snowball stemmers (PyStemmer); a language it lacks is compared by
its lower-cased words."""

from __future__ import annotations

import re
import threading
from functools import lru_cache

import Stemmer

# Han (with extensions and compatibility ideographs), hiragana, katakana, half-width katakana,
# hangul: scripts written without spaces between words (hangul has them, but its words inflect
# by suffixes no stemmer here knows: bigrams match them better).
CJK = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
    "\uac00-\ud7af\U00020000-\U0002fa1f"
)
CJK_RUN = re.compile(f"[{CJK}]+")
_KANA = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HANGUL = re.compile("[\uac00-\ud7af]")
_CYRILLIC = re.compile("[\u0400-\u04ff]")
_GREEK = re.compile("[\u0370-\u03ff]")
_ARABIC = re.compile("[\u0600-\u06ff]")

# A word: letters and digits, with the letters after an apostrophe ("don't", "Amazon's").
TOKEN = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")

_STOPWORDS = {
    "en": """a about above after again against all also am an and any are as at be because been
        before being below between both but by can could did do does doing down during each
        either few for from further had has have having he her here hers herself him himself
        his how i if in into is it its itself just me more most my myself now of off on once
        only or other our ours ourselves out over own same she should so some such than that
        the their theirs them themselves then there these they this those through to too under
        until up very was we were what when where which while who whom why will with would
        you your yours yourself yourselves per via according ll ve re d s t m""",
    "de": """der die das den dem des ein eine einer eines einem einen und oder aber ist sind war
        waren wird werden wurde auch auf aus bei mit nach von vor zu zum zur im in an am als wie
        was wer wo es er sie wir ihr ich du man sich dass daß so noch nur schon für über unter
        um hat haben hatte""",
    "fr": """le la les un une des du de d l et ou mais est sont était été sera au aux ce cet
        cette ces il elle ils elles nous vous je tu on se sa son ses leur leurs qui que qu dans
        en par pour sur avec plus a ont""",
    "es": """el la los las un una unos unas y o pero es son era fue ser del de al en por para con
        que se su sus lo le les como más este esta estos estas ha han""",
    "ru": """и в во что он на я с со как а то все она так его но да ты к у же вы за бы по только
        ее мне было вот от меня еще о из ему теперь когда даже ну вдруг ли если уже или быть
        был него до вас нибудь опять уж вам ведь там потом себя ей может они тут где есть надо
        ней для мы тебя их чем была сам чтоб будто чего раз тоже себе под будет ж тогда кто
        этот того потому этого какой совсем ним здесь этом один почти мой тем чтобы нее""",
}
STOPWORDS = {lang: frozenset(words.split()) for lang, words in _STOPWORDS.items()}

# Words that negate what they stand in. English contractions end in "n't".
_NEGATIONS = {
    "en": "not no never none nobody nothing neither nor cannot without nowhere",
    "de": "nicht kein keine keinen keinem keiner keines nie niemals ohne nichts",
    "fr": "ne n pas jamais aucun aucune sans rien",
    "es": "no nunca ningún ninguna ninguno sin nada tampoco",
    "it": "non mai nessun nessuno nessuna senza",
    "pt": "não nunca nenhum nenhuma sem",
    "nl": "niet geen nooit zonder",
    "ru": "не нет никогда без ни ничего",
}
NEGATIONS = {lang: frozenset(words.split()) for lang, words in _NEGATIONS.items()}
CJK_NEGATIONS = ("不", "没", "沒", "无", "無", "未", "非", "别", "否", "ない", "ません")

_SNOWBALL = {
    "en": "english",
    "de": "german",
    "fr": "french",
    "es": "spanish",
    "it": "italian",
    "pt": "portuguese",
    "nl": "dutch",
    "ru": "russian",
    "sv": "swedish",
    "da": "danish",
    "no": "norwegian",
    "nb": "norwegian",
    "fi": "finnish",
    "hu": "hungarian",
    "ro": "romanian",
    "tr": "turkish",
    "el": "greek",
    "ar": "arabic",
}
_GUESSABLE = ("en", "de", "fr", "es")
_local = threading.local()  # a Stemmer object is not to be shared between threads


@lru_cache(maxsize=512)
def guess_language(text: str) -> str:
    """The language of ``text`` as an ISO 639-1 code, from its script and common words: good
    enough to choose a stemmer and stop words; English when nothing says otherwise."""
    if _KANA.search(text):
        return "ja"
    if _HANGUL.search(text):
        return "ko"
    if CJK_RUN.search(text):
        return "zh"
    if _CYRILLIC.search(text):
        return "ru"
    if _GREEK.search(text):
        return "el"
    if _ARABIC.search(text):
        return "ar"
    words = set(TOKEN.findall(text[:2000].lower()))
    best, best_count = "en", 0
    for lang in _GUESSABLE:
        count = len(STOPWORDS[lang] & words)  # the distinct common words of each language
        if count > best_count:
            best, best_count = lang, count
    return best


def base_language(language: str) -> str:
    """``pt-BR`` -> ``pt``."""
    return language.replace("_", "-").split("-")[0].lower()


def stopwords(language: str) -> frozenset[str]:
    return STOPWORDS.get(language, STOPWORDS["en"])


def negations(language: str) -> frozenset[str]:
    return NEGATIONS.get(language, NEGATIONS["en"])


def stemmer(language: str) -> Stemmer.Stemmer | None:
    """This thread's Snowball stemmer for the language, or None when there is none."""
    name = _SNOWBALL.get(language)
    if name is None or name not in _algorithms():
        return None
    stemmers: dict[str, Stemmer.Stemmer] = _local.__dict__.setdefault("stemmers", {})
    found = stemmers.get(name)
    if found is None:
        found = stemmers[name] = Stemmer.Stemmer(name)
    return found


@lru_cache(maxsize=1)
def _algorithms() -> frozenset[str]:
    return frozenset(Stemmer.algorithms())

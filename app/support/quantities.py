"""Numbers, amounts, percentages, units and dates found in a text, normalised so that two
spellings of one quantity compare equal: "$575B" and "575 billion dollars", "12%" and "12
percent", "1,234.5" and "1.234,5", "March 5, 2024" and "2024-03-05". Pure functions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_SIGNS = {"$": "USD", "us$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY", "₹": "INR", "₩": "KRW"}
_CURRENCY_WORDS = {
    **dict.fromkeys(("usd", "dollar", "dollars", "dólares", "dollari"), "USD"),
    **dict.fromkeys(("eur", "euro", "euros", "евро"), "EUR"),
    **dict.fromkeys(("gbp", "sterling"), "GBP"),
    **dict.fromkeys(("jpy", "yen"), "JPY"),
    **dict.fromkeys(("inr", "rupees", "rupee"), "INR"),
    **dict.fromkeys(("рублей", "рубля", "рубль", "rub"), "RUB"),
}
_SCALES = {
    **dict.fromkeys(("thousand", "thousands", "tausend", "mille", "mil", "тысяч", "тыс"), 1e3),
    **dict.fromkeys(
        ("million", "millions", "mn", "mln", "mio", "millionen", "millones", "milioni", "млн"),
        1e6,
    ),
    **dict.fromkeys(
        ("billion", "billions", "bn", "bln", "mrd", "milliarde", "milliarden", "milliard"), 1e9
    ),
    **dict.fromkeys(("milliards", "млрд"), 1e9),
    **dict.fromkeys(("trillion", "trillions", "tn", "trn", "billionen", "трлн"), 1e12),
}
# A letter right after a number ("$5M", "575B", "10K"), read as a scale only in upper case or
# after a currency sign ("5m" alone is five metres).
_LETTER_SCALES = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
_PERCENT = frozenset(("%", "percent", "pct", "prozent", "процентов", "процента", "процент"))
# Spellings of several words, read as one ("12 per cent" is "12 percent").
_PHRASES = re.compile(
    r"\b(?:(?P<pct>per cent|pour cent|por ciento|per cento|por cento)|"
    r"(?P<pp>percentage points?|prozentpunkte))\b",
    re.IGNORECASE,
)


def _phrase(match: re.Match[str]) -> str:
    return "percent" if match["pct"] else "pp"


def normalised(text: str) -> str:
    """The text with the spellings of several words made one: what ``quantities`` and ``dates``
    read."""
    lower = text.lower()
    if "cent" not in lower and "percentage" not in lower and "prozentp" not in lower:
        return text
    return _PHRASES.sub(_phrase, text)


_UNITS = {
    "km": ("km", "kilometer", "kilometers", "kilometre", "kilometres", "км"),
    "m": ("m", "meter", "meters", "metre", "metres", "м"),
    "cm": ("cm", "centimeter", "centimeters", "centimetre", "centimetres"),
    "mm": ("mm", "millimeter", "millimeters", "millimetre", "millimetres"),
    "mi": ("mi", "mile", "miles"),
    "ft": ("ft", "foot", "feet"),
    "in": ("inch", "inches"),
    "kg": ("kg", "kilogram", "kilograms", "kilo", "kilos", "кг"),
    "g": ("g", "gram", "grams", "gramme", "grammes"),
    "t": ("tonne", "tonnes", "ton", "tons"),
    "lb": ("lb", "lbs", "pound", "pounds"),
    "l": ("l", "liter", "liters", "litre", "litres"),
    "ml": ("ml", "milliliter", "milliliters", "millilitre", "millilitres"),
    "km/h": ("km/h", "kph", "kmh"),
    "mph": ("mph",),
    "m/s": ("m/s",),
    "ms": ("ms", "millisecond", "milliseconds"),
    "s": ("s", "sec", "secs", "second", "seconds", "sekunden"),
    "min": ("min", "mins", "minute", "minutes", "minuten"),
    "h": ("h", "hr", "hrs", "hour", "hours", "stunden", "heures", "horas", "часов", "часа"),
    "day": ("day", "days", "tage", "tagen", "jours", "días", "дней", "дня"),
    "week": ("week", "weeks", "wochen", "semaines", "semanas"),
    "month": ("month", "months", "monate", "monaten", "mois", "meses", "месяцев", "месяца"),
    "year": ("year", "years", "jahre", "jahren", "ans", "années", "años", "лет", "года"),
    "b": ("byte", "bytes"),
    "kb": ("kb", "kilobyte", "kilobytes"),
    "mb": ("mb", "megabyte", "megabytes"),
    "gb": ("gb", "gigabyte", "gigabytes"),
    "tb": ("tb", "terabyte", "terabytes"),
    "w": ("w", "watt", "watts"),
    "kw": ("kw", "kilowatt", "kilowatts"),
    "kwh": ("kwh",),
    "mw": ("mw", "megawatt", "megawatts"),
    "hz": ("hz", "hertz"),
    "ghz": ("ghz", "gigahertz"),
    "°c": ("°c", "celsius"),
    "°f": ("°f", "fahrenheit"),
    "pp": ("pp",),
}
_UNIT_OF = {spelling: unit for unit, spellings in _UNITS.items() for spelling in spellings}
# The words that only say what a number is: they are compared with their numbers, not as
# content words ("12 percent" is "12%", "$575B" is "575 billion dollars").
QUANTITY_WORDS = frozenset(
    word
    for word in (*_SCALES, *_PERCENT, *_CURRENCY_WORDS, *_UNIT_OF, "percent", "per", "cent")
    if word.isalpha() and len(word) > 1
)
_NUMBER_WORDS = {
    word: float(value)
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
} | {"thirty": 30.0, "forty": 40.0, "fifty": 50.0, "hundred": 100.0, "dozen": 12.0}

# A number: digits grouped by thousands (",", ".", "'", a no-break or thin space), then maybe
# a decimal part; or plain digits with maybe a decimal part.
_NUMBER = re.compile(
    r"(?<![\w.,])(?P<num>\d{1,3}(?:(?P<sep>[,.'’\u00a0\u202f\u2009])\d{3})(?:(?P=sep)\d{3})*"
    r"(?:[.,]\d+)?|\d+(?:[.,]\d+)?)(?![.,]?\d)"
)
_SIGN_BEFORE = re.compile(r"(?:us\$|[$€£¥₹₩])\s?$", re.IGNORECASE)
_AFTER = re.compile(r"[ \u00a0\u202f]?(?P<word>%|°[cf]|km/h|m/s|[^\W\d_]+)", re.IGNORECASE)
_NUMBER_WORD = re.compile(r"\b(" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)

_MONTHS = {
    **dict.fromkeys(("january", "jan", "januar", "janvier", "enero", "jänner"), 1),
    **dict.fromkeys(("february", "feb", "februar", "février", "fevrier", "febrero"), 2),
    **dict.fromkeys(("march", "mar", "märz", "maerz", "mars", "marzo"), 3),
    **dict.fromkeys(("april", "apr", "avril", "abril"), 4),
    **dict.fromkeys(("may", "mai", "mayo"), 5),
    **dict.fromkeys(("june", "jun", "juni", "juin", "junio"), 6),
    **dict.fromkeys(("july", "jul", "juli", "juillet", "julio"), 7),
    **dict.fromkeys(("august", "aug", "août", "aout", "agosto"), 8),
    **dict.fromkeys(("september", "sep", "sept", "septembre", "septiembre"), 9),
    **dict.fromkeys(("october", "oct", "oktober", "octobre", "octubre"), 10),
    **dict.fromkeys(("november", "nov", "novembre", "noviembre"), 11),
    **dict.fromkeys(("december", "dec", "dezember", "décembre", "decembre", "diciembre"), 12),
}
MONTH_NAMES = frozenset(_MONTHS)
_MONTH = "(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th|er|\.)?"
_YEAR = r"(?P<year>[12]\d{3})"
_DATES = [
    re.compile(rf"\b{_YEAR}-(?P<m>[01]?\d)-(?P<d>[0-3]?\d)\b"),  # ISO
    re.compile(rf"\b{_DAY}\s+(?:of\s+|de\s+)?{_MONTH}(?:,?\s+(?:de\s+)?{_YEAR})?\b", re.I),
    re.compile(rf"\b{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?\b", re.I),
    re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I),
    re.compile(r"\b(?P<a>[0-3]?\d)[/.](?P<b>[0-3]?\d)[/.](?P<y>\d{4}|\d{2})\b"),  # numeric
]

_NUMERIC_DATES = (_DATES[0], _DATES[4])
_DIGIT = re.compile(r"\d")
_WORD = re.compile(r"[^\W\d_]+")

DateParts = tuple[int | None, int | None, int | None]  # year, month, day


@dataclass(frozen=True, slots=True)
class Quantity:
    """A number as written (``text``) and what it may mean: its values (two when the
    separator is ambiguous, "1,234"), the place of its last digit (for rounding), its kind (a
    currency code, ``%``, a unit, or None) and the number before any scale word."""

    text: str
    values: tuple[float, ...]
    # The place of each value's last digit: a figure rounded there is within half of it.
    precisions: tuple[float, ...]
    kind: str | None
    mantissa: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Date:
    text: str
    readings: tuple[DateParts, ...]


def _readings(number: str, separator: str | None) -> list[tuple[float, int]]:
    """The values a written number may have, each with its count of decimal places."""
    if separator in (",", ".") and "," in number and "." in number:  # "1,234.5", "1.234,5"
        whole, decimals = number.replace(separator, "").replace(",", ".").split(".")
        return [(float(f"{whole}.{decimals}"), len(decimals))]
    if separator is not None:
        plain = number.replace(separator, "")
        readings = [(float(plain.replace(",", ".")), _places(plain))]
        if separator in (",", ".") and number.count(separator) == 1:
            # "1,234": a thousand and more, or (a decimal comma or point) one and a bit
            readings.append((float(number.replace(",", ".")), 3))
        return readings
    return [(float(number.replace(",", ".")), _places(number))]


def _places(number: str) -> int:
    parts = number.replace(",", ".").split(".")
    return len(parts[1]) if len(parts) == 2 else 0


@lru_cache(maxsize=512)
def quantities(text: str, *, number_words: bool = True) -> tuple[Quantity, ...]:
    """Every number of ``text`` with what follows it (a scale, a currency, a percent sign, a
    unit). ``number_words``: also "twelve percent", and a number word alone ("one"); else only
    number words followed by what makes them a quantity."""
    found: list[Quantity] = []
    for match in _NUMBER.finditer(text):
        start = match.start()
        sign = _SIGN_BEFORE.search(text, max(0, start - 4), start)
        currency = None
        if sign is not None:
            currency = _SIGNS[sign.group().strip().lower()]
            start = sign.start()
        readings = _readings(match["num"], match["sep"])
        scale, kind, end = _suffix(text, match.end(), currency, attached=True)
        found.append(_quantity(text[start:end].strip(), readings, scale, kind))
    if _NUMBER_WORDS.keys().isdisjoint(_WORD.findall(text.lower())):
        return tuple(found)
    for match in _NUMBER_WORD.finditer(text):
        scale, kind, end = _suffix(text, match.end(), None, attached=False)
        if not number_words and scale == 1 and kind is None:
            continue
        value = _NUMBER_WORDS[match[1].lower()]
        found.append(_quantity(text[match.start() : end], [(value, 0)], scale, kind))
    return tuple(found)


def _suffix(
    text: str, end: int, currency: str | None, *, attached: bool
) -> tuple[float, str | None, int]:
    """The scale and kind that follow a number at ``end``, and where they end."""
    scale, kind = 1.0, currency
    for _ in range(2):
        after = _AFTER.match(text, end)
        if after is None:
            break
        word = after["word"]
        lower = word.lower()
        glued = after.start("word") == end
        if scale == 1 and kind == currency and lower in _SCALES:
            scale = _SCALES[lower]
        elif (
            scale == 1
            and kind == currency
            and lower in _LETTER_SCALES
            and glued
            and attached
            and (currency is not None or word.isupper())
        ):
            scale = _LETTER_SCALES[lower]
        elif kind in (None, currency) and lower in _PERCENT:
            kind = "%"
        elif kind in (None, currency) and lower in _CURRENCY_WORDS:
            kind = _CURRENCY_WORDS[lower]
        elif kind is None and lower in _UNIT_OF and (glued or len(lower) > 1):
            kind = _UNIT_OF[lower]
        else:
            break
        end = after.end()
    return scale, kind, end


def _quantity(
    text: str, readings: list[tuple[float, int]], scale: float, kind: str | None
) -> Quantity:
    return Quantity(
        text=text,
        values=tuple(value * scale for value, _ in readings),
        precisions=tuple(scale * 10.0**-places for _, places in readings),
        kind=kind,
        mantissa=tuple(value for value, _ in readings),
    )


@lru_cache(maxsize=512)
def dates(text: str) -> tuple[tuple[Date, tuple[int, int]], ...]:
    """Every date of ``text``, with where it stands; overlapping spellings give one date."""
    found: list[tuple[Date, tuple[int, int]]] = []
    taken: list[tuple[int, int]] = []
    if not _DIGIT.search(text):
        return ()
    named = not MONTH_NAMES.isdisjoint(_WORD.findall(text.lower()))
    for pattern in _DATES if named else _NUMERIC_DATES:
        for match in pattern.finditer(text):
            span = match.span()
            if any(start < span[1] and span[0] < end for start, end in taken):
                continue
            readings = _date_readings(match)
            if readings:
                taken.append(span)
                found.append((Date(match.group(), tuple(readings)), span))
    return tuple(found)


def _date_readings(match: re.Match[str]) -> list[DateParts]:
    groups = match.groupdict()
    if "a" in groups:  # 05/03/2024: day first or month first
        a, b, y = int(groups["a"]), int(groups["b"]), int(groups["y"])
        year = y + 2000 if y < 100 else y
        readings: list[DateParts] = []
        for day, month in ((a, b), (b, a)):
            if 1 <= month <= 12 and 1 <= day <= 31 and (year, month, day) not in readings:
                readings.append((year, month, day))
        return readings
    if "m" in groups:
        month, day = int(groups["m"]), int(groups["d"])
        return [(int(groups["year"]), month, day)] if 1 <= month <= 12 else []
    named = _MONTHS[groups["month"].lower()]
    given_year = int(groups["year"]) if groups.get("year") else None
    given_day = int(groups["day"]) if groups.get("day") else None
    if given_day is not None and not 1 <= given_day <= 31:
        return []
    if groups["month"].lower() == "may" and given_day is None and given_year is None:
        return []  # the verb
    return [(given_year, named, given_day)]


def same_date(claimed: Date, cited: Date) -> bool:
    """Whether some reading of the cited date has every part the claimed one gives."""
    return any(
        all(part is None or part == other for part, other in zip(claim, source, strict=True))
        for claim in claimed.readings
        for source in cited.readings
    )


def same_value(claimed: Quantity, cited: Quantity) -> bool:
    """Whether the cited figure is the claimed one, or rounds to it ("$575B" of
    "$574.8 billion")."""
    return any(
        value == other or abs(value - other) <= precision / 2 * (1 + 1e-9)
        for value, precision in zip(claimed.values, claimed.precisions, strict=True)
        for other in cited.values
    )


def same_kind(claimed: Quantity, cited: Quantity) -> bool:
    """Kinds agree when they are equal or one of the two says none ("575 billion" of
    "$575B")."""
    return claimed.kind is None or cited.kind is None or claimed.kind == cited.kind

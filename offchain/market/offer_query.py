"""The offer search language, and why a search found nothing.

A query is whitespace-separated terms `FIELD OP VALUE` (all must hold) and at most one
`sort=KEY,-KEY` (`-` for descending; cheapest first, then the best delivered record, when no
sort is given), e.g.

    gpu_model=RTX_4090 vram>=24GiB gpus>=2 price<=2ADA/h cpu>=8 memory>=64GiB sort=price,-vram

| field     | offer attribute  | value                                                         |
|-----------|------------------|---------------------------------------------------------------|
| gpu_model | gpu_model        | words, `_` for a space, any case; the model's name must end   |
|           |                  | with them (RTX_4090: "NVIDIA GeForce RTX 4090", not "RTX 4090 |
|           |                  | Ti"); `*` matches anything (`*H100*`, two at most). = and !=. |
| provider  | provider_id      | the provider's key hash, same rules (`ab12*` for a prefix)    |
| gpus      | gpu_count        | a whole number                                                |
| cpu       | cpu_cores        | a whole number                                                |
| vram      | vram_mib (/GPU)  | a size: 24GiB, 1.5GiB, 512MiB, 1TiB (a unit is required)      |
| memory    | memory_mib       | a size                                                        |
| disk      | disk_mib         | a size                                                        |
| price     | price_per_unit   | lovelace or ADA per s, min or h: 2ADA/h, 500lovelace (per s)  |
| gpu_memory| gpu_memory_mib   | a size: a GPU slice's memory (whole GPUs have none)           |
| gpu_sm    | gpu_sm_percent   | a whole percent, 25 or 25%: a GPU slice's share of the SMs    |
| delivered | delivered_percent| a whole percent: of the provider's jobs that ran or should    |
|           |                  | have, those delivered (`reputation`); -1 before its first     |

A query naming gpu_memory or gpu_sm searches the offers' GPU slices (`gpu_slices`: fractions
of a GPU rented beside the operator's work), each a record of its own with its price, beside
the whole bundles (which have no slice: 0); other queries search the whole bundles only.

Operators: = != < <= > >=. Numbers are decimal (no exponent) and converted exactly with integer
arithmetic: a size must come to whole MiB and an amount to whole lovelace. A price rate compares
exactly without dividing: `price<=2ADA/h` holds when price_per_unit * 3600 <= 2_000_000. A term
that cannot be read raises QueryError naming it, never silently dropped.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import Any

from offchain.market.errors import Invalid
from offchain.protocol.checks.acceptance import asks, price_refusal
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.ledger.amounts import ADA

TEXT_OPS = ("=", "!=")
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt,
    "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}  # fmt: skip
TERM = re.compile(r"(?P<field>[A-Za-z_][A-Za-z0-9_]*)(?P<op>[<>=!~]+)(?P<value>.*)", re.DOTALL)
NUMBER = r"(?P<number>\d{1,30}(?:\.\d{1,30})?)"
SIZE = re.compile(NUMBER + r"(?P<unit>MiB|GiB|TiB)", re.IGNORECASE | re.ASCII)
PRICE = re.compile(
    NUMBER + r"(?P<unit>lovelace|ADA)(?:/(?P<per>s|min|h))?", re.IGNORECASE | re.ASCII
)
SIZE_UNITS = {"mib": ("MiB", 1), "gib": ("GiB", 1024), "tib": ("TiB", 1024 * 1024)}
AMOUNT_UNITS = {"lovelace": ("lovelace", 1), "ada": ("ADA", ADA)}
SECONDS_PER = {"s": 1, "min": 60, "h": 3600}
DEFAULT_SORT = (("price", False), ("delivered", True))  # at equal price, the better record
# a job's resources: (query field, spec field, the unit its query term is written in)
JOB_RESOURCES = (("gpus", "gpus", ""), ("vram", "min_vram_mib", "MiB"), ("cpu", "cpu_cores", ""),
                 ("memory", "memory_mib", "MiB"), ("disk", "disk_mib", "MiB"),
                 ("gpu_memory", "gpu_memory_mib", "MiB"),
                 ("gpu_sm", "gpu_sm_percent", "%"))  # fmt: skip
SLICE_FIELDS = ("gpu_memory", "gpu_sm")  # a query naming one searches the offers' GPU slices
MAX_WILDCARDS = 2


class QueryError(Invalid):
    """A term of the query that cannot be read; `term` is the term as written."""

    def __init__(self, message: str, term: str) -> None:
        super().__init__(message, "query")
        self.term = term


@dataclasses.dataclass(frozen=True)
class OfferRecord:
    """What a search sees of an offer (the attributes mirror the Offer table); `online` is the
    market's verdict (fresh heartbeat, bond counted, a slot free) and `away` says why not
    (counted by reason when nothing matched)."""

    provider_id: str
    gpu_model: str
    gpu_count: int
    vram_mib: int
    cpu_cores: int
    memory_mib: int
    disk_mib: int
    price_per_unit: int
    online: bool = True
    away: str = "offline"
    id: int | None = None
    # a GPU slice of the offer (`gpu_slices`), searched as a record of its own: its memory,
    # its share of the SMs and how it is held (0, 0, "" for the offer's whole bundle)
    gpu_memory_mib: int = 0
    gpu_sm_percent: int = 0
    isolation: str = ""
    delivered_percent: int = -1  # the provider's record (`reputation`); -1 before its first


@dataclasses.dataclass(frozen=True)
class Unit:
    """How a number was written: `label` per `factor` base units (MiB, lovelace), over `scale`
    seconds for a price rate. Comparing `value * scale` with the bound keeps it all integer."""

    label: str = ""
    factor: int = 1
    scale: int = 1

    def render(self, value: int) -> str:
        """An offer's value in the unit the user wrote (exact: 1000 MiB is 0.9765625GiB)."""
        return decimal_text(Fraction(value * self.scale, self.factor)) + self.label


def decimal_text(value: Fraction) -> str:
    """A fraction whose denominator has only 2s and 5s, written out exactly in decimal."""
    digits, scaled = 0, value
    while scaled.denominator != 1:
        digits, scaled = digits + 1, scaled * 10
    text = str(int(scaled)).rjust(digits + 1, "0")
    return f"{text[:-digits]}.{text[-digits:]}" if digits else text


def whole(number: str, factor: int, base: str, term: str) -> int:
    """`number` (decimal text) times `factor`, exactly, refused unless whole."""
    value = Fraction(number) * factor
    if value.denominator != 1:
        raise QueryError(f"{term!r} is not a whole number of {base}", term)
    return int(value)


def parse_count(value: str, term: str) -> tuple[int, Unit]:
    if not value.isascii() or not value.isdigit():
        raise QueryError(f"{term!r}: give a whole number, e.g. 2", term)
    return int(value), Unit()


def parse_percent(value: str, term: str) -> tuple[int, Unit]:
    return parse_count(value.removesuffix("%"), term)[0], Unit("%")


def parse_size(value: str, term: str) -> tuple[int, Unit]:
    found = SIZE.fullmatch(value)
    if found is None:
        raise QueryError(f"{term!r}: give a size with its unit, MiB, GiB or TiB (e.g. 24GiB)", term)
    label, factor = SIZE_UNITS[found["unit"].lower()]
    return whole(found["number"], factor, "MiB", term), Unit(label, factor)


def parse_price(value: str, term: str) -> tuple[int, Unit]:
    found = PRICE.fullmatch(value)
    if found is None:
        raise QueryError(
            f"{term!r}: give a price in lovelace or ADA, per s (the default), min or h "
            "(e.g. 2ADA/h, 500lovelace)",
            term,
        )
    amount, factor = AMOUNT_UNITS[found["unit"].lower()]
    per = (found["per"] or "s").lower()
    unit = Unit(f"{amount}/{per}", factor, SECONDS_PER[per])
    return whole(found["number"], factor, "lovelace", term), unit


@dataclasses.dataclass(frozen=True)
class Field:
    """A searchable field: its name in queries, the offer attribute, how its values read."""

    name: str
    attr: str
    parse: Callable[[str, str], tuple[int, Unit]] | None  # None: a text field


FIELDS = {
    field.name: field
    for field in (
        Field("gpu_model", "gpu_model", None),
        Field("provider", "provider_id", None),
        Field("gpus", "gpu_count", parse_count),
        Field("cpu", "cpu_cores", parse_count),
        Field("vram", "vram_mib", parse_size),
        Field("memory", "memory_mib", parse_size),
        Field("disk", "disk_mib", parse_size),
        Field("price", "price_per_unit", parse_price),
        Field("gpu_memory", "gpu_memory_mib", parse_size),
        Field("gpu_sm", "gpu_sm_percent", parse_percent),
        Field("delivered", "delivered_percent", parse_percent),
    )
}


def words(text: str) -> str:
    """A name as compared: any case, `_` and runs of spaces as one space."""
    return " ".join(text.replace("_", " ").casefold().split())


@dataclasses.dataclass(frozen=True)
class Constraint:
    """One term: `field op bound`; a text field's bound is a pattern, a number's an integer
    in base units times the unit's scale."""

    term: str
    field: Field
    op: str
    bound: int | re.Pattern[str]
    unit: Unit
    # a job's term says why no offer meets it in the renter's words, given the nearest value
    # and which offers were searched ("of the 3 online offers"): `acceptance`'s wording
    says: Callable[[int, str], str] | None = None

    def holds(self, offer: OfferRecord) -> bool:
        value = getattr(offer, self.field.attr)
        if isinstance(self.bound, re.Pattern):
            named = self.bound.fullmatch(words(value)) is not None
            return named if self.op == "=" else not named
        return OPS[self.op](value * self.unit.scale, self.bound)

    def closest(self, offers: Sequence[OfferRecord]) -> str | None:
        """Of `offers`, none of which holds, the value nearest to holding, as the user wrote
        it; None where "nearest" means nothing (text, = and !=)."""
        nearest = self.nearest(offers)
        return None if nearest is None else self.unit.render(nearest)

    def nearest(self, offers: Sequence[OfferRecord]) -> int | None:
        """Of `offers`, none of which holds, the value nearest to holding (base units)."""
        pick = {"<": min, "<=": min, ">": max, ">=": max}.get(self.op)
        if pick is None or not offers:
            return None
        return pick(getattr(offer, self.field.attr) for offer in offers)

    def explain(self, offers: Sequence[OfferRecord], among: str) -> str | None:
        """Why none of `offers` (`among` says which they are) meets a job's term, in the
        renter's words; None for a term that has no such words."""
        nearest = self.nearest(offers)
        return None if self.says is None or nearest is None else self.says(nearest, among)


def text_pattern(value: str) -> re.Pattern[str]:
    """The words must end the name (after a space or from its start); `*` is anything."""
    parts = (re.escape(part) for part in words(value).split("*"))
    return re.compile(r"(?:.* )?" + ".*".join(parts))


def split_term(term: str) -> tuple[str, str, str]:
    """A term's field name (any case), operator and value."""
    found = TERM.fullmatch(term)
    if found is None:
        raise QueryError(f"{term!r} is not FIELD OP VALUE (e.g. vram>=24GiB)", term)
    return found["field"].lower(), found["op"], found["value"]


def parse_term(term: str, name: str, op: str, value: str) -> Constraint:
    field = FIELDS.get(name)
    if field is None:
        raise QueryError(f"unknown field {name!r} in {term!r}: one of {', '.join(FIELDS)}", term)
    if op not in OPS:
        raise QueryError(f"unknown operator {op!r} in {term!r}: one of {' '.join(OPS)}", term)
    if not value:
        raise QueryError(f"{term!r} has no value", term)
    if field.parse is None:
        if op not in TEXT_OPS:
            raise QueryError(f"{term!r}: {name} takes = or != only", term)
        if value.count("*") > MAX_WILDCARDS:  # each one multiplies the regex's backtracking
            raise QueryError(f"{term!r}: at most {MAX_WILDCARDS} * (e.g. *H100*)", term)
        return Constraint(term, field, op, text_pattern(value), Unit())
    number, unit = field.parse(value, term)
    return Constraint(term, field, op, number, unit)


def parse_sort(term: str, value: str) -> tuple[tuple[str, bool], ...]:
    """`price,-vram` as (field name, descending) pairs."""
    keys = tuple((key.removeprefix("-").lower(), key.startswith("-")) for key in value.split(","))
    for name, _ in keys:
        if name not in FIELDS:
            raise QueryError(
                f"unknown sort key {name!r} in {term!r}: one of {', '.join(FIELDS)}", term
            )
    repeated = [name for name, count in Counter(name for name, _ in keys).items() if count > 1]
    if repeated:
        raise QueryError(f"{term!r} sorts by {repeated[0]} twice", term)
    return keys


@dataclasses.dataclass(frozen=True)
class Search:
    """What a search found: the matching online offers (sorted), and the counts that say why
    when there are none."""

    offers: tuple[OfferRecord, ...]
    total: int
    offline: int
    funnel: tuple[tuple[str, int], ...]  # online offers left after each term, in query order
    _alone: Callable[[], tuple[tuple[str, int], ...]] = dataclasses.field(repr=False, compare=False)
    closest: str | None  # at the term that left none, the nearest value an offer has
    away: tuple[tuple[str, int], ...] = ()  # offers not online, counted by why
    explained: str | None = None  # a job's term that left none, in the renter's words

    @functools.cached_property
    def alone(self) -> tuple[tuple[str, int], ...]:
        """Online offers that meet each term by itself: counted when first asked for, not on
        every quote (each term again over every online offer)."""
        return self._alone()

    def why_none(self) -> str | None:
        """None when something matched; else the reason, counted per term, e.g. "3 of 3
        online offers have vram>=24GiB, none of those has price<=2ADA/h (the closest:
        3ADA/h); 1 offline, 1 busy"."""
        if self.offers:
            return None
        if not self.total:
            return "no offers yet"
        online = self.total - self.offline
        away = ", ".join(f"{count} {why}" for why, count in self.away)
        if not online:
            if self.away == (("offline", self.total),):
                return f"all {self.total} offers are offline"
            return f"none of the {self.total} offers can take a job now: {away}"
        steps = []
        for index, (term, left) in enumerate(self.funnel):
            among = f"of the {online} online offers" if index == 0 else "of those"
            verb = "has" if left == 1 else "have"
            steps.append(f"{left} {among} {verb} {term}" if left else f"none {among} has {term}")
        if self.explained is not None:
            steps[-1] = self.explained
        elif self.closest is not None:
            steps[-1] += f" (the closest: {self.closest})"
        return ", ".join(steps) + (f"; {away}" if away else "")


@dataclasses.dataclass(frozen=True)
class OfferQuery:
    """A parsed query: every constraint must hold, results in `sort` order."""

    constraints: tuple[Constraint, ...] = ()
    sort: tuple[tuple[str, bool], ...] = DEFAULT_SORT

    @property
    def slices(self) -> bool:
        """Whether it searches the offers' GPU slices (a term names one of SLICE_FIELDS)."""
        return any(c.field.name in SLICE_FIELDS for c in self.constraints)

    @classmethod
    def for_job(
        cls, spec: JobSpec, gpu_model: str | None = None, min_delivered: int | None = None
    ) -> OfferQuery:
        """The offers that can take `spec`: its bundle (each resource it asks for), at a price
        whose whole run stays within its max price, only `gpu_model` (the whole name, any
        case) and only providers that delivered at least `min_delivered` percent when given.
        Cheapest first, then the best record."""
        wanted = spec.resources
        asked = [
            _at_least(name, getattr(wanted, resource), Unit(unit), resource)
            for name, resource, unit in JOB_RESOURCES
        ]
        terms = [term for term in asked if term.bound]  # 0 GPUs: any offer has that many
        if gpu_model is not None:
            exact = re.compile(re.escape(words(gpu_model)))
            model = Constraint(f"gpu_model={gpu_model!r}", FIELDS["gpu_model"], "=", exact, Unit())
            terms.insert(0, model)
        run = Unit(f"lovelace/{spec.max_duration_s}s", scale=spec.max_duration_s)
        price = spec.max_price_lovelace  # compared with price_per_unit x the job's longest run
        terms.append(Constraint(
            f"price<={price}{run.label}", FIELDS["price"], "<=", price, run,
            lambda cheapest, among: price_refusal(spec, cheapest, f"the cheapest {among}"),
        ))  # fmt: skip
        if min_delivered is not None:
            terms.append(Constraint(
                f"delivered>={min_delivered}%", FIELDS["delivered"], ">=", min_delivered,
                Unit("%"), lambda best, among: f"the best record {among} is {best}% delivered"
                if best >= 0 else f"no provider {among} has a record yet",
            ))  # fmt: skip
        return cls(tuple(terms))

    @classmethod
    def parse(cls, text: str) -> OfferQuery:
        """The query in `text` (shell-like quoting: gpu_model="NVIDIA GeForce RTX 4090"), or
        the QueryError naming the first term that cannot be read."""
        lexer = shlex.shlex(text, posix=True)
        lexer.whitespace_split, lexer.commenters, lexer.escape = True, "", ""  # \ and # literal
        try:
            terms = list(lexer)
        except ValueError as exc:
            raise QueryError(f"{text!r}: {exc} (close the quote)", text) from exc
        constraints, sort = [], None
        for term in terms:
            name, op, value = split_term(term)
            if name != "sort":
                constraints.append(parse_term(term, name, op, value))
            elif op != "=":
                raise QueryError(f"{term!r}: write sort=KEY,-KEY", term)
            elif sort is not None:
                raise QueryError(f"{term!r}: the query sorts twice", term)
            else:
                sort = parse_sort(term, value)
        return cls(tuple(constraints), sort or cls.sort)

    def search(self, offers: Iterable[OfferRecord]) -> Search:
        """The online offers that meet every constraint, sorted; with the counts behind an
        empty answer."""
        offers = list(offers)
        online = [offer for offer in offers if offer.online]
        left, funnel, closest, explained = online, [], None, None
        for constraint in self.constraints:
            kept = [offer for offer in left if constraint.holds(offer)]
            funnel.append((constraint.term, len(kept)))
            if not kept:
                closest = constraint.closest(left)
                among = "of those" if len(funnel) > 1 else f"of the {len(left)} online offers"
                explained = constraint.explain(left, among)
            left = kept
            if not left:
                break
        away = Counter(offer.away for offer in offers if not offer.online)
        return Search(tuple(self.order(left)), len(offers), away.total(), tuple(funnel),
                      functools.partial(self.alone, online), closest,
                      tuple(away.most_common()), explained)  # fmt: skip

    def alone(self, online: Sequence[OfferRecord]) -> tuple[tuple[str, int], ...]:
        """How many online offers meet each constraint by itself."""
        return tuple((c.term, sum(c.holds(offer) for offer in online)) for c in self.constraints)

    def order(self, offers: Iterable[OfferRecord]) -> list[OfferRecord]:
        """`offers` in this query's order: stable sorts from the last key to the first."""
        ordered = list(offers)
        for name, descending in reversed(self.sort):
            attr = FIELDS[name].attr
            ordered.sort(key=functools.partial(sort_value, attr=attr), reverse=descending)
        return ordered


def _at_least(name: str, bound: int, unit: Unit, resource: str) -> Constraint:
    """`name>=bound` for the spec's `resource`, explained as `acceptance.asks` words it."""
    return Constraint(
        f"{name}>={bound}{unit.label}", FIELDS[name], ">=", bound, unit,
        lambda largest, among: asks(resource, bound, largest, f"the largest {among}"),
    )  # fmt: skip


def sort_value(offer: OfferRecord, attr: str) -> int | str:
    value = getattr(offer, attr)
    return words(value) if isinstance(value, str) else value

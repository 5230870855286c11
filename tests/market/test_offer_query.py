"""The offer search language: exact integer units, every unreadable term named, matching and
sorting as the query says, and why nothing matched counted per term. Property tests check the
parser and the matcher against plain reference computations (Decimal at high precision, direct
comparisons)."""

from __future__ import annotations

import dataclasses
import decimal
import operator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offchain.market.errors import Invalid
from offchain.market.offer_query import OfferQuery, OfferRecord, QueryError
from offchain.protocol.job.jobspec import JobSpec, Resources

EXAMPLE = (
    "gpu_model=RTX_4090 vram>=24GiB gpus>=2 price<=2ADA/h cpu>=8 memory>=64GiB disk>=100GiB "
    "sort=price,-vram"
)
MODELS = ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090 Ti", "NVIDIA H100 80GB HBM3",
          "RTX 4090", "NVIDIA A100-SXM4-40GB")  # fmt: skip
OPS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt,
       "<=": operator.le, ">": operator.gt, ">=": operator.ge}  # fmt: skip
NUMERIC = {"gpus": "gpu_count", "cpu": "cpu_cores", "vram": "vram_mib",
           "memory": "memory_mib", "disk": "disk_mib", "price": "price_per_unit"}  # fmt: skip
BASE_UNIT = {"gpus": "", "cpu": "", "vram": "MiB", "memory": "MiB", "disk": "MiB",
             "price": "lovelace/s"}  # fmt: skip


def offer(**changes) -> OfferRecord:
    fields = dict(provider_id="ab12" * 14, gpu_model="NVIDIA GeForce RTX 4090", gpu_count=2,
                  vram_mib=24 * 1024, cpu_cores=16, memory_mib=128 * 1024,
                  disk_mib=500 * 1024, price_per_unit=500)  # fmt: skip
    return OfferRecord(**{**fields, **changes})


def bounds(text: str) -> list[tuple[str, str, int, int]]:
    """(field, op, bound, scale) of each numeric constraint."""
    query = OfferQuery.parse(text)
    return [(c.field.name, c.op, c.bound, c.unit.scale) for c in query.constraints
            if isinstance(c.bound, int)]  # fmt: skip


def names(found) -> list[str]:
    return [o.provider_id for o in found.offers]


def test_the_issues_example_reads_to_exact_integer_bounds():
    query = OfferQuery.parse(EXAMPLE)
    assert bounds(EXAMPLE) == [
        ("vram", ">=", 24 * 1024, 1), ("gpus", ">=", 2, 1), ("price", "<=", 2_000_000, 3600),
        ("cpu", ">=", 8, 1), ("memory", ">=", 64 * 1024, 1), ("disk", ">=", 100 * 1024, 1),
    ]  # fmt: skip
    assert query.sort == (("price", False), ("vram", True))
    assert query.search([offer()]).offers == (offer(),)


@pytest.mark.parametrize(
    ("term", "bound", "scale"),
    [
        ("vram>=1.5GiB", 1536, 1), ("vram>=512mib", 512, 1), ("disk>=1TiB", 1 << 20, 1),
        ("disk>=0.5tib", 1 << 19, 1), ("memory>=0.0009765625GiB", 1, 1),
        ("price<=500lovelace", 500, 1), ("price<=500lovelace/s", 500, 1),
        ("price<=1.5ADA/min", 1_500_000, 60), ("price<=0.000001ada/h", 1, 3600),
        ("price<=2ADA/h", 2_000_000, 3600), ("gpus=0", 0, 1), ("cpu>007", 7, 1),
    ],
)  # fmt: skip
def test_units_convert_exactly(term, bound, scale):
    assert bounds(term)[0][2:] == (bound, scale)


def test_a_rate_compares_without_dividing():
    # 2 ADA/h is 555.55... lovelace/s: 555 is under it, 556 is not
    query = OfferQuery.parse("price<=2ADA/h")
    assert query.search([offer(price_per_unit=555)]).offers
    assert not query.search([offer(price_per_unit=556)]).offers
    assert OfferQuery.parse("price=1.8ADA/h").search([offer(price_per_unit=500)]).offers


@pytest.mark.parametrize(
    ("term", "models"),
    [
        ("gpu_model=RTX_4090", {"NVIDIA GeForce RTX 4090", "RTX 4090"}),
        ("gpu_model=rtx_4090_ti", {"NVIDIA GeForce RTX 4090 Ti"}),
        ('gpu_model="NVIDIA GeForce RTX 4090"', {"NVIDIA GeForce RTX 4090"}),
        ("gpu_model=*H100*", {"NVIDIA H100 80GB HBM3"}),
        ("gpu_model=4090", {"NVIDIA GeForce RTX 4090", "RTX 4090"}),
        ("gpu_model=TX_4090", set()),
        ("gpu_model!=RTX_4090", set(MODELS) - {"NVIDIA GeForce RTX 4090", "RTX 4090"}),
    ],
)
def test_a_gpu_model_is_named_by_the_words_that_end_it(term, models):
    found = OfferQuery.parse(term).search([offer(gpu_model=model) for model in MODELS])
    assert {o.gpu_model for o in found.offers} == models


def test_providers_by_key_hash_or_prefix():
    offers = [offer(provider_id="ab" * 28), offer(provider_id="cd" * 28)]
    assert names(OfferQuery.parse(f"provider={'AB' * 28}").search(offers)) == ["ab" * 28]
    assert names(OfferQuery.parse("provider=cdcd*").search(offers)) == ["cd" * 28]
    assert names(OfferQuery.parse("provider=cdcd").search(offers)) == []


def test_sorting_by_keys_in_order_cheapest_first_by_default():
    offers = [offer(provider_id="a", price_per_unit=300, vram_mib=100),
              offer(provider_id="b", price_per_unit=100, vram_mib=100),
              offer(provider_id="c", price_per_unit=300, vram_mib=900),
              offer(provider_id="d", price_per_unit=200, gpu_model="a100")]  # fmt: skip
    assert names(OfferQuery.parse("").search(offers)) == ["b", "d", "a", "c"]
    assert names(OfferQuery.parse("sort=price,-vram").search(offers)) == ["b", "d", "c", "a"]
    assert names(OfferQuery.parse("sort=-price,vram").search(offers)) == ["a", "c", "d", "b"]
    assert names(OfferQuery.parse("sort=gpu_model,-price").search(offers)) == ["d", "a", "c", "b"]


@pytest.mark.parametrize(
    ("query", "term", "says"),
    [
        ("vram>=24GiB colour=red", "colour=red", "unknown field 'colour'"),
        ("gpus==2", "gpus==2", "unknown operator '=='"),
        ("gpus=~2", "gpus=~2", "unknown operator"),
        ("vram>=24", "vram>=24", "MiB, GiB or TiB"),
        ("vram>=24GB", "vram>=24GB", "MiB, GiB or TiB"),
        ("vram>=0.1GiB", "vram>=0.1GiB", "whole number of MiB"),
        ("price<=0.0000001ADA", "price<=0.0000001ADA", "whole number of lovelace"),
        ("price<=0.5lovelace/s", "price<=0.5lovelace/s", "whole number of lovelace"),
        ("price<=2ADA/day", "price<=2ADA/day", "lovelace or ADA"),
        ("price<=2", "price<=2", "lovelace or ADA"),
        ("price<=1e3lovelace", "price<=1e3lovelace", "lovelace or ADA"),
        ("price<=-1lovelace", "price<=-1lovelace", "lovelace or ADA"),
        ("gpus>=2.5", "gpus>=2.5", "whole number"),
        ("gpus>=²", "gpus>=²", "whole number"),
        ("cpu>=", "cpu>=", "no value"),
        ("gpu_model<RTX", "gpu_model<RTX", "= or != only"),
        ("RTX_4090", "RTX_4090", "FIELD OP VALUE"),
        (">=2", ">=2", "FIELD OP VALUE"),
        ("sort=price sort=vram", "sort=vram", "sorts twice"),
        ("sort>price", "sort>price", "sort=KEY"),
        ("sort=price,colour", "sort=price,colour", "unknown sort key 'colour'"),
        ("sort=price,,vram", "sort=price,,vram", "unknown sort key ''"),
        ("sort=price,-price", "sort=price,-price", "twice"),
        ('gpu_model="RTX 4090', 'gpu_model="RTX 4090', "quote"),
        ("gpu_model=*a*a*b", "gpu_model=*a*a*b", "at most 2 *"),
    ],
)
def test_an_unreadable_term_is_named(query, term, says):
    with pytest.raises(QueryError) as refusal:
        OfferQuery.parse(query)
    assert refusal.value.term == term
    assert says in str(refusal.value) and term in str(refusal.value)
    assert isinstance(refusal.value, Invalid) and refusal.value.field == "query"  # the API's 422


def test_why_nothing_matched_is_counted_per_term():
    offers = [offer(provider_id=str(i), price_per_unit=834 + i) for i in range(3)]
    offers.append(offer(provider_id="off", price_per_unit=1, online=False))
    found = OfferQuery.parse("vram>=24GiB price<=2ADA/h").search(offers)
    assert found.offers == ()
    assert found.why_none() == (
        "3 of the 3 online offers have vram>=24GiB, none of those has price<=2ADA/h "
        "(the closest: 3.0024ADA/h); 1 offline"
    )
    assert found.funnel == (("vram>=24GiB", 3), ("price<=2ADA/h", 0))
    assert found.alone == (("vram>=24GiB", 3), ("price<=2ADA/h", 0))

    several = OfferQuery.parse("gpus>=2 vram>25GiB cpu>=8 gpu_model=H100").search(offers)
    assert several.why_none() == (
        "3 of the 3 online offers have gpus>=2, none of those has vram>25GiB "
        "(the closest: 24GiB); 1 offline"
    )
    assert several.alone == (("gpus>=2", 3), ("vram>25GiB", 0), ("cpu>=8", 3),
                             ("gpu_model=H100", 0))  # fmt: skip
    assert OfferQuery.parse("gpu_model=H100").search(offers[:1]).why_none() == (
        "none of the 1 online offers has gpu_model=H100"
    )


def test_offers_away_are_counted_by_why():
    offers = [offer(provider_id="a", price_per_unit=900), offer(online=False, away="busy"),
              offer(online=False, away="busy"), offer(online=False)]  # fmt: skip
    found = OfferQuery.parse("price<=2ADA/h").search(offers)
    assert found.offline == 3 and found.away == (("busy", 2), ("offline", 1))
    assert found.why_none() == (
        "none of the 1 online offers has price<=2ADA/h (the closest: 3.24ADA/h); 2 busy, 1 offline"
    )
    assert OfferQuery.parse("").search(offers[1:]).why_none() == (
        "none of the 3 offers can take a job now: 2 busy, 1 offline"
    )


def test_a_job_asks_for_its_bundle_its_model_and_its_whole_run_within_its_max_price():
    spec = JobSpec(image="python:3.11", command=["true"], max_duration_s=600,
                   max_price_lovelace=300_000, resources={"gpus": 2, "min_vram_mib": 20_000,
                   "cpu_cores": 8, "memory_mib": 1024})  # fmt: skip
    query = OfferQuery.for_job(spec, "nvidia_geforce_RTX 4090")
    assert [c.term for c in query.constraints] == [
        "gpu_model='nvidia_geforce_RTX 4090'", "gpus>=2", "vram>=20000MiB", "cpu>=8",
        "memory>=1024MiB", "disk>=256MiB", "price<=300000lovelace/600s",
    ]  # fmt: skip
    assert query.search([offer(price_per_unit=500)]).offers  # 500 x 600 s = 300000
    assert (
        query.search([offer(price_per_unit=501)])
        .why_none()
        .endswith(  # renter's units
            "1 of those has disk>=256MiB, your max price 1.800000 ADA/h (0.300000 ADA for up to "
            "600 s) is below 1.803600 ADA/h, the price of the cheapest of those"
        )
    )
    assert (
        query.search([offer(memory_mib=1023), offer(memory_mib=1000)])
        .why_none()
        .endswith(
            "2 of those have cpu>=8, the job asks 1024 MiB memory, "
            "the largest of those has 1023 MiB"
        )
    )
    lacking = OfferQuery.for_job(spec).search([offer(gpu_count=1)])
    assert lacking.why_none() == "the job asks 2 GPU(s), the largest of the 1 online offers has 1"
    assert not query.search([offer(gpu_model="NVIDIA GeForce RTX 4090 Ti")]).offers  # exact
    cpu_only = OfferQuery.for_job(spec.model_copy(update={"resources": Resources()}))
    assert [c.term for c in cpu_only.constraints] == [
        "cpu>=1", "memory>=512MiB", "disk>=256MiB", "price<=300000lovelace/600s"
    ]  # fmt: skip


def test_why_nothing_matched_when_nothing_is_online():
    assert OfferQuery.parse("gpus>=1").search([]).why_none() == "no offers yet"
    offline = [offer(online=False), offer(online=False)]
    assert OfferQuery.parse("").search(offline).why_none() == "all 2 offers are offline"
    assert OfferQuery.parse("").search([offer()]).why_none() is None


# --- properties ---------------------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    ["gpu_model", "provider", "gpus", "cpu", "vram", "memory", "disk", "price", "sort", "=",
     "!=", "<", "<=", ">", ">=", "==", "~", "-", ",", ".", "0", "1", "24", "0.5", "GiB", "MiB",
     "TiB", "ADA", "lovelace", "/h", "/s", "/min", "_", "*", '"', "'", " ", "\\", "é", "\n"]
)  # fmt: skip


@given(st.one_of(st.text(max_size=60), st.lists(FRAGMENTS, max_size=12).map("".join)))
def test_any_text_parses_or_names_a_term_it_holds(text):
    try:
        query = OfferQuery.parse(text)
    except QueryError as refusal:
        rest = iter(text)  # the term as written, quotes aside: a subsequence of the text
        assert refusal.term == text or all(char in rest for char in refusal.term)
    else:
        assert all(c.term for c in query.constraints)


SIZE_FACTOR = {"MiB": 1, "GiB": 1024, "TiB": 1 << 20}
AMOUNT_FACTOR = {"lovelace": 1, "ADA": 10**6}
AMOUNTS = st.decimals(min_value=0, max_value=10**12, places=8, allow_nan=False,
                      allow_infinity=False)  # fmt: skip


def reference(amount: decimal.Decimal, factor: int) -> int | None:
    """amount * factor with Decimal at 100 digits: the whole number, or None."""
    with decimal.localcontext(prec=100) as context:
        context.traps[decimal.Inexact] = True
        value = amount * factor
        return int(value) if value == value.to_integral_value() else None


@given(AMOUNTS, st.sampled_from(sorted(SIZE_FACTOR)), st.sampled_from(["vram", "disk"]))
def test_sizes_are_exact_or_refused(amount, unit, field):
    term = f"{field}>={amount:f}{unit}"
    expected = reference(amount, SIZE_FACTOR[unit])
    if expected is None:
        with pytest.raises(QueryError, match="whole number of MiB"):
            OfferQuery.parse(term)
    else:
        assert bounds(term) == [(field, ">=", expected, 1)]


@given(AMOUNTS, st.sampled_from(sorted(AMOUNT_FACTOR)), st.sampled_from(["", "/s", "/min", "/h"]))
def test_prices_are_exact_lovelace_or_refused(amount, unit, per):
    term = f"price<={amount:f}{unit}{per}"
    expected = reference(amount, AMOUNT_FACTOR[unit])
    scale = {"": 1, "/s": 1, "/min": 60, "/h": 3600}[per]
    if expected is None:
        with pytest.raises(QueryError, match="whole number of lovelace"):
            OfferQuery.parse(term)
    else:
        assert bounds(term) == [("price", "<=", expected, scale)]


OFFERS = st.lists(
    st.builds(
        OfferRecord,
        provider_id=st.sampled_from(["aa01", "bb02", "cc03"]),
        gpu_model=st.sampled_from(MODELS),
        gpu_count=st.integers(0, 8),
        vram_mib=st.sampled_from([0, 8192, 24564, 81559]),
        cpu_cores=st.integers(1, 64),
        memory_mib=st.integers(16, 1 << 20),
        disk_mib=st.integers(1, 1 << 22),
        price_per_unit=st.integers(0, 5000),
        online=st.booleans(),
    ),
    max_size=12,
)
NUMERIC_TERMS = st.tuples(st.sampled_from(sorted(NUMERIC)), st.sampled_from(sorted(OPS)),
                          st.integers(0, 1 << 22))  # fmt: skip
MODEL_WORDS = ["RTX_4090", "4090_Ti", "h100_80gb_hbm3", "A100"]
MODEL_TERMS = st.tuples(st.sampled_from(["=", "!="]), st.sampled_from(MODEL_WORDS))
SORT_KEYS = st.lists(st.sampled_from(["gpu_model", "provider", *sorted(NUMERIC)]),
                     unique=True, max_size=3)  # fmt: skip


def ends_with_words(name: str, term: str) -> bool:
    want, have = term.lower().split("_"), name.lower().split()
    return have[len(have) - len(want) :] == want


@given(OFFERS, st.lists(st.one_of(NUMERIC_TERMS, MODEL_TERMS), max_size=4), SORT_KEYS,
       st.lists(st.booleans(), min_size=3, max_size=3))  # fmt: skip
def test_search_agrees_with_direct_comparisons(offers, terms, sort_keys, descending):
    checks, text = [], []
    for term in terms:
        if len(term) == 3:
            field, op, value = term
            text.append(f"{field}{op}{value}{BASE_UNIT[field]}")
            checks.append(lambda o, a=NUMERIC[field], op=op, v=value: OPS[op](getattr(o, a), v))
        else:
            op, model = term
            text.append(f"gpu_model{op}{model}")
            checks.append(lambda o, op=op, m=model: OPS[op](ends_with_words(o.gpu_model, m), True))
    keys = [("-" if down else "") + key for key, down in zip(sort_keys, descending, strict=False)]
    if keys:
        text.append("sort=" + ",".join(keys))
    found = OfferQuery.parse(" ".join(text)).search(offers)

    online = [o for o in offers if o.online]
    expected = [o for o in online if all(check(o) for check in checks)]
    assert sorted(map(repr, found.offers)) == sorted(map(repr, expected))
    assert found.total == len(offers) and found.offline == len(offers) - len(online)
    for depth, (_, left) in enumerate(found.funnel, start=1):
        assert left == sum(all(check(o) for check in checks[:depth]) for o in online)
    assert found.alone == tuple(
        (term, sum(check(o) for o in online)) for term, check in zip(text, checks, strict=False)
    )
    assert (found.why_none() is None) == bool(expected)
    order = [(key.lstrip("-"), key.startswith("-")) for key in keys] or [("price", False)]
    attr = {"gpu_model": "gpu_model", "provider": "provider_id", **NUMERIC}
    for first, second in zip(found.offers, found.offers[1:], strict=False):
        for key, down in order:
            a, b = (getattr(o, attr[key]) for o in (first, second))
            a, b = (v.lower() if isinstance(v, str) else v for v in (a, b))
            if a != b:
                assert (a > b) if down else (a < b), (key, first, second)
                break


def test_offer_records_mirror_the_offer_table():
    from offchain.market.models import Offer
    from offchain.market.services.offers import SLICE_ATTRS

    table = set(Offer.model_fields)
    # the market's, not the table's (a record is the provider's, counted from the chain)
    verdict = {"provider_id", "online", "away", "delivered_percent"}
    record = {f.name for f in dataclasses.fields(OfferRecord)} - verdict - set(SLICE_ATTRS)
    assert record <= table and "provider_id" in table

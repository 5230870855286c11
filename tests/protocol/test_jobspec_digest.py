"""The job id an escrow carries is sha256 of the spec's canonical JSON. Vectors: the bytes
written out by hand, an independent encoder (the standard library's json with sorted keys and
no whitespace) agreeing on every spec and string it can agree on, pinned digests, and what
canonical means where the two differ (UTF-16 key order) or where nothing can be canonical
(floats, broken Unicode)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from offchain.protocol.job.jobspec import JobSpec, JobSpecError, canonical_json, jobspec_from_yaml
from tests.provider.test_jobspec import GOOD

MINIMAL = JobSpec(image="busybox:1.36", command=["true"], max_duration_s=1, max_price_lovelace=0)
MINIMAL_BYTES = (  # written by hand: every field, defaults included, keys sorted, no spaces
    b'{"command":["true"],"env":{},"image":"busybox:1.36","inputs":[],"max_duration_s":1,'
    b'"max_price_lovelace":0,"network":false,"resources":{"cpu_cores":1,"disk_mib":256,'
    b'"gpus":0,"memory_mib":512,"min_vram_mib":0}}'
)
MINIMAL_JOB_ID = "9f73744b7c1270c7514644ba498db79cadaf2616a65c5a0d712b4bde1b90df7a"


def independent(value: Any) -> bytes:
    """The same rules, as the standard library writes them."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_the_canonical_bytes_and_job_id_of_a_spec_are_pinned():
    assert MINIMAL.canonical_json() == MINIMAL_BYTES
    assert hashlib.sha256(MINIMAL_BYTES).hexdigest() == MINIMAL_JOB_ID
    assert MINIMAL.job_id().hex() == MINIMAL_JOB_ID


def test_a_full_spec_encodes_as_the_independent_encoder_does():
    spec = jobspec_from_yaml(GOOD)
    assert spec.canonical_json() == independent(spec.model_dump(mode="json"))
    assert spec.job_id() == hashlib.sha256(independent(spec.model_dump(mode="json"))).digest()
    assert spec.model_dump_json().encode() != spec.canonical_json()  # field order, not sorted


def test_the_job_id_is_the_specs_not_its_spelling():
    spelled = jobspec_from_yaml(
        "max_price_lovelace: 0\nmax_duration_s: 1\ncommand: ['true']\nimage: busybox:1.36\n"
        "resources: {memory_mib: 512}\nenv: {}\n"
    )
    assert spelled.job_id() == MINIMAL.job_id()
    longer = MINIMAL.model_copy(update={"max_duration_s": 2})
    assert longer.job_id() != MINIMAL.job_id()


TEXT = st.text(st.characters(exclude_categories=("Cs",)))  # no lone surrogates
KEYS = st.text(st.characters(exclude_categories=("Cs",), max_codepoint=0xFFFF))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner) | st.dictionaries(KEYS, inner),
)


@given(JSON)
def test_any_integer_only_json_encodes_as_the_independent_encoder_does(value):
    """Keys below U+10000 sort the same by code point and by UTF-16 unit: both must agree."""
    assert canonical_json(value) == independent(value)


def test_escapes_and_non_ascii_text():
    text = 'quote " backslash \\ tab \t nul \x00 unit \x1f del \x7f é \u2028 \U0001f600'
    assert canonical_json(text) == independent(text)
    assert canonical_json(text).count(b"\\u") == 2  # only \x00 and \x1f: no \u escape else
    assert canonical_json(2**64) == b"18446744073709551616"  # integers exact, any size


def test_keys_sort_by_utf16_code_units_as_rfc_8785_does():
    value = {"\uff61": 1, "\U0001f600": 2, "a": 3}
    # U+1F600 is the surrogate pair D83D DE00, which sorts before U+FF61
    assert canonical_json(value) == '{"a":3,"\U0001f600":2,"\uff61":1}'.encode()
    assert canonical_json(value) != independent(value)  # code point order puts U+FF61 first


@pytest.mark.parametrize(
    "value", [1.0, {"x": 0.5}, [float("nan")], {1: "not a string key"}, "\ud800", b"bytes"]
)
def test_what_has_no_canonical_encoding_is_refused(value):
    with pytest.raises(JobSpecError, match="not canonical JSON"):
        canonical_json(value)

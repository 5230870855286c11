"""An out-ref is pycardano's `TransactionInput` inside the code; `TXID#IX` and Ogmios's JSON are
its edges: each converts to it and back unchanged, and text that is no out-ref is refused
saying the form it expects."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from pycardano import TransactionId, TransactionInput

from offchain.chain.utxo import (
    OUT_REF_PATTERN,
    format_out_ref,
    ogmios_out_ref,
    out_ref_of,
    parse_out_ref,
    split_out_ref,
    tx_id_of,
)
from offchain.protocol.ledger.types import TxOutRef

TX_ID = bytes(range(32)).hex()
REF = TransactionInput(TransactionId(bytes(range(32))), 7)


def test_text_round_trip():
    text = format_out_ref(REF)
    assert text == f"{TX_ID}#7"
    assert parse_out_ref(text) == REF
    assert re.fullmatch(OUT_REF_PATTERN, text)


def test_people_may_paste_upper_case_spaces_and_leading_zeros():
    assert parse_out_ref(f"  {TX_ID.upper()}#007\n") == REF
    assert split_out_ref(f"{TX_ID}#7") == (TX_ID, 7)


@pytest.mark.parametrize(
    "text",
    ["", "#0", f"{TX_ID}", f"{TX_ID}#", f"{TX_ID}#-1", f"{TX_ID}#1.0", f"{TX_ID[:-2]}#0",
     f"{TX_ID}00#0", f"{TX_ID[:-1]}g#0", f"{TX_ID}#0#1", f"x{TX_ID}#0"],
)  # fmt: skip
def test_text_that_is_no_out_ref_is_refused(text: str):
    with pytest.raises(ValueError, match="expected an output reference TXID#INDEX"):
        parse_out_ref(text)


def test_ogmios_json_and_hex_parts():
    assert ogmios_out_ref({"transaction": {"id": TX_ID}, "index": 7}) == REF
    assert out_ref_of(TX_ID, 7) == REF
    assert tx_id_of(REF) == TX_ID


def test_the_datum_form_converts_both_ways():
    assert TxOutRef.of(REF).to_input() == REF
    assert TxOutRef.of(REF) == TxOutRef(bytes(range(32)), 7)


def test_reading_text_needs_no_pycardano():
    """`unchained job list` reads escrows' text and must start without pycardano."""
    code = "import sys, offchain.chain.utxo as u; u.split_out_ref('00' * 32 + '#1'); "
    code += "sys.exit('pycardano' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0

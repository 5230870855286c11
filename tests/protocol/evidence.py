"""What the escrow and bond checks are tested with: outputs placed on the devnet exactly as
given (a datum hash, tokens, any datum at any script address), with no builder's checks, as
anyone can place them; and a key that records what it signs, so a test can show that a
refused escrow got no signature at all."""

from __future__ import annotations

from pycardano import (
    Address,
    PaymentSigningKey,
    PlutusData,
    TransactionBuilder,
    TransactionOutput,
    UTxO,
    Value,
)
from pycardano import datum_hash as hash_of

from devnet.process import DevnetProcess
from offchain.protocol.tx.txbuild import Wallet
from tests.protocol.onchain import confirm, junk_tokens, output


async def place(
    devnet: DevnetProcess,
    payer: Wallet,
    address: Address,
    lovelace: int,
    datum: PlutusData,
    *,
    hashed: bool = False,
    tokens: int = 0,
) -> UTxO:
    """`lovelace` (and `tokens` of the payer's own) at `address` with `datum` inline, or only
    its hash when `hashed`."""
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(payer.address)
    value = Value(lovelace)
    if tokens:
        policy, value.multi_asset = junk_tokens(payer, tokens)
        builder.mint, builder.native_scripts = value.multi_asset, [policy]
    placed = (
        TransactionOutput(address, value, datum_hash=hash_of(datum))
        if hashed
        else TransactionOutput(address, value, datum=datum)
    )
    builder.add_output(placed)
    tx = builder.build_and_sign([payer.key], change_address=payer.address)
    return output(await confirm(devnet, tx), 0)


class SigningSpy:
    """A copy of a key that records every payload it signs."""

    def __init__(self, key: PaymentSigningKey) -> None:
        self.key = PaymentSigningKey(key.payload)
        self.signed: list[bytes] = []
        sign = self.key.sign

        def recorded(data: bytes) -> bytes:
            self.signed.append(data)
            return sign(data)

        self.key.sign = recorded  # type: ignore[method-assign]

"""A CIP-30 wallet for the browser tests: a devnet key held here, in Python, that the page
reaches through `cip30.js` (Playwright's `expose_function`). UTxOs come from the devnet over
Ogmios; `signTx` answers the witness set, `signData` the CIP-8 COSE_Sign1 and COSE_Key (as
`offchain.protocol.api.signed_request` signs). Knobs: `decline` and `decline_data` (the person
says no to signTx or signData: CIP-30's UserDeclined), `network_id` (a wallet on another
network), `refuse_enable`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from pycardano import Transaction, TransactionWitnessSet, Value, VerificationKeyWitness
from pycardano.cip import cip8

from offchain.chain.context import chain_context
from offchain.protocol.tx.txbuild import Wallet

SCRIPT = Path(__file__).with_name("cip30.js")
TX_DECLINED = {"code": 2, "info": "user declined"}  # TxSignError.UserDeclined
DATA_DECLINED = {"code": 3, "info": "user declined"}  # DataSignError.UserDeclined
REFUSED = {"code": -3, "info": "the user refused the connection"}  # APIError.Refused


@dataclasses.dataclass
class BrowserWallet:
    wallet: Wallet
    ogmios_url: str
    decline: bool = False  # signTx answers UserDeclined
    decline_data: bool = False  # signData answers UserDeclined
    network_id: int = 0
    refuse_enable: bool = False
    signed: list[str] = dataclasses.field(default_factory=list)  # the transactions it signed

    async def install(self, page: Any) -> None:
        """Make this wallet `window.cardano.testwallet` in `page` (before it loads)."""
        await page.expose_function("__cip30", self.answer)
        await page.add_init_script(path=str(SCRIPT))

    def answer(self, method: str, args: str) -> str:
        try:
            return json.dumps({"value": getattr(self, method)(*json.loads(args))})
        except WalletRefusal as refusal:
            return json.dumps({"error": refusal.error})

    def enable(self) -> None:
        if self.refuse_enable:
            raise WalletRefusal(REFUSED)

    def isEnabled(self) -> bool:
        return not self.refuse_enable

    def getNetworkId(self) -> int:
        return self.network_id

    def _utxos(self) -> list[Any]:
        return chain_context(self.ogmios_url).utxos(self.wallet.address)

    def getUtxos(self) -> list[str]:
        return [utxo.to_cbor_hex() for utxo in self._utxos()]

    def getBalance(self) -> str:
        return Value(sum(utxo.output.amount.coin for utxo in self._utxos())).to_cbor_hex()

    def getUsedAddresses(self) -> list[str]:
        return [bytes(self.wallet.address).hex()]

    def getUnusedAddresses(self) -> list[str]:
        return []

    def getChangeAddress(self) -> str:
        return bytes(self.wallet.address).hex()

    def getRewardAddresses(self) -> list[str]:
        return []

    def signTx(self, tx: str, partial: bool = False) -> str:
        if self.decline:
            raise WalletRefusal(TX_DECLINED)
        body = Transaction.from_cbor(tx).transaction_body
        key = self.wallet.key
        witness = VerificationKeyWitness(key.to_verification_key(), key.sign(body.hash()))
        self.signed.append(tx)
        return TransactionWitnessSet(vkey_witnesses=[witness]).to_cbor_hex()

    def signData(self, address: str, payload: str) -> dict[str, str]:
        if self.decline_data:
            raise WalletRefusal(DATA_DECLINED)
        assert address == bytes(self.wallet.address).hex(), "signs for its own address only"
        message = bytes.fromhex(payload).decode()
        signed = cip8.sign(message, self.wallet.key, attach_cose_key=True,
                           network=self.wallet.address.network)  # fmt: skip
        assert isinstance(signed, dict)
        return signed


class WalletRefusal(Exception):
    """A CIP-30 error the wallet answers instead of a value."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["info"])
        self.error = error

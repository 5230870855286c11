"""Renter transactions signed outside this process. A command that would sign a transaction
with `--key` can instead prepare it (`Prepared`: the unsigned transaction, what finishes it
and the facts that needs) and leave it pending: the unsigned CBOR goes to a file for a wallet,
the pending record to `<state_dir>/pending/<tx id>.json`. The wallet's answer, in any form
`consumer.sdk.external` reads, is then checked against that record (`checked`): the very
transaction built (same body), with a witness of the renter's key whose signature verifies;
only then is it submitted and the command's own bookkeeping done (the SDK's `finish`). The
same `finish` runs after an in-process signature (`sign_here`), so both paths end alike.

Kinds: `lock`, `refund`, `slash`, `cancel` (`consumer.sdk.session`; a cancel's unsigned
transaction carries its provider's witness already), `channel-open`, `channel-top-up`,
`channel-close`, `channel-drain` (`consumer.sdk.channels`)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pycardano import (
    Address,
    NonEmptyOrderedSet,
    Transaction,
    TransactionInput,
    TransactionWitnessSet,
    UTxO,
    VerificationKeyWitness,
)

from consumer.sdk.errors import ConsumerError
from consumer.sdk.external import merged, whole_or_witnesses
from consumer.sdk.store import MIN_PREFIX, local_time, write_whole
from offchain.chain.submit import submit_confirmed
from offchain.protocol.ledger.payloads import verify

if TYPE_CHECKING:
    from pycardano import ChainContext

    from consumer.sdk.keys import ConsumerKey


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A renter transaction built, not signed: `kind` names what finishes it, `facts` (plain
    JSON) are what that finish needs in another process."""

    kind: str
    tx: Transaction
    facts: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class PendingTx:
    """A prepared transaction waiting for a wallet's signature."""

    tx_id: str
    kind: str
    unsigned_cbor: str  # hex: what the wallet was given
    signer: str  # the key hash (hex) whose witness it needs
    facts: dict[str, Any]
    created_ms: int
    submitted_ms: int | None = None  # set once it is on chain: a replay is refused

    @property
    def tx(self) -> Transaction:
        return Transaction.from_cbor(bytes.fromhex(self.unsigned_cbor))


class AlreadySubmitted(ConsumerError):
    """The pending transaction named was submitted already: nothing is done again."""


class PendingStore:
    """`<state_dir>/pending/<tx id>.json`, each written whole (rename)."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "pending"

    def defer(self, prepared: Prepared, signer: ConsumerKey, path: Path) -> PendingTx:
        """Record `prepared` as pending for `signer`'s key and write its unsigned CBOR (hex,
        as `cardano-cli` and CIP-30 `signTx` take it) to `path`."""
        pending = PendingTx(
            tx_id=prepared.tx.id.payload.hex(), kind=prepared.kind,
            unsigned_cbor=prepared.tx.to_cbor_hex(), signer=signer.key_hash,
            facts=prepared.facts, created_ms=time.time_ns() // 1_000_000,
        )  # fmt: skip
        self.save(pending)
        path.write_text(pending.unsigned_cbor + "\n")
        return pending

    def save(self, pending: PendingTx) -> None:
        text = json.dumps(dataclasses.asdict(pending), indent=2) + "\n"
        write_whole(self.dir / f"{pending.tx_id}.json", text)

    def get(self, given: str) -> PendingTx:
        """The pending transaction `given` names: its id or a unique prefix of it."""
        matches = [p for p in self.all() if p.tx_id.startswith(given.lower())]
        if len(given) < MIN_PREFIX or not matches:
            raise ConsumerError(
                f"no pending transaction {given!r} in {self.dir}: `unchained tx pending` lists "
                "them (or pass the --state-dir it was built with)", tx=given,
            )  # fmt: skip
        if len(matches) > 1:
            raise ConsumerError(f"{given!r} names {len(matches)} pending transactions; give "
                                "more of the id", tx=given)  # fmt: skip
        return matches[0]

    def all(self) -> list[PendingTx]:
        """Every pending transaction recorded here, submitted ones too, oldest first."""
        found = []
        for path in self.dir.glob("*.json"):
            try:
                found.append(PendingTx(**json.loads(path.read_text())))
            except (ValueError, TypeError) as exc:
                raise ConsumerError(
                    f"{path} is not a pending transaction record ({exc}): move "
                    "it out of the state directory",
                    path=str(path),
                ) from exc
        return sorted(found, key=lambda pending: pending.created_ms)

    def accept(self, given: str, cbor: bytes) -> tuple[PendingTx, Transaction]:
        """The pending transaction `given` names, and the wallet's answer `cbor` checked
        against it (`checked`); AlreadySubmitted when it was submitted before."""
        pending = self.get(given)
        if pending.submitted_ms is not None:
            raise AlreadySubmitted(
                f"transaction {pending.tx_id} ({describe(pending)}) was submitted already at "
                f"{local_time(pending.submitted_ms)}: nothing done again", tx=pending.tx_id,
            )  # fmt: skip
        return pending, checked(pending, cbor, self.all())

    def drop(self, given: str) -> PendingTx:
        """Forget a pending transaction never submitted (its wallet will not sign it): the
        renter's UTxOs it spends are free for the next one built."""
        pending = self.get(given)
        if pending.submitted_ms is not None:
            raise AlreadySubmitted(f"transaction {pending.tx_id} is on chain already: nothing "
                                   "to drop", tx=pending.tx_id)  # fmt: skip
        (self.dir / f"{pending.tx_id}.json").unlink()
        return pending

    def busy(self, tip_slot: int) -> frozenset[TransactionInput]:
        """The inputs the transactions still pending spend, of those that can still land: one
        whose ttl the chain's tip (`tip_slot`) has reached never will, and frees its coins."""
        return frozenset(
            tx_input
            for pending in self.all()
            if pending.submitted_ms is None and _may_land(pending.tx, tip_slot)
            for tx_input in pending.tx.transaction_body.inputs
        )

    async def submit(self, ogmios_url: str, pending: PendingTx, signed: Transaction) -> None:
        """Submit `signed`, wait for its block, and mark it submitted (a replay is refused).
        A ledger refusal leaves it pending, so nothing is lost."""
        await submit_confirmed(ogmios_url, signed)
        self.save(dataclasses.replace(pending, submitted_ms=time.time_ns() // 1_000_000))


def _may_land(tx: Transaction, tip_slot: int) -> bool:
    ttl = tx.transaction_body.ttl
    return ttl is None or tip_slot < ttl


def describe(pending: PendingTx) -> str:
    """What the pending transaction does, in words: its kind and the job or channel."""
    names = pending.facts.get("job_id") or pending.facts.get("channel_id")
    if names is None and "record" in pending.facts:
        names = pending.facts["record"]["channel_id"]
    return f"{pending.kind} of {'job' if 'job_id' in pending.facts else 'channel'} {names}"


def checked(pending: PendingTx, cbor: bytes, others: list[PendingTx]) -> Transaction:
    """The transaction to submit: the unsigned one recorded, byte for byte, with the valid key
    witnesses the wallet's answer carries added. The answer must be that transaction (a whole
    one with the same body) or witnesses of it, and one of them the renter's key's, its
    signature verified here; `others` (this store's) name what a file for another is for."""
    given = whole_or_witnesses(cbor)
    tx_id = bytes.fromhex(pending.tx_id)
    if isinstance(given, Transaction):
        if given.id.payload != tx_id:
            raise ConsumerError(
                f"this file is transaction {given.id.payload.hex()}, not the pending "
                f"{pending.tx_id} ({describe(pending)}){elsewhere(given.id.payload, others)}; "
                "sign the unsigned file unchanged", tx=pending.tx_id,
            )  # fmt: skip
        given = given.transaction_witness_set
    witnesses = given.vkey_witnesses or []
    valid = [w for w in witnesses if signs(w, tx_id)]
    if not any(w.vkey.hash().payload.hex() == pending.signer for w in valid):
        for other in others:
            if other.tx_id != pending.tx_id and any(
                signs(w, bytes.fromhex(other.tx_id)) for w in witnesses
            ):
                raise ConsumerError(
                    f"these witnesses sign pending transaction {other.tx_id} "
                    f"({describe(other)}), not {pending.tx_id} ({describe(pending)}): "
                    f"`unchained tx submit {other.tx_id[:16]} FILE` takes them",
                    tx=pending.tx_id, signs=other.tx_id,
                )  # fmt: skip
        raise ConsumerError(
            f"transaction {pending.tx_id} carries no valid signature by the renter's key "
            f"(key hash {pending.signer}): sign it with that key's wallet", tx=pending.tx_id,
        )  # fmt: skip
    held = pending.tx.transaction_witness_set.vkey_witnesses or []  # a co-signer's
    added = [w for w in valid if w not in held]
    return merged(TransactionWitnessSet(vkey_witnesses=NonEmptyOrderedSet(added)),
                  pending.unsigned_cbor)  # fmt: skip


def signs(witness: VerificationKeyWitness, tx_id: bytes) -> bool:
    """Whether the witness's signature over `tx_id` verifies under its own key."""
    return verify(bytes(witness.vkey.payload[:32]), tx_id, witness.signature)


def elsewhere(tx_id: bytes, others: list[PendingTx]) -> str:
    """`: it is pending ...` when `tx_id` is another pending transaction here."""
    for other in others:
        if other.tx_id == tx_id.hex():
            hint = f"`unchained tx submit {other.tx_id[:16]} FILE`"
            return f" (it is the pending {describe(other)}: {hint} takes it)"
    return ""


class AvoidingPending:
    """The chain as the renter's builders see it, less the renter's own UTxOs that its pending
    transactions spend: a second transaction built while a wallet has the first does not
    spend the same coins (both stay valid). Everything else is the context's own."""

    def __init__(self, context: ChainContext, renter: Address, busy: frozenset[TransactionInput]):
        self._context, self._renter, self._busy = context, str(renter), busy

    def utxos(self, address: str | Address) -> list[UTxO]:
        found = self._context.utxos(address)
        if str(address) != self._renter:
            return found
        return [utxo for utxo in found if utxo.input not in self._busy]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


async def sign_here(key: ConsumerKey, ogmios_url: str, prepared: Prepared) -> Transaction:
    """`prepared` signed with `key` in this process, submitted and in a block."""
    signed = key.sign(prepared.tx)
    await submit_confirmed(ogmios_url, signed)
    return signed

"""The ScriptContext a Plutus V3 script receives, built as the Conway ledger builds it.

The ledger's plutus-ledger-api (V3 Contexts, as the team's notes lay it out) is the
reference; where OpShin's types disagree, the ledger wins. Body fields are read from the
transaction's original bytes (certificates and proposals keep their order, which a CBOR set
decoder would lose), and datums and redeemers are spliced into the context as the bytes the
transaction carried.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, TypeAlias

import cbor2
from pycardano import (
    Address,
    MultiAsset,
    PointerAddress,
    ScriptHash,
    TransactionId,
    TransactionInput,
    TransactionOutput,
    script_hash,
)
from pycardano.serialization import default_encoder

from devnet.txdecode import (
    DecodedTx,
    array_item_spans,
    map_item_spans,
    map_value_spans,
    read_head,
)
from devnet.view import LedgerView
from offchain.chain.utxo import format_out_ref
from offchain.core.errors import UnchainedError

# Ledger redeemer tags, in the ledger's order (Spend < Mint < Cert < Reward < Vote < Propose).
SPEND, MINT, PUBLISH, WITHDRAW, VOTE, PROPOSE = range(6)
PURPOSE_NAMES = ("spend", "mint", "publish", "withdraw", "vote", "propose")


class ContextError(UnchainedError, ValueError):
    """The ledger cannot translate this transaction for a script (the reason says why)."""


# --- Plutus Data ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Constr:
    index: int
    fields: tuple[Data, ...] = ()


@dataclasses.dataclass(frozen=True)
class DataMap:
    """A Data map: pairs in the order the ledger builds them (never re-sorted here)."""

    pairs: tuple[tuple[Data, Data], ...]


@dataclasses.dataclass(frozen=True)
class RawData:
    """Data kept as the CBOR bytes it arrived in, so a script sees exactly what was sent."""

    cbor: bytes


Data: TypeAlias = "int | bytes | list[Data] | Constr | DataMap | RawData"

NOTHING = Constr(1)
FALSE, TRUE = Constr(0), Constr(1)


def just(value: Data) -> Constr:
    return Constr(0, (value,))


def maybe(value: Data | None) -> Constr:
    return NOTHING if value is None else just(value)


def encode_data(value: Data) -> bytes:
    """Plutus' own CBOR encoding of Data (what `serialiseData` would produce)."""
    out = bytearray()
    _encode(value, out)
    return bytes(out)


def _encode(value: Data, out: bytearray) -> None:
    if isinstance(value, RawData):
        out += value.cbor
    elif isinstance(value, bool):
        raise TypeError("bool is not Plutus Data; use TRUE or FALSE")
    elif isinstance(value, int):
        _encode_int(value, out)
    elif isinstance(value, bytes):
        _encode_bytes(value, out)
    elif isinstance(value, list):
        _encode_list(value, out)
    elif isinstance(value, DataMap):
        out += cbor_head(5, len(value.pairs))
        for key, item in value.pairs:
            _encode(key, out)
            _encode(item, out)
    elif isinstance(value, Constr):
        _encode_constr(value, out)
    else:
        raise TypeError(f"not Plutus Data: {value!r}")


def cbor_head(major: int, argument: int) -> bytes:
    """A definite-length CBOR head: major type and argument."""
    if argument < 24:
        return bytes([major << 5 | argument])
    width = next(w for w in (1, 2, 4, 8) if argument < 1 << (8 * w))
    return bytes([major << 5 | (24 + width.bit_length() - 1)]) + argument.to_bytes(width, "big")


def _encode_int(value: int, out: bytearray) -> None:
    if 0 <= value < 1 << 64:
        out += cbor_head(0, value)
    elif -(1 << 64) <= value < 0:
        out += cbor_head(1, -1 - value)
    else:  # bignum: tag 2 / 3 over a (chunked) bytestring
        magnitude = value if value >= 0 else -1 - value
        out += cbor_head(6, 2 if value >= 0 else 3)
        _encode_bytes(magnitude.to_bytes((magnitude.bit_length() + 7) // 8, "big"), out)


def _encode_bytes(value: bytes, out: bytearray) -> None:
    if len(value) <= 64:
        out += cbor_head(2, len(value)) + value
        return
    out += b"\x5f"  # Plutus splits long bytestrings into 64-byte chunks
    for start in range(0, len(value), 64):
        chunk = value[start : start + 64]
        out += cbor_head(2, len(chunk)) + chunk
    out += b"\xff"


def _encode_list(items: Iterable[Data], out: bytearray) -> None:
    items = list(items)
    if not items:
        out += b"\x80"
        return
    out += b"\x9f"  # Plutus writes non-empty lists with indefinite length
    for item in items:
        _encode(item, out)
    out += b"\xff"


def _encode_constr(value: Constr, out: bytearray) -> None:
    if value.index < 7:
        out += cbor_head(6, 121 + value.index)
    elif value.index < 128:
        out += cbor_head(6, 1280 + value.index - 7)
    else:
        out += cbor_head(6, 102) + b"\x82" + cbor_head(0, value.index)
    _encode_list(value.fields, out)


# --- What the transaction carries for its scripts -------------------------------------------


@dataclasses.dataclass(frozen=True)
class Redeemer:
    tag: int
    index: int
    data: bytes  # original CBOR of the redeemer's Data
    memory: int
    cpu: int

    @property
    def pointer(self) -> dict[str, Any]:
        """The Ogmios RedeemerPointer."""
        return {"purpose": PURPOSE_NAMES[self.tag], "index": self.index}


@dataclasses.dataclass(frozen=True)
class Purpose:
    """Something in the transaction a redeemer can point at.

    `target` is what the ledger names: the TransactionInput (spend), policy id bytes (mint),
    the certificate, reward account bytes, voter or proposal as decoded CBOR.
    `script_hash` is the script that must authorise it, None when no script does.
    """

    tag: int
    index: int
    target: Any
    script_hash: bytes | None

    @property
    def name(self) -> str:
        return PURPOSE_NAMES[self.tag]


def parse_redeemers(cbor: bytes | None) -> list[Redeemer]:
    """Redeemers in ledger order, from either the Conway map or the legacy list form."""
    if cbor is None:
        return []
    if read_head(cbor, 0)[0] == 5:
        entries = [
            (cbor2.loads(cbor[k0:k1]), array_item_spans(cbor, v0))
            for (k0, k1), (v0, _) in map_item_spans(cbor, 0)
        ]
    else:
        entries = []
        for start, _ in array_item_spans(cbor, 0):
            spans = array_item_spans(cbor, start)
            entries.append(([cbor2.loads(cbor[s:e]) for s, e in spans[:2]], spans[2:]))
    return sorted((_redeemer(key, cbor, spans) for key, spans in entries), key=_pointer_order)


def _pointer_order(redeemer: Redeemer) -> tuple[int, int]:
    return (redeemer.tag, redeemer.index)


def _redeemer(key: list[int], cbor: bytes, spans: list[tuple[int, int]]) -> Redeemer:
    (data_start, data_end), (units_start, units_end) = spans
    memory, cpu = cbor2.loads(cbor[units_start:units_end])
    tag, index = key
    return Redeemer(tag, index, cbor[data_start:data_end], memory, cpu)


def set_items(cbor: bytes | None) -> list[bytes]:
    """The items of a CBOR array or tag-258 set, as original bytes, in transaction order."""
    if cbor is None:
        return []
    major, tag, pos = read_head(cbor, 0)
    start = pos if major == 6 and tag == 258 else 0
    return [cbor[s:e] for s, e in array_item_spans(cbor, start)]


def witness_datums(dtx: DecodedTx) -> dict[bytes, bytes]:
    """Datums in the witness set by hash; the ledger hashes each datum's original bytes."""
    return {
        hashlib.blake2b(item, digest_size=32).digest(): item
        for item in set_items(dtx.witness_fields.get(4))
    }


# --- Translating ledger values ---------------------------------------------------------------


def credential(is_script: bool, hash_: bytes) -> Constr:
    return Constr(int(is_script), (hash_,))


def reward_credential(account: bytes) -> Constr:
    """The Credential of a reward account: header bit 4 set means a script."""
    return credential(bool(account[0] & 0x10), account[1:29])


def _cddl_credential(cred: Any) -> Constr:
    """[0, keyhash] / [1, scripthash] -> PubKeyCredential / ScriptCredential."""
    kind, hash_ = cred
    return Constr(kind, (hash_,))


def _credential_order(cred: Constr) -> tuple[int, bytes]:
    """Ledger Credential order: ScriptHashObj before KeyHashObj, then hash bytes."""
    return (1 - cred.index, cred.fields[0])


def _address(address: Address) -> Constr:
    if address.payment_part is None:
        raise ContextError(f"address {address} has no payment credential")
    staking = address.staking_part
    if staking is None:
        stake: Constr = NOTHING
    elif isinstance(staking, PointerAddress):
        stake = just(Constr(1, (staking.slot, staking.tx_index, staking.cert_index)))
    else:
        stake = just(Constr(0, (_hash_credential(staking),)))
    return Constr(0, (_hash_credential(address.payment_part), stake))


def _hash_credential(part: Any) -> Constr:
    return credential(isinstance(part, ScriptHash), part.payload)


def _assets(assets: Mapping[bytes, Mapping[bytes, int]]) -> list[tuple[Data, Data]]:
    return [(policy, DataMap(tuple(sorted(assets[policy].items())))) for policy in sorted(assets)]


def _multi_asset(assets: MultiAsset | None) -> dict[bytes, dict[bytes, int]]:
    return {
        policy.payload: {name.payload: quantity for name, quantity in names.items()}
        for policy, names in (assets or {}).items()
    }


def _value(coin: int, assets: Mapping[bytes, Mapping[bytes, int]]) -> DataMap:
    """An output Value: ADA always present and first, then policies in ascending order."""
    return DataMap(((b"", DataMap(((b"", coin),))), *_assets(assets)))


def datum_cbor(datum: Any) -> bytes:
    """CBOR of an inline datum as pycardano holds it."""
    return cbor2.dumps(datum, default=default_encoder)


def _output_datum(output: TransactionOutput) -> Constr:
    if output.datum_hash is not None:
        return Constr(1, (output.datum_hash.payload,))
    if output.datum is not None:
        return Constr(2, (RawData(datum_cbor(output.datum)),))
    return Constr(0)


def tx_out(output: TransactionOutput) -> Constr:
    reference = None if output.script is None else script_hash(output.script).payload
    return Constr(
        0,
        (
            _address(output.address),
            _value(output.amount.coin, _multi_asset(output.amount.multi_asset)),
            _output_datum(output),
            maybe(reference),
        ),
    )


def out_ref(tx_in: TransactionInput) -> Constr:
    """V3 TxOutRef: the TxId is a bare bytestring."""
    return Constr(0, (tx_in.transaction_id.payload, tx_in.index))


def _gov_action_id(gaid: Any) -> Data | None:
    return None if gaid is None else Constr(0, (gaid[0], gaid[1]))


def _drep(drep: Any) -> Constr:
    """[0, keyhash] / [1, scripthash] / [2] abstain / [3] no confidence."""
    kind = drep[0]
    return Constr(0, (Constr(kind, (drep[1],)),)) if kind < 2 else Constr(kind - 1)


def tx_cert(cert: Any, protocol_major: int) -> Constr:
    """A Conway certificate as a V3 TxCert (11 constructors)."""
    kind = cert[0]
    if kind in (0, 1):  # legacy (de)registration: never a deposit
        return Constr(kind, (_cddl_credential(cert[1]), NOTHING))
    if kind in (7, 8):  # Conway (de)registration: the deposit shows from protocol version 10
        deposit = None if protocol_major < 10 else cert[2]
        return Constr(kind - 7, (_cddl_credential(cert[1]), maybe(deposit)))
    if kind == 3:
        return Constr(7, (cert[1], cert[2]))
    if kind == 4:
        return Constr(8, (cert[1], cert[2]))
    if kind in _DELEGATIONS:
        delegatee = _delegatee(kind, cert)
        if kind in (2, 9, 10):
            return Constr(2, (_cddl_credential(cert[1]), delegatee))
        return Constr(3, (_cddl_credential(cert[1]), delegatee, cert[-1]))
    if kind == 14:
        return Constr(9, (_cddl_credential(cert[1]), _cddl_credential(cert[2])))
    if kind == 15:
        return Constr(10, (_cddl_credential(cert[1]),))
    if kind == 16:
        return Constr(4, (_cddl_credential(cert[1]), cert[2]))
    if kind == 17:
        return Constr(6, (_cddl_credential(cert[1]), cert[2]))
    if kind == 18:
        return Constr(5, (_cddl_credential(cert[1]),))
    raise ContextError(f"certificate type {kind} does not exist in Conway")


# certificate kind -> Delegatee constructor (0 stake, 1 vote, 2 stake+vote)
_DELEGATIONS = {2: 0, 9: 1, 10: 2, 11: 0, 12: 1, 13: 2}


def _delegatee(kind: int, cert: Any) -> Constr:
    delegatee = _DELEGATIONS[kind]
    if delegatee == 0:
        return Constr(0, (cert[2],))
    if delegatee == 1:
        return Constr(1, (_drep(cert[2]),))
    return Constr(2, (cert[2], _drep(cert[3])))


def cert_script_hash(cert: Any) -> bytes | None:
    """The script that must witness a certificate (Conway getScriptWitnessConwayTxCert)."""
    kind = cert[0]
    if kind in (0, 3, 4, 5, 6):  # legacy registration and pool certificates need no script
        return None
    kind_of_credential, hash_ = cert[1]
    return hash_ if kind_of_credential == 1 else None


def voter(cddl: Any) -> Constr:
    """[0|1, cc hot], [2|3, drep], [4, pool] -> CommitteeVoter / DRepVoter / StakePoolVoter."""
    kind, hash_ = cddl
    if kind == 4:
        return Constr(2, (hash_,))
    return Constr(kind // 2, (credential(kind % 2 == 1, hash_),))


def _voter_order(cddl: Any) -> tuple[int, int, bytes]:
    """Ledger Voter order: committee < DRep < pool; script before key credentials."""
    kind, hash_ = cddl
    return (kind // 2, 0 if kind % 2 else 1, hash_)


def _plutus_data(value: Any) -> Data:
    """Generic CBOR -> Data, as the ledger's ToPlutusData does for parameter updates."""
    if isinstance(value, Fraction):  # cbor2 decodes tag 30 (rational) to a Fraction
        return [value.numerator, value.denominator]
    if isinstance(value, list | tuple):
        return [_plutus_data(item) for item in value]
    if isinstance(value, dict):
        return DataMap(tuple((_plutus_data(k), _plutus_data(value[k])) for k in sorted(value)))
    return value


def _credential_map(pairs: Iterable[tuple[Constr, int]]) -> DataMap:
    return DataMap(tuple(sorted(pairs, key=lambda pair: _credential_order(pair[0]))))


def _rational(value: Fraction) -> Constr:
    return Constr(0, (value.numerator, value.denominator))


def governance_action(action: Any) -> Constr:
    kind = action[0]
    if kind == 0:
        _, gaid, update, guardrail = action
        return Constr(0, (maybe(_gov_action_id(gaid)), _plutus_data(update), maybe(guardrail)))
    if kind == 1:
        major, minor = action[2]
        return Constr(1, (maybe(_gov_action_id(action[1])), Constr(0, (major, minor))))
    if kind == 2:
        withdrawals = _credential_map(
            (reward_credential(account), amount) for account, amount in action[1].items()
        )
        return Constr(2, (withdrawals, maybe(action[2])))
    if kind == 3:
        return Constr(3, (maybe(_gov_action_id(action[1])),))
    if kind == 4:
        _, gaid, removed, added, quorum = action
        removed_creds = sorted((_cddl_credential(c) for c in removed), key=_credential_order)
        added_map = _credential_map((_cddl_credential(c), epoch) for c, epoch in added.items())
        return Constr(
            4, (maybe(_gov_action_id(gaid)), list(removed_creds), added_map, _rational(quorum))
        )
    if kind == 5:
        _, gaid, (_anchor, guardrail) = action
        return Constr(5, (maybe(_gov_action_id(gaid)), Constr(0, (maybe(guardrail),))))
    return Constr(6)


def proposal_procedure(proposal: Any) -> Constr:
    """C0[deposit, return Credential, GovernanceAction]: the anchor is left out."""
    deposit, account, action, _anchor = proposal
    return Constr(0, (deposit, reward_credential(account), governance_action(action)))


def proposal_script_hash(proposal: Any) -> bytes | None:
    """Parameter changes and treasury withdrawals run the constitution's guardrail script."""
    action = proposal[2]
    return action[-1] if action[0] in (0, 2) else None


# --- The transaction as its scripts see it ---------------------------------------------------


class TxContext:
    """What the ledger derives from one transaction for its scripts.

    `view.utxo` must resolve the transaction's inputs and reference inputs (include any
    additional UTxO in it). Unknown inputs are listed in `unknown_inputs`; building a TxInfo
    with them raises ContextError.
    """

    def __init__(self, dtx: DecodedTx, view: LedgerView) -> None:
        self.dtx = dtx
        self.view = view
        body = map_value_spans(dtx.body_cbor, 0)
        self._body = {key: dtx.body_cbor[start:end] for key, (start, end) in body.items()}
        self.inputs = self._refs(0)
        self.reference_inputs = self._refs(18)
        self.redeemers = parse_redeemers(dtx.witness_fields.get(5))
        self.datums = witness_datums(dtx)
        self.purposes = self._purposes()
        self._legacy_infos: dict[int, bytes] = {}

    def field(self, key: int, default: Any = None) -> Any:
        raw = self._body.get(key)
        return default if raw is None else cbor2.loads(raw)

    def _items(self, key: int) -> list[Any]:
        return [cbor2.loads(item) for item in set_items(self._body.get(key))]

    def _refs(self, key: int) -> list[TransactionInput]:
        refs = sorted((bytes(txid), index) for txid, index in self._items(key))
        return [TransactionInput(TransactionId(txid), index) for txid, index in refs]

    @property
    def unknown_inputs(self) -> list[TransactionInput]:
        return [i for i in self.inputs + self.reference_inputs if i not in self.view.utxo]

    @functools.cached_property
    def certificates(self) -> list[Any]:
        return self._items(4)

    @functools.cached_property
    def proposals(self) -> list[Any]:
        return self._items(20)

    @functools.cached_property
    def mint(self) -> dict[bytes, dict[bytes, int]]:
        return self.field(9, {})

    @functools.cached_property
    def withdrawals(self) -> list[tuple[bytes, int]]:
        """Reward accounts in ledger order (script credentials first, then hash bytes)."""
        accounts: dict[bytes, int] = self.field(5, {})
        return sorted(accounts.items(), key=lambda i: _credential_order(reward_credential(i[0])))

    @functools.cached_property
    def votes(self) -> list[tuple[Any, dict[Any, Any]]]:
        """Voters in ledger order with their votes."""
        votes: dict[Any, dict[Any, Any]] = self.field(19, {})
        return sorted(votes.items(), key=lambda item: _voter_order(item[0]))

    def _purposes(self) -> dict[int, list[Purpose]]:
        return {
            SPEND: [
                Purpose(SPEND, i, ref, self._spend_script(ref)) for i, ref in enumerate(self.inputs)
            ],
            MINT: [Purpose(MINT, i, policy, policy) for i, policy in enumerate(sorted(self.mint))],
            PUBLISH: [
                Purpose(PUBLISH, i, cert, cert_script_hash(cert))
                for i, cert in enumerate(self.certificates)
            ],
            WITHDRAW: [
                Purpose(WITHDRAW, i, account, _script_account(account))
                for i, (account, _) in enumerate(self.withdrawals)
            ],
            VOTE: [
                Purpose(VOTE, i, who, who[1] if who[0] in (1, 3) else None)
                for i, (who, _) in enumerate(self.votes)
            ],
            PROPOSE: [
                Purpose(PROPOSE, i, p, proposal_script_hash(p))
                for i, p in enumerate(self.proposals)
            ],
        }

    def _spend_script(self, ref: TransactionInput) -> bytes | None:
        output = self.view.utxo.get(ref)
        payment = None if output is None else output.address.payment_part
        return payment.payload if isinstance(payment, ScriptHash) else None

    def purpose(self, tag: int, index: int) -> Purpose | None:
        """What a redeemer pointer points at, or None when nothing is there."""
        items = self.purposes[tag] if 0 <= tag < len(PURPOSE_NAMES) else []
        return items[index] if 0 <= index < len(items) else None

    def needed(self) -> list[Purpose]:
        """Every purpose a script must authorise (the ledger's scriptsNeeded), in ledger order."""
        return [p for tag in sorted(self.purposes) for p in self.purposes[tag] if p.script_hash]

    def spending_datum(self, ref: TransactionInput) -> bytes | None:
        """The datum a spending script gets: inline, or found by hash among witness datums."""
        output = self.view.utxo[ref]
        if output.datum is not None:
            return datum_cbor(output.datum)
        if output.datum_hash is not None:
            return self.datums.get(output.datum_hash.payload)
        return None

    # -- V3 ------------------------------------------------------------------------------

    def arguments(self, language: int, purpose: Purpose, redeemer: Redeemer) -> bytes:
        """CBOR of a script's arguments.

        V3 takes [context]; V1/V2 take [redeemer, context], with the datum first when spending.
        """
        if language == 3:
            info = self._info(purpose)
            return encode_data([Constr(0, (RawData(self.tx_info), RawData(redeemer.data), info))])
        context = Constr(0, (RawData(self.legacy_tx_info(language)), self._legacy_purpose(purpose)))
        arguments: list[Data] = [RawData(redeemer.data), context]
        if purpose.tag == SPEND:
            datum = self.spending_datum(purpose.target)
            if datum is None:
                raise ContextError(f"a Plutus V{language} script needs a datum to spend with")
            arguments.insert(0, RawData(datum))
        return encode_data(arguments)

    @functools.cached_property
    def tx_info(self) -> bytes:
        """The encoded V3 TxInfo, built once per transaction."""
        return encode_data(self._build_tx_info())

    def _build_tx_info(self) -> Constr:
        fee = self.field(2)
        treasury = self.field(21)
        donation = self.field(22) or None
        return Constr(
            0,
            (
                [self._in_info(ref) for ref in self.inputs],
                [self._in_info(ref) for ref in self.reference_inputs],
                [tx_out(output) for output in self.dtx.tx.transaction_body.outputs],
                fee,
                DataMap(tuple(_assets(self.mint))),
                [tx_cert(cert, self._protocol_major) for cert in self.certificates],
                _credential_map(
                    (reward_credential(account), amount) for account, amount in self.withdrawals
                ),
                self._valid_range(),
                sorted(bytes(signer) for signer in self._items(14)),
                self._redeemer_map(),
                DataMap(tuple((h, RawData(d)) for h, d in sorted(self.datums.items()))),
                self.dtx.id,
                self._votes(),
                [proposal_procedure(p) for p in self.proposals],
                maybe(treasury),
                maybe(donation),
            ),
        )

    @property
    def _protocol_major(self) -> int:
        return self.view.params.protocol_version[0]

    def _in_info(self, ref: TransactionInput) -> Constr:
        output = self.view.utxo.get(ref)
        if output is None:
            raise ContextError(f"unknown output reference {format_out_ref(ref)}")
        return Constr(0, (out_ref(ref), tx_out(output)))

    def _valid_range(self) -> Constr:
        """Lower bound inclusive, upper bound exclusive, infinite bounds inclusive."""
        start, end = self.field(8), self.field(3)
        posix = self.view.slots.slot_to_posix_ms
        lower = Constr(0) if start is None else Constr(1, (posix(start),))
        upper = (
            Constr(0, (Constr(2), TRUE))
            if end is None
            else Constr(0, (Constr(1, (posix(end),)), FALSE))
        )
        return Constr(0, (Constr(0, (lower, TRUE)), upper))

    def _redeemer_map(self) -> DataMap:
        return DataMap(
            tuple((self.purpose_data(self._resolve(r)), RawData(r.data)) for r in self.redeemers)
        )

    def _resolve(self, redeemer: Redeemer) -> Purpose:
        purpose = self.purpose(redeemer.tag, redeemer.index)
        if purpose is None:
            raise ContextError(f"redeemer {redeemer.pointer} points at nothing")
        return purpose

    def _votes(self) -> DataMap:
        return DataMap(
            tuple(
                (
                    voter(who),
                    DataMap(
                        tuple(
                            (Constr(0, (gaid[0], gaid[1])), Constr(procedure[0]))
                            for gaid, procedure in sorted(ballots.items())
                        )
                    ),
                )
                for who, ballots in self.votes
            )
        )

    def purpose_data(self, purpose: Purpose) -> Constr:
        """The V3 ScriptPurpose (the redeemer map's key)."""
        target = purpose.target
        if purpose.tag == SPEND:
            return Constr(1, (out_ref(target),))
        if purpose.tag == MINT:
            return Constr(0, (target,))
        if purpose.tag == PUBLISH:
            return Constr(3, (purpose.index, tx_cert(target, self._protocol_major)))
        if purpose.tag == WITHDRAW:
            return Constr(2, (reward_credential(target),))
        if purpose.tag == VOTE:
            return Constr(4, (voter(target),))
        return Constr(5, (purpose.index, proposal_procedure(target)))

    def _info(self, purpose: Purpose) -> Constr:
        """The V3 ScriptInfo: the purpose, with the optional datum when spending."""
        data = self.purpose_data(purpose)
        if purpose.tag != SPEND:
            return data
        datum = self.spending_datum(purpose.target)
        return Constr(1, (*data.fields, maybe(None if datum is None else RawData(datum))))

    # -- V1 / V2 --------------------------------------------------------------------------

    def legacy_tx_info(self, language: int) -> bytes:
        """The encoded V1 or V2 TxInfo, or ContextError for what those versions cannot see."""
        if language not in self._legacy_infos:
            self._require_legacy_compatible(language)
            self._legacy_infos[language] = encode_data(self._build_legacy_tx_info(language))
        return self._legacy_infos[language]

    def _require_legacy_compatible(self, language: int) -> None:
        """Conway's translation errors for V1/V2 (and V1's for Babbage features)."""
        unsupported = [
            what
            for what, present in (
                ("voting procedures", bool(self.votes)),
                ("proposal procedures", bool(self.proposals)),
                ("the current treasury value", self.field(21) is not None),
                ("a treasury donation", self.field(22) is not None),
                ("Conway certificates", any(c[0] not in _LEGACY_CERTS for c in self.certificates)),
            )
            if present
        ]
        if language == 1:
            outputs = [self.view.utxo[ref] for ref in self.inputs]
            outputs += list(self.dtx.tx.transaction_body.outputs)
            unsupported += [
                what
                for what, present in (
                    ("reference inputs", bool(self.reference_inputs)),
                    ("inline datums", any(o.datum is not None for o in outputs)),
                    ("reference scripts", any(o.script is not None for o in outputs)),
                )
                if present
            ]
        if unsupported:
            raise ContextError(f"Plutus V{language} cannot see {', '.join(unsupported)}")

    def _build_legacy_tx_info(self, language: int) -> Constr:
        body = self.dtx.tx.transaction_body
        inputs = [
            Constr(0, (legacy_out_ref(ref), legacy_tx_out(self.view.utxo[ref], language)))
            for ref in self.inputs
        ]
        outputs = [legacy_tx_out(output, language) for output in body.outputs]
        fee = _value(self.field(2), {})
        mint = _value(0, self.mint)  # V1/V2 keep a zero-ADA entry first
        certs = [legacy_cert(cert) for cert in self.certificates]
        withdrawals = [
            (Constr(0, (reward_credential(a),)), amount) for a, amount in self.withdrawals
        ]
        signatories = sorted(bytes(signer) for signer in self._items(14))
        datums = [(h, RawData(d)) for h, d in sorted(self.datums.items())]
        tx_id = Constr(0, (self.dtx.id,))
        if language == 1:
            pairs = [Constr(0, pair) for pair in withdrawals]
            data = [Constr(0, pair) for pair in datums]
            fields = (
                inputs,
                outputs,
                fee,
                mint,
                certs,
                pairs,
                self._valid_range(),
                signatories,
                data,
            )
            return Constr(0, (*fields, tx_id))
        redeemers = DataMap(
            tuple((self._legacy_purpose(self._resolve(r)), RawData(r.data)) for r in self.redeemers)
        )
        references = [
            Constr(0, (legacy_out_ref(ref), legacy_tx_out(self.view.utxo[ref], language)))
            for ref in self.reference_inputs
        ]
        return Constr(
            0,
            (
                inputs,
                references,
                outputs,
                fee,
                mint,
                certs,
                DataMap(tuple(withdrawals)),
                self._valid_range(),
                signatories,
                redeemers,
                DataMap(tuple(datums)),
                tx_id,
            ),
        )

    def _legacy_purpose(self, purpose: Purpose) -> Constr:
        """The V1/V2 ScriptPurpose: a wrapped TxId, StakingHash rewards, DCert certificates."""
        if purpose.tag == SPEND:
            return Constr(1, (legacy_out_ref(purpose.target),))
        if purpose.tag == MINT:
            return Constr(0, (purpose.target,))
        if purpose.tag == WITHDRAW:
            return Constr(2, (Constr(0, (reward_credential(purpose.target),)),))
        if purpose.tag == PUBLISH:
            return Constr(3, (legacy_cert(purpose.target),))
        raise ContextError(f"Plutus V1/V2 scripts cannot {purpose.name}")


# certificate kinds Plutus V1/V2 can see, as DCert constructors
_LEGACY_CERTS = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4}


def legacy_cert(cert: Any) -> Constr:
    """A certificate as a V1/V2 DCert (stake credentials as StakingHash)."""
    kind = cert[0]
    if kind not in _LEGACY_CERTS:
        raise ContextError(f"Plutus V1/V2 scripts cannot see certificate type {kind}")
    if kind in (0, 1, 2):
        stake = Constr(0, (_cddl_credential(cert[1]),))
        return Constr(kind, (stake, *cert[2:3]))
    return Constr(kind, (cert[1], cert[2]))


def legacy_out_ref(tx_in: TransactionInput) -> Constr:
    """V1/V2 TxOutRef: the TxId is wrapped in a constructor."""
    return Constr(0, (Constr(0, (tx_in.transaction_id.payload,)), tx_in.index))


def legacy_tx_out(output: TransactionOutput, language: int) -> Constr:
    """V2 TxOut has V3's shape; V1's is [address, value, Maybe datum hash]."""
    if language != 1:
        return tx_out(output)
    address, value, _, _ = tx_out(output).fields
    datum = None if output.datum_hash is None else output.datum_hash.payload
    return Constr(0, (address, value, maybe(datum)))


def _script_account(account: bytes) -> bytes | None:
    cred = reward_credential(account)
    return cred.fields[0] if cred.index == 1 else None

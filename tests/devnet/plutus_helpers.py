"""Helpers for tests that build Plutus transactions against the devnet's script rules.

Scripts are tiny hand-written UPLC programs (compile them with
`tests.devnet.handwritten.compile_uplc`); transactions are built
with pycardano, either by hand (full control over every field) or with pycardano's own
TransactionBuilder over `DevnetChainContext`, which evaluates with the devnet's evaluator.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

import cbor2
from pycardano import (
    Address,
    ChainContext,
    CostModels,
    ExecutionUnits,
    GenesisParameters,
    Network,
    PaymentSigningKey,
    PaymentVerificationKey,
    ProtocolParameters,
    Redeemer,
    RedeemerTag,
    Transaction,
    TransactionBody,
    TransactionId,
    TransactionInput,
    TransactionOutput,
    TransactionWitnessSet,
    UTxO,
    VerificationKeyHash,
    VerificationKeyWitness,
    plutus_script_hash,
    script_data_hash,
)
from pycardano.backend.ogmios_v6 import OgmiosV6ChainContext

from devnet import params as devnet_params
from devnet.phase2 import evaluation_result, run_job
from devnet.script_context import Constr, DataMap
from devnet.scripts import evaluation_jobs
from devnet.txdecode import DecodedTx, decode_tx
from devnet.view import LedgerView, SlotConfig

NETWORK = Network.TESTNET
ZERO_TIME_MS = 1_700_000_000_000
SLOT_LENGTH_MS = 1_000

# Plutus V3 validators (each receives the ScriptContext) beside tests.devnet.handwritten's.
ALWAYS_SUCCEEDS = "(program 1.1.0 (lam ctx (con unit ())))"
RETURNS_INTEGER = "(program 1.1.0 (lam ctx (con integer 1)))"
FAILS_WITH_TRACE = """
(program 1.1.0 (lam ctx
  (force [ (force (builtin trace)) (con string "no way") (delay (error)) ])))
"""


def script_address(script: Any, stake: Any = None) -> Address:
    return Address(plutus_script_hash(script), stake, network=NETWORK)


@dataclasses.dataclass(frozen=True)
class Wallet:
    signing_key: PaymentSigningKey

    @classmethod
    def generate(cls) -> Wallet:
        return cls(PaymentSigningKey.generate())

    @property
    def verification_key(self) -> PaymentVerificationKey:
        return self.signing_key.to_verification_key()

    @property
    def key_hash(self) -> VerificationKeyHash:
        return self.verification_key.hash()

    @property
    def address(self) -> Address:
        return Address(self.key_hash, network=NETWORK)

    def witness(self, body: TransactionBody) -> VerificationKeyWitness:
        return VerificationKeyWitness(self.verification_key, self.signing_key.sign(body.hash()))


def out_ref(n: int, index: int = 0) -> TransactionInput:
    """A made-up output reference; `n` picks the transaction id."""
    return TransactionInput(
        TransactionId(hashlib.blake2b(bytes([n]), digest_size=32).digest()), index
    )


def make_view(
    utxo: Mapping[TransactionInput, TransactionOutput],
    *,
    params: devnet_params.ProtocolParameters | None = None,
    slot: int = 1_000,
) -> LedgerView:
    return LedgerView(
        utxo=dict(utxo),
        params=params or devnet_params.ProtocolParameters(),
        slot=slot,
        slots=SlotConfig(zero_time_ms=ZERO_TIME_MS, slot_length_ms=SLOT_LENGTH_MS),
        reward_accounts={},
    )


def redeemer(
    tag: RedeemerTag, index: int, data: Any, memory: int = 1_000_000, cpu: int = 500_000_000
) -> Redeemer:
    """A pycardano redeemer pointing at (tag, index)."""
    made = Redeemer(data, ExecutionUnits(memory, cpu))
    made.tag, made.index = tag, index
    return made


def pycardano_cost_models(
    params: devnet_params.ProtocolParameters, languages: Iterable[int]
) -> CostModels:
    """Cost models as a pycardano client holds them, for its own script_data_hash."""
    parsed = OgmiosV6ChainContext._parse_cost_models(None, params.cost_models)
    return CostModels({lang - 1: parsed[f"PlutusV{lang}"] for lang in languages})


def seal(
    body: TransactionBody,
    *,
    signers: Iterable[Wallet] = (),
    params: devnet_params.ProtocolParameters | None = None,
    integrity: bool = True,
    languages: Iterable[int] = (3,),
    **witnesses: Any,
) -> DecodedTx:
    """Set the integrity hash (pycardano's computation), sign, encode and decode."""
    params = params or devnet_params.ProtocolParameters()
    redeemers = witnesses.get("redeemer")
    datums = witnesses.get("plutus_data")
    if integrity and (redeemers or datums):
        body.script_data_hash = script_data_hash(
            redeemers, datums, pycardano_cost_models(params, languages)
        )
    wits = TransactionWitnessSet(**witnesses)
    wits.vkey_witnesses = [wallet.witness(body) for wallet in signers] or None
    return decode_tx(Transaction(body, wits).to_cbor())


def vkey_hashes(dtx: DecodedTx) -> frozenset[bytes]:
    """Key hashes of the transaction's vkey witnesses (what the signature rules compute)."""
    witnesses = dtx.tx.transaction_witness_set.vkey_witnesses or []
    return frozenset(w.vkey.hash().payload for w in witnesses)


class DevnetChainContext(ChainContext):
    """A pycardano ChainContext over a LedgerView; evaluation uses the devnet's evaluator."""

    def __init__(self, view: LedgerView) -> None:
        self.view = view

    @property
    def protocol_param(self) -> ProtocolParameters:
        p = self.view.params
        return ProtocolParameters(
            min_fee_constant=p.min_fee_constant,
            min_fee_coefficient=p.min_fee_coefficient,
            max_block_size=p.max_block_body_size,
            max_tx_size=p.max_tx_size,
            max_block_header_size=p.max_block_header_size,
            key_deposit=p.key_deposit,
            pool_deposit=p.pool_deposit,
            pool_influence=p.pledge_influence,
            monetary_expansion=p.monetary_expansion,
            treasury_expansion=p.treasury_expansion,
            decentralization_param=Fraction(0),
            extra_entropy="",
            protocol_major_version=p.protocol_version[0],
            protocol_minor_version=p.protocol_version[1],
            min_utxo=0,
            min_pool_cost=p.min_pool_cost,
            price_mem=p.price_memory,
            price_step=p.price_steps,
            max_tx_ex_mem=p.max_tx_memory,
            max_tx_ex_steps=p.max_tx_steps,
            max_block_ex_mem=p.max_block_memory,
            max_block_ex_steps=p.max_block_steps,
            max_val_size=p.max_value_size,
            collateral_percent=p.collateral_percentage,
            max_collateral_inputs=p.max_collateral_inputs,
            coins_per_utxo_word=0,
            coins_per_utxo_byte=p.coins_per_utxo_byte,
            # exactly what pycardano's Ogmios backend makes of the served arrays
            cost_models=OgmiosV6ChainContext._parse_cost_models(None, p.cost_models),
        )

    @property
    def genesis_param(self) -> GenesisParameters:
        return GenesisParameters(
            active_slots_coefficient=Fraction(1, 20),
            update_quorum=5,
            max_lovelace_supply=45_000_000_000_000_000,
            network_magic=42,
            epoch_length=432_000,
            system_start=ZERO_TIME_MS // 1000,
            slots_per_kes_period=129_600,
            slot_length=SLOT_LENGTH_MS // 1000,
            max_kes_evolutions=62,
            security_param=2160,
        )

    @property
    def network(self) -> Network:
        return NETWORK

    @property
    def epoch(self) -> int:
        return 1

    @property
    def last_block_slot(self) -> int:
        return self.view.slot

    def _utxos(self, address: str) -> list[UTxO]:
        return [UTxO(i, o) for i, o in self.view.utxo.items() if str(o.address) == address]

    def evaluate_tx_cbor(self, cbor: bytes | str) -> dict[str, ExecutionUnits]:
        raw = bytes.fromhex(cbor) if isinstance(cbor, str) else cbor
        jobs = evaluation_jobs(decode_tx(raw), self.view)
        results = evaluation_result([run_job(job, self.view.params.cost_models) for job in jobs])
        return {_pycardano_key(r["validator"]): _units(r["budget"]) for r in results}


def _pycardano_key(validator: Mapping[str, Any]) -> str:
    """pycardano keys evaluation results as "<redeemer tag name>:<index>"."""
    return f"{_PYCARDANO_TAGS[validator['purpose']]}:{validator['index']}"


def _units(budget: Mapping[str, int]) -> ExecutionUnits:
    return ExecutionUnits(budget["memory"], budget["cpu"])


_PYCARDANO_TAGS = {
    "spend": "spend",
    "mint": "mint",
    "publish": "certificate",
    "withdraw": "withdrawal",
    "vote": "voting",
    "propose": "proposing",
}


def always_succeeds(n: int = 0) -> str:
    """A V3 validator that returns unit; `n` only changes its hash."""
    return f"(program 1.1.0 (lam ctx [ (lam x (con unit ())) (con integer {n}) ]))"


def data_from_cbor(raw: bytes) -> Any:
    """Decode Plutus Data into script_context's Constr / DataMap / list / int / bytes."""
    return _as_data(cbor2.loads(raw))


def _as_data(value: Any) -> Any:
    if isinstance(value, cbor2.CBORTag):
        if value.tag == 102:
            index, fields = value.value
        else:
            index = value.tag - 121 if value.tag < 1280 else value.tag - 1280 + 7
            fields = value.value
        return Constr(index, tuple(_as_data(f) for f in fields))
    if isinstance(value, Mapping):
        return DataMap(tuple((_as_data(k), _as_data(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return [_as_data(item) for item in value]
    return value

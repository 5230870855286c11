"""Devnet helpers for the protocol tests: funded wallets, locked escrows, posted bonds, time
travel, and hand-made script transactions for attacks and their honest twins."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pytest
from pycardano import (
    Address,
    Asset,
    AssetName,
    ExecutionUnits,
    MultiAsset,
    Network,
    NonEmptyOrderedSet,
    PaymentSigningKey,
    PlutusData,
    PlutusV3Script,
    RawPlutusData,
    Redeemer,
    ScriptHash,
    ScriptPubkey,
    StakeSigningKey,
    Transaction,
    TransactionBuilder,
    TransactionInput,
    TransactionOutput,
    UTxO,
    Value,
    VerificationKeyWitness,
    Withdrawals,
    plutus_script_hash,
    script_hash,
)

from devnet.genesis import ADA
from devnet.process import DevnetProcess, funded
from offchain.chain.follower import Point, RollForward, follow
from offchain.chain.ogmios import OgmiosError, request
from offchain.chain.submit import submit, submit_and_wait
from offchain.protocol.job.receipt import Receipt
from offchain.protocol.ledger.addresses import from_plutus, to_plutus
from offchain.protocol.ledger.payloads import acceptance_payload, claim_payload, receipt_note, sign
from offchain.protocol.ledger.split import settle_split, slash_share
from offchain.protocol.ledger.types import (
    BatchSettle,
    BondDatum,
    EscrowDatum,
    Nothing,
    Payout,
    PayoutKind,
    Refund,
    Settle,
    SettleClaim,
    SettleReceipt,
    Slash,
    SlashPayout,
    TxOutRef,
)
from offchain.protocol.tx import batch as batches
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import (
    Clock,
    Wallet,
    fee_inputs,
    ledger_inputs,
    ledger_key,
    read_datum,
    script_source,
)

DEADLINE_MS = 40_000  # a job's deadline, from now
WINDOW_MS = 20_000  # its settle window
PRICE = 2_000  # lovelace per unit
MAX_UNITS = 3_600
ALLOWANCE = 2 * ADA
LOCKED = PRICE * MAX_UNITS + ALLOWANCE + 3 * ADA  # 3 ADA more than the job can cost
RESULT, EVIDENCE = b"\x01" * 32, b"\x02" * 32  # a job's result and metering evidence hashes
# The session deployment's terms: a bond's notice must outlast the close of the jobs it backs
# plus the refund window (a market quote closes about 70 minutes out with its defaults).
NOTICE_MS = 3 * 3600_000
REFUND_WINDOW_MS = 30_000  # after a close, only the consumer refunds this long
SLASH_SHARE_BPS = 2_500
BOND = 400 * ADA  # post_bond's default
SHARE = slash_share(BOND, SLASH_SHARE_BPS)  # what slashing it takes
OWED = LOCKED - ALLOWANCE  # what a refund or a cancel of a LOCKED escrow owes
SCRIPT_FAILED = 3136  # Ogmios: declared valid, but a script failed
UNBOUNDED = -1  # a validity bound left out of a hand-made transaction


async def confirm(devnet: DevnetProcess, tx: Transaction) -> Transaction:
    await submit_and_wait(devnet.url, tx, timeout_s=30)
    return tx


async def wallet(devnet: DevnetProcess, lovelace: int = 1_000 * ADA, stake: bool = False) -> Wallet:
    """A fresh key holding `lovelace` from the faucet (fresh, so balances are exact); with
    `stake`, at a full address (a stake key of its own), as real wallets have."""
    key = PaymentSigningKey.generate()
    made = staked(key) if stake else Wallet.of(key, Network.TESTNET)
    await fund(devnet, made.address, lovelace)
    return made


def staked(key: PaymentSigningKey) -> Wallet:
    """The wallet of `key` at a full address: its payment key and a stake key of its own."""
    stake = StakeSigningKey.generate().to_verification_key().hash()
    return Wallet(key, Address(key.to_verification_key().hash(), stake, Network.TESTNET))


async def fund(devnet: DevnetProcess, address: Address, lovelace: int) -> None:
    """One more UTxO of `lovelace` at `address` from the faucet, confirmed."""
    await funded(devnet.url, str(address), lovelace, timeout_s=30)


async def holding_block(
    devnet: DevnetProcess, tx_id: str, since: Point, timeout_s: float = 30
) -> dict[str, Any]:
    """The block that holds `tx_id`, followed from `since` (waiting for it up to `timeout_s`),
    or from the chain's start when a fork took `since` away: on a forking chain a point a
    test read earlier may be orphaned, and a transaction may land in another block than
    first."""
    async with contextlib.aclosing(follow(devnet.url, [since, "origin"])) as events:
        async with asyncio.timeout(timeout_s):
            async for event in events:
                if isinstance(event, RollForward) and any(
                    tx["id"] == tx_id for tx in event.block["transactions"]
                ):
                    return event.block
    raise AssertionError("a chain follower never ends")


async def tx_fee(devnet: DevnetProcess, tx_id: str, since: Point) -> int:
    """The fee a transaction confirmed after `since` paid, read from the block that holds it."""
    block = await holding_block(devnet, tx_id, since)
    (tx,) = [t for t in block["transactions"] if t["id"] == tx_id]
    return int(tx["fee"]["ada"]["lovelace"])


async def height_on_chain(devnet: DevnetProcess, tx_id: str, seen_in: dict[str, Any]) -> int:
    """The height of the block that holds `tx_id` on the chain now: the block `seen_in`
    (where it was seen) unless a fork took that block."""
    point = {"slot": seen_in["slot"], "id": seen_in["id"]}
    try:
        async with contextlib.aclosing(follow(devnet.url, [point])) as events:
            await anext(events)  # the intersection: still on chain
        return int(seen_in["height"])
    except OgmiosError:  # orphaned
        return int((await holding_block(devnet, tx_id, "origin"))["height"])


def balance(devnet: DevnetProcess, address: Address) -> int:
    return sum(u.output.amount.coin for u in devnet.context().utxos(address))


def output(tx: Transaction, index: int) -> UTxO:
    return UTxO(TransactionInput(tx.id, index), tx.transaction_body.outputs[index])


def job_id(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def escrow_terms(consumer: Wallet, provider: Wallet, now_ms: int, **changes) -> EscrowDatum:
    """A job's datum with the test defaults; `changes` overrides fields by name."""
    datum = escrows.new_escrow(
        consumer.address, provider.address, provider.vkey, PRICE, MAX_UNITS,
        now_ms + DEADLINE_MS, WINDOW_MS, job_id(str(now_ms)), ALLOWANCE,
    )  # fmt: skip
    return dataclasses.replace(datum, **changes)


async def lock(
    devnet: DevnetProcess,
    deployment: Deployment,
    consumer: Wallet,
    provider: Wallet,
    lovelace: int = LOCKED,
    paid_at: Address | None = None,
    **changes,
) -> UTxO:
    """An escrow for `provider`'s key, paying it at `paid_at` (None: its key's address)."""
    context = devnet.context()
    datum = escrow_terms(consumer, provider, Clock.now(context).tip_ms, **changes)
    if paid_at is not None:
        datum = dataclasses.replace(datum, provider=to_plutus(paid_at))
    tx = consumer.sign(escrows.lock(context, deployment, consumer.address, datum, lovelace))
    return output(await confirm(devnet, tx), escrows.ESCROW_OUTPUT)


async def post_bond(
    devnet: DevnetProcess, deployment: Deployment, provider: Wallet, lovelace: int = BOND
) -> UTxO:
    tx = provider.sign(
        bonds.create(devnet.context(), deployment, provider.address, provider.vkey, lovelace)
    )
    return output(await confirm(devnet, tx), bonds.BOND_OUTPUT)


def continuing(bond: UTxO, lovelace: int = BOND - SHARE, datum=None) -> TransactionOutput:
    """The bond going on (by default slashed once) with its datum."""
    return TransactionOutput(bond.output.address, lovelace, datum=datum or bond.output.datum)


async def travel_to(devnet: DevnetProcess, posix_ms: int) -> None:
    """Move the chain's clock until its tip is at or after `posix_ms`."""
    clock = Clock.now(devnet.context())
    slots = clock.time.posix_ms_to_slot(posix_ms) + 1 - clock.tip_slot
    if slots > 0:
        await request(devnet.url, "devnet/advanceTime", {"slots": slots})


async def rejected(
    devnet: DevnetProcess, tx: Transaction, code: int, *fragments: str
) -> OgmiosError:
    """Submit `tx` and require the ledger to refuse it with `code` and all `fragments` in its
    reason (a script's traces are in the reason)."""
    with pytest.raises(OgmiosError) as refused:
        await submit(devnet.url, tx)
    assert refused.value.code == code, refused.value.message
    for fragment in fragments:
        assert fragment in refused.value.message, refused.value.message
    return refused.value


@dataclasses.dataclass(frozen=True)
class Spend:
    utxo: UTxO
    ref: UTxO  # the reference UTxO holding its script
    redeemer: PlutusData | int | Callable[[int], PlutusData]  # called with its input's index
    datum: PlutusData | None = None  # for the witness set, when `utxo` holds only its hash


def handmade(
    devnet: DevnetProcess,
    payer: Wallet,
    fee: Sequence[UTxO],
    *,
    spends: Sequence[Spend] = (),
    outputs: Sequence[TransactionOutput] = (),
    withdraw: tuple[UTxO, Address, PlutusData] | None = None,
    start: int | None = None,
    ttl: int | None = None,
    signers: Sequence[PaymentSigningKey] = (),
    mint: tuple[UTxO, MultiAsset, PlutusData] | None = None,
    native: tuple[MultiAsset, ScriptPubkey] | None = None,
    certificates: Sequence = (),
    publish: tuple[UTxO, PlutusData] | None = None,
    refund: int = 0,
    withdrawn: int = 0,
    also_withdraw: Sequence[tuple[UTxO, Address, PlutusData]] = (),
) -> Transaction:
    """A script transaction exactly as given: nothing evaluated, fixed budgets shared out,
    `fee` UTxOs of `payer` (pick them first when a redeemer indexes inputs). `start`/`ttl`
    None means pycardano's default range around the tip, UNBOUNDED means no bound; `refund`
    (a deregistration's deposit, which pycardano does not count) goes to the change;
    `withdrawn` is what `withdraw` takes from the reward account; `also_withdraw` are more
    script withdrawals of 0, like `withdraw` (pycardano indexes withdrawals by their bytes,
    the ledger puts scripts first: a key's account beside a script's gets the wrong one)."""
    builder = TransactionBuilder(devnet.context())
    redeemers = len(spends) + len(also_withdraw)
    redeemers += sum(x is not None for x in (withdraw, mint, publish))
    params = devnet.context().protocol_param
    budget = ExecutionUnits(params.max_tx_ex_mem // redeemers, params.max_tx_ex_steps // redeemers)
    inputs = ledger_inputs([s.utxo for s in spends], fee)
    for spend in spends:
        data = spend.redeemer
        if callable(data):
            data = data(inputs.index(spend.utxo.input))
        script = script_source(builder, spend.ref)
        builder.add_script_input(spend.utxo, script, spend.datum, Redeemer(data, budget))
    for made in outputs:
        builder.add_output(made)
    if withdraw is not None:
        ref, reward_address, redeemer = withdraw
        accounts = {bytes(reward_address): withdrawn, **{bytes(a): 0 for _, a, _ in also_withdraw}}
        builder.withdrawals = Withdrawals(accounts)
        builder.add_withdrawal_script(script_source(builder, ref), Redeemer(redeemer, budget))
        for ref, _, redeemer in also_withdraw:
            builder.add_withdrawal_script(script_source(builder, ref), Redeemer(redeemer, budget))
    if mint is not None:
        ref, assets, redeemer = mint
        builder.mint = assets
        builder.add_minting_script(script_source(builder, ref), Redeemer(redeemer, budget))
    if native is not None:  # tokens minted under a payer's own key (see junk_tokens)
        builder.mint, builder.native_scripts = native[0], [native[1]]
    if certificates:
        builder.certificates = list(certificates)
    if publish is not None:  # a script witnessing the last certificate
        ref, redeemer = publish
        builder.add_certificate_script(script_source(builder, ref), Redeemer(redeemer, budget))
    for utxo in fee:
        builder.add_input(utxo)
    builder.validity_start, builder.ttl = start, ttl
    builder.required_signers = [k.to_verification_key().hash() for k in signers] or None
    body = builder.build(change_address=payer.address, auto_required_signers=False)
    if start == UNBOUNDED:
        body.validity_start = None
    if ttl == UNBOUNDED:
        body.ttl = None
    body.outputs[-1].amount.coin += refund
    witnesses = builder.build_witness_set(True)
    keys = {k.payload: k for k in (payer.key, *signers)}.values()
    witnesses.vkey_witnesses = NonEmptyOrderedSet(
        [VerificationKeyWitness(k.to_verification_key(), k.sign(body.hash())) for k in keys]
    )
    return Transaction(body, witnesses)


def plain_fee(devnet: DevnetProcess, payer: Wallet) -> list[UTxO]:
    return fee_inputs(devnet.context(), payer.address)


# --- hand-made escrow transactions ----------------------------------------------------------


def tagged(to: Address, lovelace: int, kind: PayoutKind, escrow: UTxO) -> TransactionOutput:
    """A payout output as the validators look for it (attacks vary one part of it)."""
    return TransactionOutput(to, lovelace, datum=Payout(int(kind), TxOutRef.of(escrow.input)))


def slash_tagged(to: Address, lovelace: int, escrow: UTxO, bond: UTxO) -> TransactionOutput:
    """A slash's payout output: its tag names the escrow and the bond it takes from."""
    tag = SlashPayout(TxOutRef.of(escrow.input), TxOutRef.of(bond.input))
    return TransactionOutput(to, lovelace, datum=tag)


def accept(
    deployment: Deployment,
    key: PaymentSigningKey,
    escrow: UTxO,
    network_id: int = 0,
    job: bytes | None = None,
) -> bytes:
    """An Acceptance of `escrow` backed by `deployment`'s bond, signed by `key` (the
    provider's, or a forger's); `job` is read from the escrow's inline datum unless given."""
    if job is None:
        job = escrows.escrow_datum(deployment, escrow).job_id
    payload = acceptance_payload(
        network_id, deployment.escrow_hash, escrow.input, job, deployment.bond_hash
    )
    return sign(key, payload)


def to_settle(
    deployment: Deployment,
    key: PaymentSigningKey,
    escrow: UTxO,
    units: int,
    result_hash: bytes,
    evidence_hash: bytes,
) -> batches.ToSettle:
    """`escrow` beside the receipt `key` signs for `units` of it, as settle takes them."""
    receipt = Receipt.sign(
        key, deployment.network_id, deployment.settle_hash, escrow.input, units, result_hash,
        evidence_hash,
    )  # fmt: skip
    return escrow, receipt


def claim(
    deployment: Deployment,
    key: PaymentSigningKey,
    claimed: Sequence[tuple[UTxO, int]],
    note: bytes = b"",
    vkey: bytes | None = None,
    **signed: object,
) -> SettleClaim:
    """A claim on `claimed` (escrows with units) signed by `key` (named as `vkey`, default its
    own); `signed` overrides what the signature covers (claim_payload's argument names)."""
    fields: dict = dict(
        network_id=deployment.network_id, settle_hash=deployment.settle_hash, note=note,
        claims=[(escrow.input, units) for escrow, units in claimed],
    )  # fmt: skip
    signature = sign(key, claim_payload(**{**fields, **signed}))
    return SettleClaim(note, signature, key.to_verification_key().payload if vkey is None else vkey)


def receipt(
    deployment: Deployment, key: PaymentSigningKey, escrow: UTxO, units: int, **signed: object
) -> SettleReceipt:
    """`escrow`'s own receipt for `units`, signed by `key` (`signed`: as for `claim`)."""
    note = receipt_note(RESULT, EVIDENCE)
    return SettleReceipt(note, claim(deployment, key, [(escrow, units)], note, **signed).signature)


def terms(escrow: UTxO) -> EscrowDatum:
    """An escrow's datum, at whichever escrow script it sits."""
    at = escrow.output.address.payment_part
    assert isinstance(at, ScriptHash)
    return read_datum(escrow, EscrowDatum, at, "escrow")


def settle_by_hand(
    devnet: DevnetProcess,
    deployment: Deployment,
    payer: Wallet,
    escrows_in: Sequence[UTxO],
    items: Sequence[int],
    outputs: Sequence[TransactionOutput],
    first_refund: int,
    claims: Sequence[SettleClaim] = (),
    receipts: Sequence[SettleReceipt] = (),
    ttl: int | None = None,
    scripts: Sequence[UTxO] = (),
    **extra,
) -> Transaction:
    """A batch settle as given: `items` (units, signer, payee per escrow in ledger order: see
    `BatchSettle`), the ttl by default the earliest close of the escrows; an escrow of another
    escrow script spends by its reference UTxO among `scripts`; `extra` goes to `handmade`
    (more spends go after the escrows')."""
    spent = sorted(escrows_in, key=ledger_key)
    if ttl is None:
        close = min(terms(e).close for e in spent)
        ttl = Clock.now(devnet.context()).ttl_until(close)
    batch = BatchSettle(list(items), list(claims), list(receipts), first_refund)
    refs = {plutus_script_hash(_script_of(r)): r for r in (deployment.escrow_ref, *scripts)}
    spends = [Spend(e, refs[e.output.address.payment_part], Settle()) for e in spent]
    return handmade(
        devnet, payer, plain_fee(devnet, payer),
        spends=[*spends, *extra.pop("spends", ())], outputs=outputs,
        withdraw=(deployment.settle_ref, deployment.reward_address, batch), ttl=ttl, **extra,
    )  # fmt: skip


@dataclasses.dataclass
class Plan:
    """An honest batch settle, made by hand: its escrows (ledger order), items, outputs, first
    refund, claims and receipts, what each claim covers (`claimed`, to sign it again), and
    what each party's address gains when it confirms (the submitter's change aside)."""

    escrows: list[UTxO]
    items: list[int]
    outputs: list[TransactionOutput]
    first_refund: int
    claims: list[SettleClaim]
    receipts: list[SettleReceipt]
    claimed: list[list[tuple[UTxO, int]]]
    gains: dict[str, int]  # by address (bech32)

    def settle(self, devnet: DevnetProcess, deployment: Deployment, payer: Wallet, **extra):
        extra = {
            "items": self.items, "claims": self.claims, "receipts": self.receipts, **extra
        }  # fmt: skip
        return settle_by_hand(
            devnet, deployment, payer, self.escrows, outputs=self.outputs,
            first_refund=self.first_refund, **extra,
        )  # fmt: skip

    def item(self, escrow: UTxO) -> int:
        """Where `escrow`'s triple starts in `items`."""
        return 3 * [e.input for e in self.escrows].index(escrow.input)

    def changed(self, escrow: UTxO, units=None, signer=None, payee=None) -> Plan:
        """This plan with `escrow`'s item triple changed where given (signatures kept)."""
        items = list(self.items)
        at = self.item(escrow)
        for offset, value in enumerate((units, signer, payee)):
            if value is not None:
                items[at + offset] = value
        return dataclasses.replace(self, items=items)


def plan(
    deployment: Deployment,
    claims: Sequence[tuple[Wallet, Sequence[tuple[UTxO, int]]]],
    receipts: Sequence[tuple[Wallet, UTxO, int]] = (),
) -> Plan:
    """The honest settle of `claims` (each a provider's claim on escrows with units, in order)
    and `receipts` (each an escrow's own receipt): one output per provider address owed
    anything (in order of first appearance, claims first), holding price x units of its
    escrows whatever signed them; then one refund per run of one consumer's escrows (adjacent
    in ledger order) owed anything, holding locked - due - fee_allowance of each, summed."""
    signer: dict[TransactionInput, int] = {}
    units_of: dict[TransactionInput, tuple[UTxO, Wallet, int]] = {}
    made_claims = []
    for c, (provider, claimed) in enumerate(claims):
        made_claims.append(claim(deployment, provider.key, claimed))
        for escrow, units in claimed:
            signer[escrow.input] = c
            units_of[escrow.input] = (escrow, provider, units)
    for provider, escrow, units in receipts:
        signer[escrow.input] = -1
        units_of[escrow.input] = (escrow, provider, units)
    dues: dict[str, int] = {}
    for escrow, provider, units in units_of.values():
        due = terms(escrow).price_per_unit * units
        if due or str(provider.address) in dues:
            dues[str(provider.address)] = dues.get(str(provider.address), 0) + due
    payees = [to for to, due in dues.items() if due]
    outputs = [TransactionOutput(Address.from_primitive(to), dues[to]) for to in payees]
    gains = {to: dues[to] for to in payees}
    first_refund = len(outputs)
    spent = sorted((e for e, _, _ in units_of.values()), key=ledger_key)
    items: list[int] = []
    made_receipts = []
    runs: list[tuple[PlutusData, int]] = []
    for escrow in spent:
        _, provider, units = units_of[escrow.input]
        datum = terms(escrow)
        due = datum.price_per_unit * units
        payee = payees.index(str(provider.address)) if due else -1
        items += [units, signer[escrow.input], payee]
        if signer[escrow.input] == -1:
            made_receipts.append(receipt(deployment, provider.key, escrow, units))
        owed = settle_split(
            escrow.output.amount.coin, datum.price_per_unit, units, datum.max_units,
            datum.fee_allowance,
        ).consumer  # fmt: skip
        if runs and runs[-1][0] == datum.consumer:
            runs[-1] = (datum.consumer, runs[-1][1] + owed)
        else:
            runs.append((datum.consumer, owed))
    for consumer, owed in runs:
        if owed:
            to = from_plutus(consumer, deployment.network)
            outputs.append(TransactionOutput(to, owed))
            gains[str(to)] = gains.get(str(to), 0) + owed
    claimed = [list(c) for _, c in claims]
    return Plan(spent, items, outputs, first_refund, made_claims, made_receipts, claimed, gains)


async def confirm_gains(
    devnet: DevnetProcess, tx: Transaction, gains: dict[str, int]
) -> Transaction:
    """Confirm `tx` and require each address (bech32) to gain exactly what `gains` says."""
    before = {to: balance(devnet, Address.from_primitive(to)) for to in gains}
    await confirm(devnet, tx)
    after = {to: balance(devnet, Address.from_primitive(to)) for to in gains}
    assert {to: after[to] - before[to] for to in gains} == gains
    return tx


async def lock_together(
    devnet: DevnetProcess,
    deployment: Deployment,
    consumer: Wallet,
    providers: Sequence[Wallet],
    lovelace: int = LOCKED,
) -> list[UTxO]:
    """One escrow for each provider, locked by `consumer` in one transaction (outputs 0, 1,
    ...: adjacent in ledger order)."""
    context = devnet.context()
    now = Clock.now(context).tip_ms
    builder = TransactionBuilder(context)
    builder.add_input_address(consumer.address)
    for n, provider in enumerate(providers):
        datum = escrow_terms(consumer, provider, now, job_id=job_id(f"{now}/{n}"))
        builder.add_output(escrows.escrow_output(context, deployment, datum, lovelace))
    tx = builder.build_and_sign([consumer.key], change_address=consumer.address)
    await confirm(devnet, tx)
    return [output(tx, n) for n in range(len(providers))]


def _script_of(ref: UTxO) -> PlutusV3Script:
    script = ref.output.script
    assert isinstance(script, PlutusV3Script)
    return script


def refund_to(consumer_output: int, own_input: int) -> Refund:
    return Refund(own_input, consumer_output)


def refund_by_hand(
    devnet: DevnetProcess,
    deployment: Deployment,
    payer: Wallet,
    refunds: Sequence[tuple[UTxO, int]],
    outputs: Sequence[TransactionOutput],
    start: int | None = None,
    witness: PlutusData | None = None,
    signers: Sequence[PaymentSigningKey] = (),
) -> Transaction:
    """Refund each escrow naming the given output; the lower bound defaults to the tip;
    `witness` is the datum of escrows locked under its hash; `signers` sign it as required
    signers (the consumer, within the refund window)."""
    return handmade(
        devnet, payer, plain_fee(devnet, payer),
        spends=[
            Spend(e, deployment.escrow_ref, partial(refund_to, i), witness) for e, i in refunds
        ],
        outputs=outputs,
        start=Clock.now(devnet.context()).tip_slot if start is None else start, signers=signers,
    )  # fmt: skip


def junk_tokens(owner: Wallet, count: int = 200) -> tuple[ScriptPubkey, MultiAsset]:
    """`count` one-byte-named tokens under `owner`'s own policy: dust to weigh a UTxO down."""
    policy = ScriptPubkey(owner.key_hash)
    names = {AssetName(bytes([n])): 1 for n in range(count)}
    return policy, MultiAsset({script_hash(policy): Asset(names)})


async def bond_with_tokens(
    devnet: DevnetProcess, deployment: Deployment, provider: Wallet, tokens: int = 20
) -> UTxO:
    """A bond of BOND lovelace that also holds `tokens` junk tokens (anyone may lock such a
    UTxO at a bond address, and top-ups must keep them)."""
    policy, held = junk_tokens(provider, tokens)
    datum = BondDatum(to_plutus(provider.address), provider.vkey, Nothing())
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(provider.address)
    builder.mint, builder.native_scripts = held, [policy]
    address = deployment.bond_address(provider.address)
    builder.add_output(TransactionOutput(address, Value(BOND, held), datum=datum))
    tx = builder.build_and_sign([provider.key], change_address=provider.address)
    return output(await confirm(devnet, tx), 0)


async def lock_by_hand(
    devnet: DevnetProcess,
    deployment: Deployment,
    consumer: Wallet,
    provider: Wallet,
    lovelace: int = LOCKED,
    datum: PlutusData | RawPlutusData | None = None,
    dust: bool = False,
    **changes,
) -> UTxO:
    """An escrow output made without the lock builder's checks: anyone can do this."""
    context = devnet.context()
    if datum is None:
        datum = escrow_terms(consumer, provider, Clock.now(context).tip_ms, **changes)
    builder = TransactionBuilder(context)
    builder.add_input_address(consumer.address)
    value = Value(lovelace)
    if dust:
        policy, value.multi_asset = junk_tokens(consumer)
        builder.mint, builder.native_scripts = value.multi_asset, [policy]
    stake = from_plutus(escrow_terms(consumer, provider, 0).consumer, deployment.network)
    builder.add_output(TransactionOutput(deployment.escrow_address(stake), value, datum=datum))
    tx = builder.build_and_sign([consumer.key], change_address=consumer.address)
    return output(await confirm(devnet, tx), 0)


# --- hand-made bond transactions ----------------------------------------------------------


def slash_by_hand(
    devnet: DevnetProcess,
    deployment: Deployment,
    payer: Wallet,
    escrow: UTxO,
    bonds: Sequence[UTxO],
    slash: Callable[[int], Slash],
    outputs: Sequence[TransactionOutput],
    escrow_redeemer: Callable[[int], PlutusData] | None = None,
    witness: PlutusData | None = None,
    **extra,
) -> Transaction:
    """Spend `escrow` (Refund to output 0 unless told otherwise; `witness` is its datum when
    it holds only the hash) and each bond with the Slash that `slash` makes from the escrow's
    input index; `extra` goes to `handmade`."""
    fee = plain_fee(devnet, payer)
    own = ledger_inputs([escrow, *bonds], fee).index(escrow.input)
    spends = [
        Spend(escrow, deployment.escrow_ref, escrow_redeemer or partial(refund_to, 0), witness),
        *(Spend(b, deployment.bond_ref, slash(own)) for b in bonds),
    ]
    extra.setdefault("start", Clock.now(devnet.context()).tip_slot)
    return handmade(devnet, payer, fee, spends=spends, outputs=outputs, **extra)


def bond_by_hand(
    devnet: DevnetProcess,
    deployment: Deployment,
    payer: Wallet,
    bond: UTxO,
    redeemer: PlutusData,
    outputs: Sequence[TransactionOutput] = (),
    **extra,
) -> Transaction:
    """Spend `bond` with `redeemer` into `outputs`; `extra` goes to `handmade`."""
    spends = [Spend(bond, deployment.bond_ref, redeemer)]
    return handmade(
        devnet, payer, plain_fee(devnet, payer), spends=spends, outputs=outputs, **extra
    )

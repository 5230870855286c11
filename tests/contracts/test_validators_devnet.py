"""Every validator path on the devnet, built by hand with pycardano's TransactionBuilder and
the contracts' own classes.

Honest transactions pass (and their budgets are printed); a few twins fail, each by the check
it shows is not vacuous. Passing Settle/BatchSettle and Refund/Cancel also proves the
OpShin-type workarounds on the ledger's real context: withdrawals keyed by a bare Credential,
the RewardingScript credential (the settle script's), and the spending datum read from
ScriptInfo. The attack suite lives in tests/protocol/.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from opshin.ledger.api_v3 import (
    Address as PlutusAddress,
)
from opshin.ledger.api_v3 import (
    BoxedInt,
    NoStakingCredential,
    NoValue,
    PubKeyCredential,
    SomeStakingCredential,
    StakingHash,
    TxOutRef,
)
from pycardano import (
    Address,
    ExecutionUnits,
    IndefiniteList,
    Network,
    PaymentSigningKey,
    PlutusData,
    Redeemer,
    StakeCredential,
    StakeRegistration,
    Transaction,
    TransactionBuilder,
    TransactionInput,
    TransactionOutput,
    UTxO,
    Withdrawals,
    plutus_script_hash,
)

from contracts.artifacts import bond_script, escrow_script, settle_script
from contracts.onchain import (
    Acceptance,
    BatchSettle,
    BeginUnbond,
    BondDatum,
    Cancel,
    Claim,
    EscrowDatum,
    Payout,
    Refund,
    Settle,
    SettleClaim,
    Slash,
    SlashPayout,
    TopUp,
    Withdraw,
)
from devnet.genesis import ADA, wallet_address
from devnet.process import DevnetProcess
from offchain.chain.ogmios import OgmiosError, request
from offchain.protocol.tx.txbuild import script_source
from tests.devnet.payments import confirm, payment
from tests.protocol.onchain import travel_to

NETWORK_ID = 0
NOTICE_MS = 3_000
SLASH_SHARE_BPS = 2_500
REFUND_WINDOW_MS = 0  # anyone refunds right after the close (tests/protocol tests the window)
SETTLE = settle_script(NETWORK_ID)
SETTLE_HASH = plutus_script_hash(SETTLE)
ESCROW = escrow_script(SETTLE_HASH.payload, REFUND_WINDOW_MS)
ESCROW_HASH = plutus_script_hash(ESCROW)
BOND = bond_script(NETWORK_ID, ESCROW_HASH.payload, NOTICE_MS, SLASH_SHARE_BPS)
ESCROW_ADDRESS = Address(ESCROW_HASH, network=Network.TESTNET)
BOND_ADDRESS = Address(plutus_script_hash(BOND), network=Network.TESTNET)
SETTLE_REWARDS = Address(staking_part=SETTLE_HASH, network=Network.TESTNET)
PRICE = 1_000
MAX_UNITS = 5_000
ALLOWANCE = 1 * ADA
NOTE = bytes(range(32))  # a claim's note: a receipt's hash of its result and evidence
EVALUATION_FAILED = 3010  # Ogmios: evaluateTransaction, a script failed
FIXED = ExecutionUnits(7_000_000, 5_000_000_000)
# escrows in the largest batch: about 65K memory each, and pycardano's builder declares 20%
# more than evaluation gives (200 used 13.1M, declared 15.8M)
COUNT = 170  # a failing twin's budget: nothing to estimate


def plutus_address(address: Address) -> PlutusAddress:
    """A key-hash address as the ledger shows it to scripts (payment + optional stake key)."""
    stake = (
        SomeStakingCredential(StakingHash(PubKeyCredential(address.staking_part.payload)))
        if address.staking_part
        else NoStakingCredential()
    )
    return PlutusAddress(PubKeyCredential(address.payment_part.payload), stake)


def out_ref(utxo: UTxO) -> TxOutRef:
    return TxOutRef(utxo.input.transaction_id.payload, utxo.input.index)


def ledger_order(utxos: list[UTxO]) -> list[UTxO]:
    return sorted(utxos, key=lambda u: (u.input.transaction_id.payload, u.input.index))


@dataclasses.dataclass
class Party:
    key: PaymentSigningKey

    @property
    def address(self) -> Address:
        return wallet_address(self.key)

    @property
    def vkey(self) -> bytes:
        return self.key.to_verification_key().payload

    @property
    def key_hash(self):
        return self.key.to_verification_key().hash()


@dataclasses.dataclass
class World:
    devnet: DevnetProcess
    payer: Party  # pays fees and funds escrows and bonds
    consumer: Party
    provider: Party
    escrow_ref: UTxO  # reference-script UTxOs
    bond_ref: UTxO
    settle_ref: UTxO
    start_ms: int  # the chain's system start
    slot_ms: int

    def slot(self, posix_ms: int) -> int:
        """The first slot whose time is >= posix_ms."""
        return -(-(posix_ms - self.start_ms) // self.slot_ms)

    def time(self, slot: int) -> int:
        return self.start_ms + slot * self.slot_ms

    def now_slot(self) -> int:
        return self.devnet.context().last_block_slot

    def builder(self) -> TransactionBuilder:
        """A builder with one explicit fee input, so the input order is known up front."""
        builder = TransactionBuilder(self.devnet.context())
        utxos = self.devnet.context().utxos(self.payer.address)
        builder.add_input(max(utxos, key=lambda u: u.output.amount.coin))
        return builder


async def new_party(devnet: DevnetProcess, lovelace: int = 0) -> Party:
    party = Party(PaymentSigningKey.generate())
    if lovelace:
        await confirm(devnet, payment(devnet, "alice", party.address, lovelace))
    return party


async def publish(world_payer: Party, devnet: DevnetProcess, outputs) -> Transaction:
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(world_payer.address)
    for output in outputs:
        builder.add_output(output)
    tx = builder.build_and_sign([world_payer.key], change_address=world_payer.address)
    await confirm(devnet, tx)
    return tx


@pytest.fixture(scope="module")
async def world(devnet: DevnetProcess) -> World:
    payer = await new_party(devnet, 5_000 * ADA)
    # Reference scripts keep the transactions small; the settle script's stake credential is
    # registered with a legacy certificate (no witness), once per devnet: the protocol
    # tests' deployment of the same script may have done it already in this session.
    holder = wallet_address(PaymentSigningKey.generate())
    tx = await publish(
        payer,
        devnet,
        [
            TransactionOutput(holder, 40 * ADA, script=ESCROW),
            TransactionOutput(holder, 40 * ADA, script=BOND),
            TransactionOutput(holder, 40 * ADA, script=SETTLE),
        ],
    )
    summaries = await request(
        devnet.url,
        "queryLedgerState/rewardAccountSummaries",
        {"scripts": [SETTLE_HASH.payload.hex()]},
    )
    if not summaries:
        builder = TransactionBuilder(devnet.context())
        builder.add_input_address(payer.address)
        builder.certificates = [StakeRegistration(StakeCredential(SETTLE_HASH))]
        await confirm(devnet, builder.build_and_sign([payer.key], change_address=payer.address))
    start = await request(devnet.url, "queryNetwork/startTime")
    start_ms = int(datetime.strptime(start, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    outputs = tx.transaction_body.outputs
    return World(
        devnet=devnet,
        payer=payer,
        consumer=await new_party(devnet),
        provider=await new_party(devnet),
        escrow_ref=UTxO(TransactionInput(tx.id, 0), outputs[0]),
        bond_ref=UTxO(TransactionInput(tx.id, 1), outputs[1]),
        settle_ref=UTxO(TransactionInput(tx.id, 2), outputs[2]),
        start_ms=start_ms * 1000,
        slot_ms=devnet.slot_length_ms,
    )


async def evaluate(world: World, tx: Transaction) -> dict[str, dict[str, int]]:
    """The devnet's evaluateTransaction budgets, by "purpose:index"."""
    result = await request(
        world.devnet.url, "evaluateTransaction", {"transaction": {"cbor": tx.to_cbor().hex()}}
    )
    return {f"{r['validator']['purpose']}:{r['validator']['index']}": r["budget"] for r in result}


async def refused(world: World, tx: Transaction, validator: str, trace: str | None) -> None:
    """Evaluating `tx` must fail (Ogmios 3010) in `validator` ("spend", "withdraw") with
    `trace` among its traces (None: failing with none), so only the check under test can make
    the twin fail."""
    with pytest.raises(OgmiosError) as failed:
        await evaluate(world, tx)
    assert failed.value.code == EVALUATION_FAILED, failed.value.message
    traces = {
        (f["validator"]["purpose"], t)
        for f in failed.value.data
        for t in f["error"]["data"]["traces"] or [None]
    }
    assert (validator, trace) in traces, failed.value.data


def report(name: str, budgets: dict[str, dict[str, int]], tx: Transaction) -> None:
    memory = sum(b["memory"] for b in budgets.values())
    cpu = sum(b["cpu"] for b in budgets.values())
    print(f"\n{name}: {budgets} total memory {memory} cpu {cpu}; tx {len(tx.to_cbor())} bytes")


def escrow_datum(world: World, deadline_ms: int, window_ms: int) -> EscrowDatum:
    return EscrowDatum(
        consumer=plutus_address(world.consumer.address),
        provider=plutus_address(world.provider.address),
        provider_vkey=world.provider.vkey,
        price_per_unit=PRICE,
        max_units=MAX_UNITS,
        deadline=deadline_ms,
        settle_window=window_ms,
        job_id=bytes(32),
        fee_allowance=ALLOWANCE,
    )


async def lock_escrows(world: World, datum: EscrowDatum, lovelace: int, count: int) -> list[UTxO]:
    outputs = [TransactionOutput(ESCROW_ADDRESS, lovelace, datum=datum) for _ in range(count)]
    tx = await publish(world.payer, world.devnet, outputs)
    tx_id, body = tx.id, tx.transaction_body.outputs  # the id hashes the whole body: once
    return [UTxO(TransactionInput(tx_id, i), body[i]) for i in range(count)]


def input_index(builder: TransactionBuilder, utxo: UTxO, *more: UTxO) -> int:
    """Where `utxo` will sit among the builder's inputs plus `more`, in ledger order."""
    inputs = {u.input: u for u in [*builder.inputs, utxo, *more]}
    return ledger_order(list(inputs.values())).index(utxo)


def claim_signature(world: World, escrows: list[UTxO], units: int) -> bytes:
    """The provider's claim on `escrows` (ledger order), `units` each: out-refs and units in
    descending ledger order, as the settle script rebuilds it."""
    flat = [n for escrow in reversed(escrows) for n in (out_ref(escrow), units)]
    claim = Claim(
        b"UNCHAINED/claim/v1", NETWORK_ID, SETTLE_HASH.payload, NOTE, IndefiniteList(flat)
    )
    return world.provider.key.sign(claim.to_cbor())


def settle_tx(world: World, escrows: list[UTxO], units: int, close_ms: int) -> Transaction:
    """Settle escrows (all the provider's and the consumer's) in one transaction: one claim,
    signed once, paid in output 0; the consumer's one refund (its escrows are one
    run) in output 1."""
    builder = world.builder()
    escrows = ledger_order(escrows)
    for escrow in escrows:  # the reference script named once: pycardano counts each mention
        script = script_source(builder, world.escrow_ref)
        builder.add_script_input(escrow, script=script, redeemer=Redeemer(Settle()))
    due = PRICE * units * len(escrows)
    rest = sum(e.output.amount.coin - PRICE * units - ALLOWANCE for e in escrows)
    builder.add_output(TransactionOutput(world.provider.address, due))
    if rest > 0:
        builder.add_output(TransactionOutput(world.consumer.address, rest))
    signed = SettleClaim(NOTE, claim_signature(world, escrows, units), world.provider.vkey)
    payee = 0 if due else -1
    items = IndefiniteList([n for _ in escrows for n in (units, 0, payee)])
    batch = BatchSettle(items, [signed], [], 1)
    builder.withdrawals = Withdrawals({bytes(SETTLE_REWARDS): 0})
    builder.add_withdrawal_script(world.settle_ref, redeemer=Redeemer(batch))
    builder.ttl = world.slot(close_ms) - 1  # the exclusive upper bound stays <= close
    return builder.build_and_sign([world.payer.key], change_address=world.payer.address)


def far_close(world: World) -> tuple[int, int]:
    now = world.time(world.now_slot())
    return now + 600_000, 60_000


async def test_settle_one_escrow(world: World):
    deadline, window = far_close(world)
    [escrow] = await lock_escrows(world, escrow_datum(world, deadline, window), 20 * ADA, 1)
    tx = settle_tx(world, [escrow], 3_000, deadline + window)
    budgets = await evaluate(world, tx)
    report("settle x1 (spend + withdraw)", budgets, tx)
    await confirm(world.devnet, tx)
    paid = world.devnet.context().utxos(world.provider.address)
    assert any(u.output.amount.coin == PRICE * 3_000 for u in paid)


async def test_batch_settle(world: World):
    deadline, window = far_close(world)
    escrows = await lock_escrows(world, escrow_datum(world, deadline, window), 20 * ADA, 5)
    tx = settle_tx(world, escrows, 2_000, deadline + window)
    budgets = await evaluate(world, tx)
    report("settle x5", budgets, tx)
    await confirm(world.devnet, tx)
    assert not world.devnet.context().utxos(ESCROW_ADDRESS) or all(
        u.input not in [e.input for e in escrows]
        for u in world.devnet.context().utxos(ESCROW_ADDRESS)
    )


async def test_settle_spend_without_the_settle_withdrawal_fails(world: World):
    """No withdrawal at all: refused by the escrow's own trace, not a failing read."""
    deadline, window = far_close(world)
    [escrow] = await lock_escrows(world, escrow_datum(world, deadline, window), 20 * ADA, 1)
    builder = world.builder()
    builder.add_script_input(escrow, script=world.escrow_ref, redeemer=Redeemer(Settle(), FIXED))
    builder.add_output(TransactionOutput(world.provider.address, 19 * ADA))
    await refused(world, sign(world, builder), "spend", "settle needs the batch withdrawal")


async def wait_until(world: World, posix_ms: int) -> None:
    """Have a block past `posix_ms`: the devnet travels there in time, so no test sleeps
    through a close or a notice."""
    await travel_to(world.devnet, posix_ms)
    assert world.time(world.now_slot()) > posix_ms


async def short_escrow(world: World, lovelace: int = 20 * ADA) -> tuple[UTxO, int]:
    """An escrow that closes two seconds after the chain's tip; returns it and its close time
    (the chain's clock, which time travel keeps ahead of the wall's)."""
    now = world.time(world.now_slot())
    datum = escrow_datum(world, now + 1_000, 1_000)
    [escrow] = await lock_escrows(world, datum, lovelace, 1)
    return escrow, now + 2_000


def back_to_the_consumer(
    world: World,
    escrow: UTxO,
    action: type[Refund] | type[Cancel],
    kind: int,
    budget: ExecutionUnits | None,
) -> TransactionBuilder:
    """A builder spending `escrow` by `action` (its own input, the consumer's output 0) that
    pays the consumer the escrow less its allowance, tagged with payout `kind`."""
    builder = world.builder()
    redeemer = Redeemer(action(input_index(builder, escrow), 0), budget)
    builder.add_script_input(escrow, script=world.escrow_ref, redeemer=redeemer)
    owed = escrow.output.amount.coin - ALLOWANCE
    builder.add_output(
        TransactionOutput(world.consumer.address, owed, datum=Payout(kind, out_ref(escrow)))
    )
    return builder


def refund_builder(
    world: World, escrow: UTxO, close_ms: int, budget: ExecutionUnits | None = None
) -> TransactionBuilder:
    """A refund of `escrow` valid from just after `close_ms` (`budget`: none evaluates it)."""
    builder = back_to_the_consumer(world, escrow, Refund, 1, budget)
    builder.validity_start = world.slot(close_ms) + 1
    return builder


async def test_refund_after_close(world: World):
    escrow, close = await short_escrow(world)
    builder = refund_builder(world, escrow, close)
    await wait_until(world, close + world.slot_ms)
    tx = builder.build_and_sign([world.payer.key], change_address=world.payer.address)
    report("refund", await evaluate(world, tx), tx)
    await confirm(world.devnet, tx)


async def test_refund_before_close_fails(world: World):
    deadline, window = far_close(world)
    [escrow] = await lock_escrows(world, escrow_datum(world, deadline, window), 20 * ADA, 1)
    builder = refund_builder(world, escrow, world.time(world.now_slot()), FIXED)
    await refused(world, sign(world, builder), "spend", "refund before close")


def cancel_tx(
    world: World, escrow: UTxO, signers: list[Party], budget: ExecutionUnits | None = None
) -> Transaction:
    """Cancel `escrow` to the consumer, signed by `signers` (`budget`: none evaluates it)."""
    builder = back_to_the_consumer(world, escrow, Cancel, 2, budget)
    builder.required_signers = [p.key_hash for p in signers]
    return sign(world, builder, *signers)


async def test_cancel_signed_by_both(world: World):
    deadline, window = far_close(world)
    datum = escrow_datum(world, deadline, window)
    [escrow, alone] = await lock_escrows(world, datum, 20 * ADA, 2)
    tx = cancel_tx(world, escrow, [world.consumer, world.provider])
    report("cancel", await evaluate(world, tx), tx)
    await confirm(world.devnet, tx)
    tx = cancel_tx(world, alone, [world.consumer], FIXED)
    await refused(world, tx, "spend", "provider must sign")


# ------------------------------------------------------------------------------------- bond


def bond_datum(world: World, unbonding_since: int | None = None) -> BondDatum:
    since = NoValue() if unbonding_since is None else BoxedInt(unbonding_since)
    return BondDatum(plutus_address(world.provider.address), world.provider.vkey, since)


async def post_bond(world: World, lovelace: int = 100 * ADA) -> UTxO:
    tx = await publish(
        world.payer,
        world.devnet,
        [TransactionOutput(BOND_ADDRESS, lovelace, datum=bond_datum(world))],
    )
    return UTxO(TransactionInput(tx.id, 0), tx.transaction_body.outputs[0])


def bond_spend(
    world: World, bond: UTxO, redeemer: PlutusData, budget: ExecutionUnits | None = None
) -> TransactionBuilder:
    """Spend `bond` with `redeemer` (`budget`: none evaluates it)."""
    builder = world.builder()
    builder.add_script_input(bond, script=world.bond_ref, redeemer=Redeemer(redeemer, budget))
    return builder


def sign(world: World, builder: TransactionBuilder, *parties: Party) -> Transaction:
    keys = [world.payer.key, *(p.key for p in parties)]
    return builder.build_and_sign(keys, change_address=world.payer.address)


async def test_bond_top_up_unbond_and_withdraw(world: World):
    bond = await post_bond(world)
    builder = bond_spend(world, bond, TopUp(0))
    builder.add_output(TransactionOutput(BOND_ADDRESS, 110 * ADA, datum=bond_datum(world)))
    builder.required_signers = [world.provider.key_hash]
    tx = sign(world, builder, world.provider)
    report("bond top-up", await evaluate(world, tx), tx)
    await confirm(world.devnet, tx)
    bond = UTxO(TransactionInput(tx.id, 0), tx.transaction_body.outputs[0])

    # the notice runs from the validity upper bound; 30 s of 100 ms slots to build, evaluate
    # and submit it on a busy machine (2 s was once too few)
    ttl = world.now_slot() + 300
    since = world.time(ttl)
    builder = bond_spend(world, bond, BeginUnbond(0))
    builder.add_output(TransactionOutput(BOND_ADDRESS, 110 * ADA, datum=bond_datum(world, since)))
    builder.ttl = ttl
    builder.required_signers = [world.provider.key_hash]
    tx = sign(world, builder, world.provider)
    report("bond begin-unbond", await evaluate(world, tx), tx)
    await confirm(world.devnet, tx)
    bond = UTxO(TransactionInput(tx.id, 0), tx.transaction_body.outputs[0])

    def withdraw(at_slot: int, budget: ExecutionUnits | None = None) -> Transaction:
        builder = bond_spend(world, bond, Withdraw(), budget)
        builder.add_output(TransactionOutput(world.provider.address, 109 * ADA))
        builder.validity_start = at_slot
        builder.required_signers = [world.provider.key_hash]
        return sign(world, builder, world.provider)

    early = withdraw(world.slot(since + NOTICE_MS) - 1, FIXED)
    await refused(world, early, "spend", "notice not over")
    await wait_until(world, since + NOTICE_MS)
    tx = withdraw(world.slot(since + NOTICE_MS))
    report("bond withdraw", await evaluate(world, tx), tx)
    await confirm(world.devnet, tx)


async def test_slash_with_the_refund(world: World):
    """A refunded escrow the provider accepted pays the consumer a share of the bond."""
    bond = await post_bond(world)
    escrow, close = await short_escrow(world)
    acceptance = Acceptance(
        b"UNCHAINED/accept/v1", NETWORK_ID, ESCROW_HASH.payload, out_ref(escrow), bytes(32),
        plutus_script_hash(BOND).payload,
    )  # fmt: skip
    signature = world.provider.key.sign(acceptance.to_cbor())
    share = bond.output.amount.coin * SLASH_SHARE_BPS // 10_000
    builder = world.builder()
    escrow_index = input_index(builder, escrow, bond)
    refund = Refund(escrow_index, 0)
    builder.add_script_input(escrow, script=world.escrow_ref, redeemer=Redeemer(refund))
    builder.add_script_input(
        bond, script=world.bond_ref, redeemer=Redeemer(Slash(escrow_index, signature, 1, 2))
    )
    owed = escrow.output.amount.coin - ALLOWANCE
    builder.add_output(
        TransactionOutput(world.consumer.address, owed, datum=Payout(1, out_ref(escrow)))
    )
    builder.add_output(
        TransactionOutput(
            world.consumer.address, share, datum=SlashPayout(out_ref(escrow), out_ref(bond))
        )
    )
    builder.add_output(
        TransactionOutput(BOND_ADDRESS, bond.output.amount.coin - share, datum=bond_datum(world))
    )
    builder.validity_start = world.slot(close) + 1
    await wait_until(world, close + world.slot_ms)
    tx = builder.build_and_sign([world.payer.key], change_address=world.payer.address)
    report("slash + refund", await evaluate(world, tx), tx)
    await confirm(world.devnet, tx)


async def test_other_purposes_fail(world: World):
    """The bond as a withdraw script (its credential registered first) fails."""
    bond_hash = plutus_script_hash(BOND)
    builder = world.builder()
    builder.certificates = [StakeRegistration(StakeCredential(bond_hash))]
    await confirm(world.devnet, builder.build_and_sign([world.payer.key], world.payer.address))
    builder = world.builder()
    rewards = Address(staking_part=bond_hash, network=Network.TESTNET)
    builder.withdrawals = Withdrawals({bytes(rewards): 0})
    builder.add_withdrawal_script(world.bond_ref, redeemer=Redeemer(Withdraw(), FIXED))
    await refused(world, sign(world, builder), "withdraw", "purpose")


async def lock_many(world: World, datum: EscrowDatum, lovelace: int, count: int) -> list[UTxO]:
    """`count` escrows, locked 60 a transaction (a transaction's 16,384 bytes hold about 80)."""
    locked: list[UTxO] = []
    while len(locked) < count:
        locked += await lock_escrows(world, datum, lovelace, min(60, count - len(locked)))
    return locked


@pytest.mark.slow  # 170 escrows evaluated three times by the Python CEK machine: ~40 s
async def test_largest_batch(world: World):
    """The biggest batch that fits one transaction (16,384 bytes, 14M memory, 10B cpu): one
    provider's claim on COUNT escrows of one consumer (one payout, one refund); memory binds,
    with the builder's margin."""
    deadline, window = far_close(world)
    units = 2_000
    lovelace = PRICE * units + ALLOWANCE + 5 * ADA
    escrows = await lock_many(world, escrow_datum(world, deadline, window), lovelace, COUNT)
    tx = settle_tx(world, escrows, units, deadline + window)
    budgets = await evaluate(world, tx)
    print(f"\nsettle x{COUNT} withdraw: {budgets['withdraw:0']}")
    memory = sum(b["memory"] for b in budgets.values())
    cpu = sum(b["cpu"] for b in budgets.values())
    print(f"settle x{COUNT}: total memory {memory} cpu {cpu}, {len(tx.to_cbor())} bytes")
    assert memory <= 14_000_000 and cpu <= 10_000_000_000 and len(tx.to_cbor()) <= 16_384
    await confirm(world.devnet, tx)

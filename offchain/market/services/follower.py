"""The chain follower: one chain-sync client that turns blocks into job, bond, settlement and
payment channel state, and rollbacks into exactly the reverse.

- An output at the escrow script whose datum is a quoted job's (job id, then every term,
  value and script through `escrow_problems`) becomes that job's escrow; the job is funded
  once `confirmations` blocks lie on top of it.
- An escrow spent is settled, refunded (or cancelled) or slashed, as the spending redeemer
  says; a slash is a Refund beside a bond's Slash naming this escrow and a SlashPayout output.
  A settle names the units its batch claimed for the escrow (its payouts are merged and
  untagged: the settle script's redeemer says what each escrow paid).
- Bond outputs are recorded per provider (created, unbonding, spent and how), and a provider
  whose bond moves follows it to its continuing output. Only an output that passes the bond
  check (`check_bond`, as for an offer's bond: inline datum of the right shape, lovelace only,
  a 32-byte key, the provider's payout address, not withdrawable when its block was made) is
  a bond: anyone can lock anything at the bond script, and a bond created with
  `unbonding_since = Just 0` or with tokens must not count. Any other is logged with the
  check's reason; a provider whose bond moves into one is left with a "refused" bond.
- Payment channels are indexed, opened to gone, by `channel_index`.

Transactions are read from their CBOR (redeemers and inline datums), so a real Ogmios must run
with `--include-cbor`; the devnet always includes it.

Each block is applied in one database transaction with its undo records (`undo`) and its point
(ChainPoint); the follower resumes from the newest points after a restart. Every transition is
caused by the chain and names the block's slot and height and the transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from pycardano import (
    Address,
    PlutusData,
    Transaction,
    TransactionId,
    TransactionInput,
    UTxO,
)
from sqlalchemy import Engine, delete
from sqlmodel import Session, col, select

from offchain.chain.follower import Point, RollForward, follow, follow_from_tip
from offchain.chain.time import ChainTime, PastHorizon, read_chain_time
from offchain.chain.utxo import format_out_ref, ogmios_out_ref, parse_out_ref, tx_id_of
from offchain.market.models import Bond, Cause, ChainPoint, Job, JobState, Provider, Settlement
from offchain.market.models import SettlementState as Sent
from offchain.market.ops import metrics as market_metrics
from offchain.market.services import chain_index, channel_index, jobs, offers, undo
from offchain.market.services.chain import escrow_problems
from offchain.market.services.undo import BlockAt
from offchain.protocol.checks.bond_check import BondRefused, check_bond
from offchain.protocol.checks.refusal import check_address
from offchain.protocol.ledger.addresses import from_plutus
from offchain.protocol.ledger.types import (
    BeginUnbond,
    BondDatum,
    Cancel,
    Just,
    Refund,
    Settle,
    Slash,
    Start,
    TopUp,
    Withdraw,
)
from offchain.protocol.tx.bond import bond_datum
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.tx_reader import Script, ScriptHashes, TxReader
from offchain.protocol.tx.txbuild import BuildError

log = logging.getLogger(__name__)
S = JobState
# How a bond was spent, by its redeemer (a bond spent by no bond redeemer: "spent").
BOND_ACTIONS: dict[type[PlutusData], str] = {
    TopUp: "top-up", BeginUnbond: "unbond", Withdraw: "withdraw", Slash: "slash",
}  # fmt: skip
RECENT_POINTS = 10  # findIntersection gets these, then ever sparser older ones
RETRY_S = 1.0
REFUSED_BOND = "refused"  # a provider's bond moved into an output that is no bond


class ChainFollower:
    """Applies chain events to the market's tables; `run` follows the chain forever."""

    def __init__(
        self, engine: Engine, deployment: Deployment, confirmations: int, keep_blocks: int
    ) -> None:
        self.engine = engine
        self.deployment = deployment
        self.confirmations = confirmations
        self.keep_blocks = keep_blocks
        self.scripts = ScriptHashes.of(deployment)
        self.lag_blocks = 0  # the chain's tip height minus the last block applied
        self.url = ""  # the Ogmios followed (`run`): era summaries for a block's time
        self._time: ChainTime | None = None

    # --- where to resume ----------------------------------------------------------------------

    def points(self) -> list[Point]:
        """Stored points for findIntersection, newest first: the last few, then every 2nd,
        4th, ... older one (a rollback deeper than those re-finds an older point)."""
        with Session(self.engine) as session:
            query = select(ChainPoint).order_by(col(ChainPoint.slot).desc())
            stored = session.exec(query).all()
        picked: list[Point] = []
        step, index = 1, 0
        while index < len(stored):
            picked.append({"slot": stored[index].slot, "id": stored[index].block_id})
            if len(picked) >= RECENT_POINTS:
                step *= 2
            index += step
        return picked

    # --- roll forward ---------------------------------------------------------------------------

    def roll_forward(self, block: dict[str, Any]) -> None:
        """Apply one block in one database transaction (again: a no-op)."""
        at = BlockAt(block["slot"], block["height"], block["id"])
        with Session(self.engine, expire_on_commit=False) as session:
            if session.get(ChainPoint, at.slot) is not None:
                return
            spent = chain_index.spent_refs(block)
            escrows = {
                job.escrow: job
                for job in session.exec(
                    select(Job).where(col(Job.escrow_ref).in_(spent)).with_for_update()
                )
            }  # fmt: skip
            bonds = {
                parse_out_ref(bond.ref): bond
                for bond in session.exec(select(Bond).where(col(Bond.ref).in_(spent)))
            }
            holders = {
                parse_out_ref(provider.bond_ref): provider
                for provider in session.exec(
                    select(Provider).where(col(Provider.bond_ref).in_(spent))
                )
                if provider.bond_ref is not None  # the query's
            }  # fmt: skip
            channels = channel_index.tracked(session, spent)
            for tx in block["transactions"]:
                inputs = [ogmios_out_ref(i) for i in tx["inputs"]]
                watched = [
                    r for r in inputs if r in escrows or r in bonds or r in holders or r in channels
                ]
                if watched or self._script_outputs(tx):
                    decoded = Transaction.from_cbor(bytes.fromhex(tx["cbor"]))
                    if decoded.valid is False:  # phase 2 failed: only collateral was taken
                        continue
                    self._spends(session, at, decoded, inputs, escrows, bonds, holders)
                    self._outputs(session, at, decoded, holders)
                    channel_index.apply(
                        session, self.deployment, self.scripts, at, decoded, channels
                    )
            self._fund_confirmed(session, at)
            chain_index.index_block(session, self.deployment, block)  # the explorer's chain index
            session.add(ChainPoint(slot=at.slot, block_id=at.id, height=at.height))
            self._forget(session, at)
            session.commit()

    def _script_outputs(self, tx: dict[str, Any]) -> bool:
        return any(self.scripts.at(Address.from_primitive(o["address"])) for o in tx["outputs"])

    def _spends(
        self,
        session: Session,
        at: BlockAt,
        tx: Transaction,
        inputs: list[TransactionInput],
        escrows: dict[TransactionInput, Job],
        bonds: dict[TransactionInput, Bond],
        holders: dict[TransactionInput, Provider],
    ) -> None:
        read = TxReader(tx)
        tx_id = tx.id.payload.hex()
        # Once per transaction, not per escrow input: a batch settle has 41 and ~80 outputs.
        slashed = read.slashed() if any(ref in escrows for ref in inputs) else set()
        for ref in inputs:
            if ref in escrows:
                redeemer = read.spend(ref, Script.ESCROW)
                units = read.settled.get(ref)
                self._escrow_spent(
                    session, at, tx_id, escrows[ref], redeemer, ref in slashed, units
                )
            if ref not in bonds and ref not in holders:
                continue
            action = BOND_ACTIONS.get(type(read.spend(ref, Script.BOND)), "spent")
            if ref in bonds:
                undo.remember(session, at, bonds[ref])
                bonds[ref].spent_tx, bonds[ref].spent_as = tx_id, action
                session.add(bonds[ref])
            if ref in holders:  # the bond moves on, unless an output continues it (below)
                undo.remember(session, at, holders[ref])
                holders[ref].bond_state = "withdrawn" if action == "withdraw" else action
                session.add(holders[ref])

    def _escrow_spent(
        self,
        session: Session,
        at: BlockAt,
        tx_id: str,
        job: Job,
        redeemer: PlutusData | None,
        slashed: bool,
        units: int | None,
    ) -> None:
        if isinstance(redeemer, Settle):
            target, detail = S.SETTLED, f"settled on chain for {units} units"
        elif isinstance(redeemer, Refund):
            target = S.SLASHED if slashed else S.REFUNDED
            detail = "refunded with a slash of the bond" if slashed else "refunded"
        elif isinstance(redeemer, Cancel):
            target, detail = S.CANCELLED, "cancelled on chain: the renter and the provider signed"
        elif isinstance(redeemer, Start):
            self._started(session, at, tx_id, job, redeemer.output)
            return
        else:
            log.warning("escrow %s spent by %s with no escrow redeemer", job.escrow_ref, tx_id)
            return
        if job.state in (S.QUOTED, S.EXPIRED):
            self._move(session, at, job, S.FUNDED, "escrow spent before its confirmations", tx_id)
        if target not in jobs.TRANSITIONS[job.state]:
            log.warning("job %s is %s: the chain %s it in %s", job.id, job.state, target, tx_id)
            return
        fields = {"settle_tx": tx_id} if target == S.SETTLED else {}
        self._move(session, at, job, target, detail, tx_id, **fields)
        for settlement in self._pending_settlements(session, format_out_ref(job.escrow)):
            undo.remember(session, at, settlement)
            ours = settlement.tx_id == tx_id
            settlement.state = Sent.CONFIRMED if ours else Sent.CONFLICTED
            session.add(settlement)
            if ours:
                market_metrics.settle_confirmed(session, job.id, jobs.now_ms())

    @staticmethod
    def _started(session: Session, at: BlockAt, tx_id: str, job: Job, output: int) -> None:
        """The provider Started the job's escrow: the escrow is now that Start's output
        `output`, which receipts name and settlement spends (the rollback puts it back)."""
        undo.remember(session, at, job)
        ref = format_out_ref(TransactionInput(TransactionId(bytes.fromhex(tx_id)), output))
        log.info("job %s started on chain: escrow %s -> %s", job.id, job.escrow_ref, ref)
        job.escrow_ref = ref
        session.add(job)

    @staticmethod
    def _pending_settlements(session: Session, escrow_ref: str) -> list[Settlement]:
        query = select(Settlement).where(
            col(Settlement.state).in_((Sent.BUILT, Sent.SUBMITTED, Sent.CONFLICTED))
        )
        return [s for s in session.exec(query) if escrow_ref in json.loads(s.escrows)]

    def _move(
        self,
        session: Session,
        at: BlockAt,
        job: Job,
        to: JobState,
        detail: str,
        tx_id: str,
        **fields: Any,
    ) -> None:
        undo.remember(session, at, job)
        for name, value in fields.items():
            setattr(job, name, value)
        jobs.transition(
            session, job, to, Cause.CHAIN, detail, slot=at.slot, block_height=at.height,
            tx_id=tx_id,
        )  # fmt: skip

    # --- outputs: escrows locked, bonds created or continued --------------------------------

    def _outputs(
        self, session: Session, at: BlockAt, tx: Transaction, holders: dict[str, Provider]
    ) -> None:
        tx_id = tx.id  # hashes the whole body: once, not once per output
        for index, output in enumerate(tx.transaction_body.outputs):
            utxo = UTxO(TransactionInput(tx_id, index), output)
            script = self.scripts.at(output.address)
            if script is Script.ESCROW:
                self._escrow_locked(session, at, utxo)
            elif script is Script.BOND:
                self._bond_output(session, at, utxo, holders)

    def _escrow_locked(self, session: Session, at: BlockAt, utxo: UTxO) -> None:
        job = jobs.by_escrow(session, utxo.input)
        if job is not None and job.escrow_height is None:  # reported to the API first
            quoted = {"state": S.QUOTED, "escrow_ref": None} if job.state == S.FUNDED else {}
            undo.remember(session, at, job, **quoted)
        elif job is None:
            job = self._quoted_for(session, utxo)
            if job is None:
                return
            undo.remember(session, at, job)
            job.escrow_ref = format_out_ref(utxo.input)
        else:
            return
        job.escrow_height = at.height
        session.add(job)

    def _quoted_for(self, session: Session, utxo: UTxO) -> Job | None:
        """The quoted job this escrow output is exactly the quote of, if any."""
        try:
            datum = escrow_datum(self.deployment, utxo)
        except BuildError:
            return None
        query = select(Job).where(
            Job.spec_digest == datum.job_id.hex(),
            col(Job.state).in_((S.QUOTED, S.EXPIRED)),
            col(Job.escrow_ref).is_(None),
        )
        return next(
            (j for j in session.exec(query) if not escrow_problems(self.deployment, j, utxo)), None
        )

    def _bond_output(
        self, session: Session, at: BlockAt, utxo: UTxO, holders: dict[str, Provider]
    ) -> None:
        try:
            datum: BondDatum = bond_datum(self.deployment, utxo)
        except BuildError:
            return
        ref = format_out_ref(utxo.input)
        provider = session.get(Provider, offers.key_hash(datum.provider_vkey))
        held = provider.bond_ref if provider is not None else None
        moved = held is not None and parse_out_ref(held) in holders
        try:
            self._check_bond(at, utxo, datum, provider)
        except BondRefused as refused:
            log.warning("not counted as a bond: %s", refused)
            if moved and provider is not None:  # its bond went on here: none counts now
                undo.remember(session, at, provider)
                provider.bond_state = REFUSED_BOND
                session.add(provider)
            return
        since = datum.unbonding_since.value if isinstance(datum.unbonding_since, Just) else None
        bond = Bond(
            ref=ref, provider_id=offers.key_hash(datum.provider_vkey),
            lovelace=utxo.output.amount.coin, unbonding_since_ms=since, created_slot=at.slot,
        )  # fmt: skip
        session.add(bond)
        session.flush()
        undo.remember_created(session, at, bond)
        if provider is None or (provider.bond_ref is not None and not moved):
            return  # the provider's offer names another bond, still unspent
        undo.remember(session, at, provider)
        provider.bond_ref, provider.bond_lovelace = ref, bond.lovelace
        provider.bond_state = "unbonding" if since is not None else offers.ACTIVE_BOND
        session.add(provider)

    def _check_bond(
        self, at: BlockAt, utxo: UTxO, datum: BondDatum, provider: Provider | None
    ) -> None:
        """The bond check at the block's time, for the provider's payout address (the datum's
        own for a provider the market does not know yet); the market's minimum is applied
        when offers are matched. Raises BondRefused."""
        if provider is not None:
            payout = Address.from_primitive(provider.payout_address)
        else:
            check_address(utxo, "provider", datum.provider, BondRefused)  # then it encodes
            payout = from_plutus(datum.provider, self.deployment.network)
        # a job closing at the block's time; only an unbonding bond's check depends on that
        # time (for the others the notice meets the refund window): only then are era
        # summaries asked
        now = self._slot_ms(at.slot) if isinstance(datum.unbonding_since, Just) else 0
        check_bond(self.deployment, utxo, datum.provider_vkey, payout, 0, now, now)

    def _slot_ms(self, slot: int) -> int:
        """When `slot` began, by the era summaries (asked again once past their horizon)."""
        if self._time is not None:
            with contextlib.suppress(PastHorizon):
                return self._time.slot_to_posix_ms(slot)
        self._time = read_chain_time(self.url)
        return self._time.slot_to_posix_ms(slot)

    # --- confirmations ------------------------------------------------------------------------

    def _fund_confirmed(self, session: Session, at: BlockAt) -> None:
        """Quoted jobs whose escrow now has `confirmations` blocks on top are funded."""
        query = select(Job).where(
            col(Job.state).in_((S.QUOTED, S.EXPIRED)),
            col(Job.escrow_height) <= at.height - self.confirmations,
        )
        for job in session.exec(query.with_for_update()):
            assert job.escrow_height is not None  # the query's
            depth = at.height - job.escrow_height
            self._move(
                session, at, job, S.FUNDED, f"escrow {job.escrow_ref} {depth} block(s) deep",
                tx_id_of(job.escrow),
            )  # fmt: skip

    def _forget(self, session: Session, at: BlockAt) -> None:
        """Keep points and undo records for the last `keep_blocks` blocks only."""
        oldest = at.height - self.keep_blocks
        floor = session.exec(
            select(ChainPoint.slot).where(col(ChainPoint.height) <= oldest)
            .order_by(col(ChainPoint.slot).desc()).limit(1)
        ).first()  # fmt: skip
        if floor is not None:
            session.execute(delete(ChainPoint).where(col(ChainPoint.slot) <= floor))
            undo.forget_before(session, floor)

    # --- roll backward --------------------------------------------------------------------------

    def roll_backward(self, point: Point, tip: dict[str, Any]) -> int:
        """Undo every block after `point`; returns how many changes were undone. A first
        start (no points yet) records `point` as where the market's chain begins."""
        with Session(self.engine, expire_on_commit=False) as session:
            if isinstance(point, str):  # "origin", the only point that is no block
                at = BlockAt(-1, 0, "origin")
            else:
                known = session.get(ChainPoint, point["slot"])
                height = known.height if known else tip["height"]
                at = BlockAt(point["slot"], height, point["id"])
                if known is None and tip["slot"] == point["slot"]:
                    session.add(ChainPoint(slot=at.slot, block_id=at.id, height=height))
            undone = undo.undo_after(session, at)
            chain_index.roll_back(session, at.slot)
            channel_index.roll_back(session, at.slot)
            session.execute(delete(ChainPoint).where(col(ChainPoint.slot) > at.slot))
            session.commit()
        if undone:
            log.info("rollback to slot %d undid %d change(s)", at.slot, undone)
        return undone

    # --- the loop -------------------------------------------------------------------------------

    async def run(self, url: str) -> None:
        """Follow the chain from the stored points (the tip on a first start), forever; a lost
        connection is retried from the points stored so far."""
        self.url = url
        while True:
            try:
                points = await asyncio.to_thread(self.points)
                # the tip on a first start, found on the follower's own connection: a tip read
                # before and orphaned by a fork meanwhile would be no intersection
                events = follow(url, points) if points else follow_from_tip(url)
                async for event in events:
                    if isinstance(event, RollForward):
                        await asyncio.to_thread(self.roll_forward, event.block)
                        self.lag_blocks = event.tip["height"] - event.block["height"]
                    else:
                        await asyncio.to_thread(self.roll_backward, event.point, event.tip)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the chain follower stopped; it resumes from its stored points")
                await asyncio.sleep(RETRY_S)

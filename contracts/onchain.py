"""PROTOCOL.md's data types and the ledger's Plutus V3 ScriptContext, as OpShin PlutusData.

Shared by both validators (OpShin inlines `from contracts.onchain import *`) and importable
off chain: every class is a pycardano PlutusData with the same CONSTR_ID and field order as
PROTOCOL.md. The context classes mirror what the ledger passes (see
shared/notes/plutus-v3-context.md), not OpShin 0.28's api_v3, which types withdrawals and
the rewarding purpose with StakingCredential and has no ScriptInfo (spending datum).
"""

from opshin.bridge import wraps_builtin
from opshin.prelude import *

# ---------------------------------------------------------------- protocol data (PROTOCOL.md)


@dataclass()
class Payout(PlutusData):
    """The inline datum tagging a payout output to one escrow (kind 0 settle .. 2 cancel)."""

    CONSTR_ID = 0
    kind: int
    escrow: TxOutRef


@dataclass()
class SlashPayout(PlutusData):
    """The inline datum of a slash's payout: it names the escrow and the bond it takes from,
    so no output pays for two slashes, whatever the number of bond versions."""

    CONSTR_ID = 1
    escrow: TxOutRef
    bond: TxOutRef


@dataclass()
class EscrowDatum(PlutusData):
    """An escrow's nine fields. An escrow with a start deadline carries a tenth, `start_deadline:
    int` (POSIX ms, read with `start_deadline`); Start drops it, so a started escrow is exactly
    one without a start deadline and every other action reads the nine alone."""

    CONSTR_ID = 0
    consumer: Address
    provider: Address
    provider_vkey: bytes
    price_per_unit: int
    max_units: int
    deadline: int
    settle_window: int
    job_id: bytes
    fee_allowance: int


@dataclass()
class Settle(PlutusData):
    """Spend an escrow in a batch settle: the settle script's withdrawal checks it."""

    CONSTR_ID = 0


@dataclass()
class Refund(PlutusData):
    CONSTR_ID = 1
    own_input: int
    consumer_output: int


@dataclass()
class Cancel(PlutusData):
    CONSTR_ID = 2
    own_input: int
    consumer_output: int


@dataclass()
class Start(PlutusData):
    """The provider shows the job started before the escrow's start deadline: output `output`
    continues the escrow with the same address and value and the datum's nine fields alone."""

    CONSTR_ID = 3
    own_input: int
    output: int


EscrowRedeemer = Union[Settle, Refund, Cancel, Start]


@dataclass()
class SettleClaim(PlutusData):
    """A provider's claim on several escrows of a batch (those whose item names it), signed
    by `vkey`, each of its escrows' provider key."""

    CONSTR_ID = 0
    note: Anything  # bytes off chain; signed as given, never read (the deployed script's way)
    signature: bytes
    vkey: bytes


@dataclass()
class SettleReceipt(PlutusData):
    """An escrow's own receipt (a claim on it alone), signed by its provider key."""

    CONSTR_ID = 0
    note: Anything  # as SettleClaim's
    signature: bytes


@dataclass()
class BatchSettle(PlutusData):
    """The settle script's redeemer. `items` holds three integers per escrow input, in ledger
    order: the units claimed, who signed them (the index of a claim in `claims`, or -1: the
    escrow's own receipt, the next of `receipts`), and the provider output that pays them
    (-1: the escrow earns nothing). Provider outputs come first; the consumers' refunds start
    at output `first_refund`."""

    CONSTR_ID = 0
    items: List[int]
    claims: List[SettleClaim]
    receipts: List[SettleReceipt]
    first_refund: int


@dataclass()
class Claim(PlutusData):
    """What a provider signs to be paid for escrows (serialise_data of this): `claims` is
    flat, each escrow's out-ref followed by its units, in descending ledger order; `note` is
    the provider's (a receipt's sha256(result_hash + evidence_hash)), never read on chain:
    the settle scripts sign it as the redeemer gives it (bytes off chain)."""

    CONSTR_ID = 0
    domain: bytes
    network_id: int
    settle_hash: bytes
    note: Anything
    claims: Anything


@dataclass()
class Acceptance(PlutusData):
    """What the provider signs to accept a job; a refunded accepted job slashes its bond."""

    CONSTR_ID = 1
    domain: bytes
    network_id: int
    escrow_hash: bytes
    escrow: TxOutRef
    job_id: bytes
    bond_hash: bytes


@dataclass()
class BondDatum(PlutusData):
    CONSTR_ID = 0
    provider: Address
    provider_vkey: bytes
    unbonding_since: Union[BoxedInt, NoValue]


@dataclass()
class TopUp(PlutusData):
    CONSTR_ID = 0
    bond_output: int


@dataclass()
class BeginUnbond(PlutusData):
    CONSTR_ID = 1
    bond_output: int


@dataclass()
class Withdraw(PlutusData):
    CONSTR_ID = 2


@dataclass()
class Slash(PlutusData):
    CONSTR_ID = 3
    escrow_input: int
    acceptance_signature: bytes
    consumer_output: int
    bond_output: int


BondRedeemer = Union[TopUp, BeginUnbond, Withdraw, Slash]

# ------------------------------------------------------------ payment channels (PROTOCOL.md)


@dataclass()
class ChannelTerms(PlutusData):
    """What a channel never changes, kept off the hot path: its datum holds
    blake2b_224(serialise_data(this)), which is also the channel's id in every IOU. `nonce` is
    an input the open spent, so no two channels share an id. Shown in full (in the open's
    metadata, and in the redeemer of every close, drain or end)."""

    CONSTR_ID = 0
    renter: Address
    provider: Address
    provider_vkey: bytes
    close_period_ms: int
    nonce: TxOutRef


@dataclass()
class ChannelDatum(PlutusData):
    """A channel UTxO's datum: what a claim reads. `payee` is
    blake2b_224(serialise_data(terms.provider)), `closing_at` is -1 while open, else the
    POSIX ms from which the renter may drain."""

    CONSTR_ID = 0
    renter_vkey: bytes
    payee: bytes
    terms: bytes
    claimed: int
    closing_at: int


@dataclass()
class Iou(PlutusData):
    """What a renter signs (serialise_data of this): the channel `channel` (its terms hash)
    of the deployment whose channel script is `channel_hash` may pay its provider `amount`
    lovelace in all, cumulative."""

    CONSTR_ID = 0
    domain: bytes
    network_id: int
    channel_hash: bytes
    channel: bytes
    amount: int


@dataclass()
class ChannelClaim(PlutusData):
    """Spend a channel in a batch claim: the claim script's withdrawal checks it."""

    CONSTR_ID = 0


@dataclass()
class ChannelTopUp(PlutusData):
    """The renter adds lovelace while the channel is open: output `output` continues the
    channel, same address and datum."""

    CONSTR_ID = 1
    own_input: int
    output: int
    terms: ChannelTerms


@dataclass()
class StartClose(PlutusData):
    """The renter starts the close: output `output` continues with closing_at set to the
    validity upper bound plus the close period."""

    CONSTR_ID = 2
    own_input: int
    output: int
    terms: ChannelTerms


@dataclass()
class Drain(PlutusData):
    """After closing_at, the rest goes to the renter (output `renter_output`, tagged)."""

    CONSTR_ID = 3
    own_input: int
    renter_output: int
    terms: ChannelTerms


@dataclass()
class ProviderEnd(PlutusData):
    """The provider ends the channel at once: the rest goes back to the renter, tagged."""

    CONSTR_ID = 4
    own_input: int
    renter_output: int
    terms: ChannelTerms


@dataclass()
class MutualClose(PlutusData):
    """Renter and provider both sign: the transaction is theirs."""

    CONSTR_ID = 5
    terms: ChannelTerms


ChannelRedeemer = Union[ChannelClaim, ChannelTopUp, StartClose, Drain, ProviderEnd, MutualClose]


@dataclass()
class BatchClaim(PlutusData):
    """The claim script's redeemer. Outputs [0, first_continuing) pay providers; from
    first_continuing on, output i continues the i-th channel input in ledger order. Per
    channel input in ledger order: `payees` its provider output, `signatures` its renter's
    signature on the Iou of the amount its continuing datum's `claimed` names."""

    CONSTR_ID = 0
    payees: List[int]
    signatures: List[bytes]
    first_continuing: int


# ------------------------------------------------------- the ledger's V3 context (exact shape)


@dataclass()
class MintingScript(PlutusData):
    CONSTR_ID = 0
    policy_id: bytes


@dataclass()
class SomeDatum(PlutusData):
    """Maybe Datum's Just; reading it from Nothing (C1[]) fails, as a missing datum should."""

    CONSTR_ID = 0
    datum: Anything


@dataclass()
class SpendingScript(PlutusData):
    """ScriptInfo SpendingScript: the out-ref and the datum the ledger resolved (Maybe)."""

    CONSTR_ID = 1
    tx_out_ref: TxOutRef
    datum: SomeDatum


@dataclass()
class RewardingScript(PlutusData):
    """ScriptInfo RewardingScript: a bare Credential (OpShin 0.28 says StakingCredential)."""

    CONSTR_ID = 2
    credential: Credential


@dataclass()
class CertifyingScript(PlutusData):
    CONSTR_ID = 3
    index: int
    certificate: Anything


@dataclass()
class VotingScript(PlutusData):
    CONSTR_ID = 4
    voter: Anything


@dataclass()
class ProposingScript(PlutusData):
    CONSTR_ID = 5
    index: int
    procedure: Anything


ScriptInfo = Union[
    MintingScript, SpendingScript, RewardingScript, CertifyingScript, VotingScript, ProposingScript
]


@dataclass()
class InlineTxOut(PlutusData):
    """A TxOut read as carrying an inline datum: `.datum.datum` fails on any other datum."""

    CONSTR_ID = 0
    address: Address
    value: Anything
    datum: SomeOutputDatum
    reference_script: Anything


@dataclass()
class InputV3(PlutusData):
    CONSTR_ID = 0
    out_ref: TxOutRef
    resolved: InlineTxOut


@dataclass()
class TxInfoV3(PlutusData):
    """TxInfo as the ledger builds it; fields the validators never read stay untyped.

    `inputs` and `outputs` stay raw Data: OpShin copies a typed list on every read, so the
    validators walk them with the builtin-list helpers below.
    """

    CONSTR_ID = 0
    inputs: Anything
    reference_inputs: Anything
    outputs: Anything
    fee: Anything
    mint: Anything
    certificates: Anything
    withdrawals: Anything
    validity_range: POSIXTimeRange
    signatories: List[bytes]
    redeemers: Dict[Anything, Anything]
    datums: Anything
    id: bytes
    votes: Anything
    proposal_procedures: Anything
    current_treasury_amount: Anything
    treasury_donation: Anything


@dataclass()
class BatchTxInfo(PlutusData):
    """TxInfo as the settle script reads it: every field raw but the validity range."""

    CONSTR_ID = 0
    inputs: Anything
    reference_inputs: Anything
    outputs: Anything
    fee: Anything
    mint: Anything
    certificates: Anything
    withdrawals: Anything
    validity_range: POSIXTimeRange
    signatories: Anything
    redeemers: Anything
    datums: Anything
    id: bytes
    votes: Anything
    proposal_procedures: Anything
    current_treasury_amount: Anything
    treasury_donation: Anything


@dataclass()
class BatchContext(PlutusData):
    CONSTR_ID = 0
    transaction: BatchTxInfo
    redeemer: Anything
    purpose: ScriptInfo


@dataclass()
class ScriptContextV3(PlutusData):
    CONSTR_ID = 0
    transaction: TxInfoV3
    redeemer: Anything
    purpose: ScriptInfo


# ------------------------------------------------------------------- builtin-list helpers
# These take and return builtin lists typed as Anything, which OpShin passes through
# untouched; `index_access_list` and `drop_list` resolve to pluthon's list patterns.


@wraps_builtin
def un_list_data(x: Anything) -> Anything:
    """The builtin list inside list Data."""


@wraps_builtin
def list_data(xs: Anything) -> Anything:
    """List Data holding a builtin list of Data (to keep one inside a record or tuple)."""


@wraps_builtin
def head_list(xs: Anything) -> Anything:
    """The first element; fails on an empty list."""


@wraps_builtin
def tail_list(xs: Anything) -> Anything:
    """All but the first element; fails on an empty list."""


@wraps_builtin
def null_list(xs: Anything) -> bool:
    """Whether the list is empty."""


@wraps_builtin
def index_access_list(xs: Anything, i: int) -> Anything:
    """Element i (from 0); fails past the end."""


@wraps_builtin
def drop_list(xs: Anything, n: int) -> Anything:
    """The list without its first n elements (empty past the end, unchanged for n <= 0)."""


@wraps_builtin
def fields(x: Anything) -> Anything:
    """The builtin list of a constructor's fields."""


@wraps_builtin
def un_map_data(x: Anything) -> Anything:
    """The builtin list of pairs inside map Data."""


@wraps_builtin
def map_data(xs: Anything) -> Anything:
    """Map Data holding a builtin list of pairs (to compare two maps' tails as Data)."""


@wraps_builtin
def fst_pair(x: Anything) -> Anything:
    """The first component of a builtin pair."""


@wraps_builtin
def mk_cons(x: Anything, xs: Anything) -> Anything:
    """The builtin list `xs` with `x` in front."""


@wraps_builtin
def i_data(x: int) -> Anything:
    """Integer Data."""


@wraps_builtin
def b_data(x: bytes) -> Anything:
    """Bytes Data."""


@wraps_builtin
def snd_pair(x: Anything) -> Anything:
    """The second component of a builtin pair."""


@wraps_builtin
def un_i_data(x: Anything) -> int:
    """The integer inside integer Data."""


@wraps_builtin
def un_b_data(x: Anything) -> bytes:
    """The bytes inside bytes Data."""


def skip_list(xs: Anything, n: int) -> Anything:
    """The list without its first n elements (n >= 0), eight or two at a time: cheaper."""
    if n >= 8:
        xs = tail_list(tail_list(tail_list(tail_list(xs))))
        return skip_list(tail_list(tail_list(tail_list(tail_list(xs)))), n - 8)
    if n >= 2:
        return skip_list(tail_list(tail_list(xs)), n - 2)
    return tail_list(xs) if n == 1 else xs


def lovelace(value: Anything) -> int:
    """The lovelace of a ledger Value: its first entry, as the ledger always puts ADA first."""
    return un_i_data(snd_pair(head_list(un_map_data(snd_pair(head_list(un_map_data(value)))))))


def tokens(value: Anything) -> Anything:
    """A ledger Value without its lovelace (the ledger always puts ADA first)."""
    return tail_list(un_map_data(value))


def no_datum(out: Anything) -> bool:
    """Whether a ledger TxOut carries no datum (NoOutputDatum = C0[])."""
    return equals_data(head_list(tail_list(tail_list(fields(out)))), NoOutputDatum())


def holds(out: Anything, amount: int) -> bool:
    """Whether output `out` holds at least `amount` lovelace, with no datum."""
    return lovelace(head_list(tail_list(fields(out)))) >= amount and no_datum(out)


def first_script(inputs: Anything) -> Anything:
    """The payment credential of the first script input."""
    assert not null_list(inputs), "no script input"
    first: InputV3 = head_list(inputs)
    credential = first.resolved.address.payment_credential
    if isinstance(credential, ScriptCredential):
        return credential
    return first_script(tail_list(inputs))


def add_payout(accs: Anything, p: int, provider: Anything, due: int) -> Anything:
    """A batch's provider outputs' accumulators ([payee, I sum] each, list Data) with `due`
    added to output p's, whose payee must be `provider` (a settle's: the output's address, the
    escrow's provider; a claim's: the hash of the address, the channel's payee)."""
    if p > 0:
        return mk_cons(head_list(accs), add_payout(tail_list(accs), p - 1, provider, due))
    acc = un_list_data(head_list(accs))
    assert equals_data(head_list(acc), provider), "one provider per payout"
    total = un_i_data(head_list(tail_list(acc))) + due
    updated = mk_cons(head_list(acc), mk_cons(i_data(total), tail_list(tail_list(acc))))
    return mk_cons(list_data(updated), tail_list(accs))


def check_payouts(outputs: Anything, accs: Anything) -> None:
    """Each provider output holds its sum, with no datum (its address was checked escrow by
    escrow, or channel by channel)."""
    if not null_list(accs):
        total = un_i_data(head_list(tail_list(un_list_data(head_list(accs)))))
        assert holds(head_list(outputs), total), "provider payout"
        check_payouts(tail_list(outputs), tail_list(accs))


def batch_upper_bound(tx: BatchTxInfo) -> int:
    """The validity upper bound of a batch (settle or claim), whose withdrawal must be the
    transaction's only one."""
    upper = tx.validity_range.upper_bound.limit
    assert null_list(tail_list(un_map_data(tx.withdrawals))) and isinstance(
        upper, FinitePOSIXTime
    ), "one withdrawal, and an upper bound"
    return upper.time

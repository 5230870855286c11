"""The genesis and era answers of the devnet, in Ogmios v6 JSON.

The devnet starts in Conway: the six earlier eras are empty and share its slot length, so
slot <-> time is `systemStart + slot x slotLength` everywhere. Genesis answers carry what the
Python Ogmios client insists on parsing, and validate against the schema.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from devnet.errors import INVALID_PARAMS, LedgerError
from devnet.genesis import (
    ACTIVE_SLOTS_COEFFICIENT,
    NETWORK_MAGIC,
    SECURITY_PARAMETER,
    Genesis,
)
from devnet.params import ProtocolParameters

ERAS = ("byron", "shelley", "allegra", "mary", "alonzo", "babbage", "conway")


def era_summaries(genesis: Genesis, current_epoch: int) -> list[dict[str, Any]]:
    """All seven eras; the devnet begins in Conway, so the earlier ones are empty."""
    era_parameters = {
        "epochLength": genesis.epoch_length,
        "slotLength": {"milliseconds": genesis.slot_length_ms},
        "safeZone": 3 * SECURITY_PARAMETER * 20,
    }
    origin = bound(0, 0, 0)
    horizon_epoch = current_epoch + 2
    horizon_slot = horizon_epoch * genesis.epoch_length
    horizon = bound(horizon_slot * genesis.slot_length_ms // 1000, horizon_slot, horizon_epoch)
    return [
        {
            "start": origin,
            "end": horizon if era == "conway" else origin,
            "parameters": era_parameters,
        }
        for era in ERAS
    ]


def genesis_configuration(era: Any, genesis: Genesis, params: ProtocolParameters) -> dict[str, Any]:
    """`queryNetwork/genesisConfiguration` for one of the eras that have a genesis file."""
    if era not in ("byron", "shelley", "alonzo", "conway"):
        raise LedgerError(
            INVALID_PARAMS, "era must be one of 'byron', 'shelley', 'alonzo', 'conway'"
        )
    parameters = params.to_ogmios()
    start = utc(genesis.system_start_s)
    if era == "byron":
        return {
            "era": era,
            "genesisKeyHashes": [],
            "genesisDelegations": {},
            "startTime": start,
            "initialFunds": {},
            "initialVouchers": {},
            "securityParameter": SECURITY_PARAMETER,
            "networkMagic": NETWORK_MAGIC,
            "updatableParameters": _pick(parameters, BYRON_PARAMETERS),
        }
    if era == "shelley":
        return {
            "era": era,
            "startTime": start,
            "networkMagic": NETWORK_MAGIC,
            "network": "testnet",
            "activeSlotsCoefficient": ACTIVE_SLOTS_COEFFICIENT,
            "securityParameter": SECURITY_PARAMETER,
            "epochLength": genesis.epoch_length,
            "slotsPerKesPeriod": 129_600,
            "maxKesEvolutions": 62,
            "slotLength": {"milliseconds": genesis.slot_length_ms},
            "updateQuorum": 5,
            "maxLovelaceSupply": 45_000_000_000_000_000,
            "initialParameters": _pick(parameters, SHELLEY_PARAMETERS),
            "initialDelegates": [],
            "initialFunds": {
                address: {"ada": {"lovelace": amount}} for address, amount in genesis.funds.items()
            },
            "initialStakePools": {"stakePools": {}, "delegators": {}},
        }
    if era == "alonzo":
        return {"era": era, "updatableParameters": _pick(parameters, ALONZO_PARAMETERS)}
    return {
        "era": era,
        "constitution": {
            "metadata": {"url": "", "hash": "00" * 32},
            "guardrails": {"hash": MAINNET_GUARDRAILS_SCRIPT},  # the Python client needs one
        },
        "constitutionalCommittee": {"members": [], "quorum": "0/1"},
        "updatableParameters": _pick(parameters, CONWAY_PARAMETERS),
    }


def utc(posix_s: int) -> str:
    return datetime.fromtimestamp(posix_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def bound(seconds: int, slot: int, epoch: int) -> dict[str, Any]:
    return {"time": {"seconds": seconds}, "slot": slot, "epoch": epoch}


def _pick(parameters: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: parameters[key] for key in keys}


MAINNET_GUARDRAILS_SCRIPT = "fa24fb305126805cf2164c161d852a0e7330cf988f1fe558cf7d4a64"
BYRON_PARAMETERS = (
    "minFeeCoefficient",
    "minFeeConstant",
    "maxBlockBodySize",
    "maxBlockHeaderSize",
    "maxTransactionSize",
)
SHELLEY_PARAMETERS = (
    "minFeeCoefficient",
    "minFeeConstant",
    "maxBlockBodySize",
    "maxBlockHeaderSize",
    "maxTransactionSize",
    "stakeCredentialDeposit",
    "stakePoolDeposit",
    "stakePoolRetirementEpochBound",
    "desiredNumberOfStakePools",
    "stakePoolPledgeInfluence",
    "monetaryExpansion",
    "treasuryExpansion",
    "minStakePoolCost",
    "minUtxoDepositConstant",
    "minUtxoDepositCoefficient",
    "version",
)
ALONZO_PARAMETERS = (
    "minUtxoDepositCoefficient",
    "plutusCostModels",
    "scriptExecutionPrices",
    "maxExecutionUnitsPerTransaction",
    "maxExecutionUnitsPerBlock",
    "maxValueSize",
    "collateralPercentage",
    "maxCollateralInputs",
)
CONWAY_PARAMETERS = (
    "stakePoolVotingThresholds",
    "constitutionalCommitteeMinSize",
    "constitutionalCommitteeMaxTermLength",
    "governanceActionLifetime",
    "governanceActionDeposit",
    "delegateRepresentativeVotingThresholds",
    "delegateRepresentativeDeposit",
    "delegateRepresentativeMaxIdleTime",
)

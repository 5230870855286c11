"""Protocol parameters, cost models and their Ogmios v6 JSON form.

Defaults are mainnet's current ones (Conway, protocol version 10), in both devnet profiles;
each field says where its value comes from. The TOML settings' `[protocol_parameters]`
replace any of them (`devnet.settings`), e.g. 14M / 62M memory for the limits before the
2026 update. Ratios are `Fraction`s, never floats; amounts are lovelace.

Sources: the mainnet genesis files (shelley-genesis.json, alonzo-genesis.json,
conway-genesis.json) and the parameter updates since, as `queryLedgerState/protocolParameters`
answers on mainnet.
"""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from importlib import resources
from typing import Any

PLUTUS_LANGUAGES = ("plutus:v1", "plutus:v2", "plutus:v3")


def _uplc_cost_models() -> dict[str, list[int]]:
    """The published cost models shipped with `uplc` (its merged mainnet file), as
    Ogmios-ordered arrays per language, at mainnet's lengths (166, 175 and 297 parameters)."""
    files = resources.files("uplc").joinpath("cost_model_files")
    latest = max(
        (entry for entry in files.iterdir() if entry.is_dir() and entry.name[:1].isdigit()),
        key=lambda entry: entry.name,
    )
    config_file = next(f for f in latest.iterdir() if f.name.endswith(".json"))
    config = json.loads(config_file.read_text())
    return {f"plutus:v{n}": list(config[f"PlutusV{n}"].values()) for n in (1, 2, 3)}


def lovelace(amount: int) -> dict[str, Any]:
    return {"ada": {"lovelace": amount}}


def ratio(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


@dataclasses.dataclass(frozen=True)
class ReferenceScriptFee:
    """Tiered fee for reference scripts: `base` lovelace/byte, x`multiplier` every `range` bytes."""

    base: Fraction = Fraction(15)
    range: int = 25_600
    multiplier: Fraction = Fraction(6, 5)

    def fee(self, size: int) -> int:
        """The ledger's tierRefScriptFee, computed exactly and rounded down at the end."""
        total = Fraction(0)
        price = self.base
        while size > 0:
            chunk = min(size, self.range)
            total += price * chunk
            size -= chunk
            price *= self.multiplier
        return int(total)  # floor, as the ledger does


@dataclasses.dataclass(frozen=True)
class ProtocolParameters:
    # Fees: shelley-genesis minFeeA / minFeeB.
    min_fee_coefficient: int = 44
    min_fee_constant: int = 155_381
    # Sizes: block body raised to 90,112 B (88 KiB) by the 2022 updates; header and tx sizes
    # are Shelley's; maxValueSize from alonzo-genesis.
    max_block_body_size: int = 90_112
    max_block_header_size: int = 1_100
    max_tx_size: int = 16_384
    max_value_size: int = 5_000
    # Staking: shelley-genesis keyDeposit, poolDeposit, eMax, a0, rho, tau; nOpt raised to 500
    # (epoch 234); minPoolCost lowered from 340 to 170 ADA by a Conway parameter change.
    key_deposit: int = 2_000_000
    pool_deposit: int = 500_000_000
    pool_retirement_epoch_bound: int = 18
    desired_pools: int = 500
    pledge_influence: Fraction = Fraction(3, 10)
    monetary_expansion: Fraction = Fraction(3, 1000)
    treasury_expansion: Fraction = Fraction(1, 5)
    min_pool_cost: int = 170_000_000
    # Babbage: coinsPerUTxOByte 4,310 (Alonzo's 34,482 per 8-byte word, per byte).
    coins_per_utxo_byte: int = 4_310
    # Plutus prices: alonzo-genesis executionPrices as lowered in 2022 (prMem, prSteps).
    price_memory: Fraction = Fraction(577, 10_000)
    price_steps: Fraction = Fraction(721, 10_000_000)
    # Execution limits: memory 16.5M per tx and 72M per block since the 2026 parameter update
    # (14M and 62M before it); steps 10B per tx and 20B per block since 2022.
    max_tx_memory: int = 16_500_000
    max_tx_steps: int = 10_000_000_000
    max_block_memory: int = 72_000_000
    max_block_steps: int = 20_000_000_000
    # Collateral: alonzo-genesis collateralPercentage and maxCollateralInputs.
    collateral_percentage: int = 150
    max_collateral_inputs: int = 3
    # Plomin hard fork (January 2025): protocol version 10.0.
    protocol_version: tuple[int, int] = (10, 0)
    # Reference scripts: Conway's ledger constants (200 KiB per tx, 15 lovelace/B in 25,600 B
    # tiers, x1.2 per tier; minFeeRefScriptCostPerByte in conway-genesis).
    max_reference_scripts_size: int = 204_800
    reference_script_fee: ReferenceScriptFee = ReferenceScriptFee()
    # Governance: conway-genesis govActionDeposit (100k ADA) and dRepDeposit (500 ADA).
    governance_action_deposit: int = 100_000_000_000
    drep_deposit: int = 500_000_000
    cost_models: dict[str, list[int]] = dataclasses.field(default_factory=_uplc_cost_models)

    def script_fee(self, memory: int, steps: int) -> int:
        """Fee for execution units: each price term is rounded up separately, as pycardano does."""
        return _ceil(self.price_memory * memory) + _ceil(self.price_steps * steps)

    def min_fee(self, tx_size: int, memory: int, steps: int, reference_scripts_size: int) -> int:
        return (
            self.min_fee_coefficient * tx_size
            + self.min_fee_constant
            + self.script_fee(memory, steps)
            + self.reference_script_fee.fee(reference_scripts_size)
        )

    def to_ogmios(self) -> dict[str, Any]:
        """The `queryLedgerState/protocolParameters` result: exactly the keys clients expect."""
        fee = self.reference_script_fee
        return {
            "minFeeCoefficient": self.min_fee_coefficient,
            "minFeeConstant": lovelace(self.min_fee_constant),
            "minFeeReferenceScripts": {
                # Ogmios publishes these as JSON numbers; the ledger computes with rationals.
                "base": _json_number(fee.base),
                "range": fee.range,
                "multiplier": _json_number(fee.multiplier),
            },
            "maxBlockBodySize": {"bytes": self.max_block_body_size},
            "maxBlockHeaderSize": {"bytes": self.max_block_header_size},
            "maxTransactionSize": {"bytes": self.max_tx_size},
            "maxReferenceScriptsSize": {"bytes": self.max_reference_scripts_size},
            "stakeCredentialDeposit": lovelace(self.key_deposit),
            "stakePoolDeposit": lovelace(self.pool_deposit),
            "stakePoolRetirementEpochBound": self.pool_retirement_epoch_bound,
            "desiredNumberOfStakePools": self.desired_pools,
            "stakePoolPledgeInfluence": ratio(self.pledge_influence),
            "monetaryExpansion": ratio(self.monetary_expansion),
            "treasuryExpansion": ratio(self.treasury_expansion),
            "minStakePoolCost": lovelace(self.min_pool_cost),
            "minUtxoDepositConstant": lovelace(0),
            "minUtxoDepositCoefficient": self.coins_per_utxo_byte,
            "plutusCostModels": {lang: list(self.cost_models[lang]) for lang in PLUTUS_LANGUAGES},
            "scriptExecutionPrices": {
                "memory": ratio(self.price_memory),
                "cpu": ratio(self.price_steps),
            },
            "maxExecutionUnitsPerTransaction": {
                "memory": self.max_tx_memory,
                "cpu": self.max_tx_steps,
            },
            "maxExecutionUnitsPerBlock": {
                "memory": self.max_block_memory,
                "cpu": self.max_block_steps,
            },
            "maxValueSize": {"bytes": self.max_value_size},
            "collateralPercentage": self.collateral_percentage,
            "maxCollateralInputs": self.max_collateral_inputs,
            "version": {"major": self.protocol_version[0], "minor": self.protocol_version[1]},
            "stakePoolVotingThresholds": _POOL_THRESHOLDS,
            "delegateRepresentativeVotingThresholds": _DREP_THRESHOLDS,
            # conway-genesis: committeeMinSize, committeeMaxTermLength, govActionLifetime,
            # dRepActivity; the voting thresholds below are conway-genesis's too.
            "constitutionalCommitteeMinSize": 7,
            "constitutionalCommitteeMaxTermLength": 146,
            "governanceActionLifetime": 6,
            "governanceActionDeposit": lovelace(self.governance_action_deposit),
            "delegateRepresentativeDeposit": lovelace(self.drep_deposit),
            "delegateRepresentativeMaxIdleTime": 20,
        }

    def with_overrides(self, overrides: dict[str, Any]) -> ProtocolParameters:
        """A copy with some fields replaced (e.g. from the devnet's TOML settings)."""
        converted = {
            key: Fraction(value) if isinstance(getattr(self, key), Fraction) else value
            for key, value in overrides.items()
        }
        return dataclasses.replace(self, **converted)


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def _json_number(value: Fraction) -> int | float:
    if value.denominator == 1:
        return value.numerator
    return float(value)  # wire format only: Ogmios sends this ratio as a JSON number


_POOL_THRESHOLDS = {
    "noConfidence": "51/100",
    "constitutionalCommittee": {"default": "51/100", "stateOfNoConfidence": "51/100"},
    "hardForkInitiation": "51/100",
    "protocolParametersUpdate": {"security": "51/100"},
}
_DREP_THRESHOLDS = {
    "noConfidence": "67/100",
    "constitutionalCommittee": {"default": "67/100", "stateOfNoConfidence": "3/5"},
    "constitution": "3/4",
    "hardForkInitiation": "3/5",
    "protocolParametersUpdate": {
        "network": "67/100",
        "economic": "67/100",
        "technical": "67/100",
        "governance": "3/4",
    },
    "treasuryWithdrawals": "67/100",
}

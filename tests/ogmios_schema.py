"""Validate JSON-RPC responses against the Ogmios v6 schema shipped with the `ogmios` package.

Clients trust the schema's shapes, so every answer the devnet gives is checked against it.
Known defects of the published schema are patched: `Value` forbids its own `ada` key
through `propertyNames`; `Genesis<Byron>` requires a `protocolParameters` key that its
properties call `updatableParameters`, and types it as Shelley `ProtocolParameters` where the
server sends (and the Python client parses) Byron's `BootstrapProtocolParameters`; Praos
blocks may not be from the Conway era (v6.14 allows it). And one
answer is pinned to the newest v6 (6.14): `rewardAccountSummaries` is a list of summaries
that need not name a stake pool (the older copy wants an object keyed by credential with a
required delegate, which undelegated script credentials cannot give).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry
from referencing.jsonschema import DRAFT7


def response_name(method: str) -> str:
    """The schema's name for a method: "queryLedgerState/utxo" -> "QueryLedgerStateUtxo"."""
    return "".join(part[:1].upper() + part[1:] for part in method.split("/"))


def validate(method: str, response: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError unless `response` is a valid answer to `method`."""
    _validator(response_name(method)).validate(response)


def validate_error(method: str, error: dict[str, Any]) -> None:
    """Validate an `error` object (code, message, data) as the answer to `method`."""
    validate(method, {"jsonrpc": "2.0", "method": method, "error": error, "id": None})


@functools.cache
def _validator(name: str) -> Draft7Validator:
    schema = {"$ref": f"ogmios.json#/properties/{name}Response"}
    return Draft7Validator(schema, registry=_registry())


@functools.cache
def _registry() -> Registry:
    ogmios = _load("ogmios.json")
    cardano = _load("cardano.json")
    definitions = cardano["definitions"]
    definitions["Value"]["propertyNames"]["pattern"] = "^(ada|[0-9a-f]{56})$"
    byron = definitions["Genesis<Byron>"]
    byron["required"] = [
        "updatableParameters" if key == "protocolParameters" else key for key in byron["required"]
    ]
    definitions["Block<Praos>"]["properties"]["era"]["enum"].append("conway")
    byron["properties"]["updatableParameters"] = {
        "$ref": "cardano.json#/definitions/BootstrapProtocolParameters"
    }
    ogmios["properties"]["QueryLedgerStateRewardAccountSummariesResponse"]["oneOf"][0][
        "properties"
    ]["result"] = {"type": "array", "items": REWARD_ACCOUNT_SUMMARY_V6_14}
    return Registry().with_resources(
        (name, DRAFT7.create_resource(contents))
        for name, contents in (("ogmios.json", ogmios), ("cardano.json", cardano))
    )


def _load(name: str) -> dict[str, Any]:
    return json.loads(resources.files("ogmios").joinpath("model", name).read_text())


REWARD_ACCOUNT_SUMMARY_V6_14 = {
    "type": "object",
    "additionalProperties": False,
    "required": ["from", "credential", "rewards", "deposit"],
    "properties": {
        "from": {"type": "string", "enum": ["verificationKey", "script"]},
        "credential": {"$ref": "cardano.json#/definitions/Digest<Blake2b, 224>"},
        "stakePool": {
            "type": "object",
            "additionalProperties": False,
            "required": ["id"],
            "properties": {"id": {"$ref": "cardano.json#/definitions/StakePoolId"}},
        },
        "rewards": {"$ref": "cardano.json#/definitions/Value<AdaOnly>"},
        "deposit": {"$ref": "cardano.json#/definitions/Value<AdaOnly>"},
    },
}

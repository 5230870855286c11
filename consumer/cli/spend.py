"""`unchained spend`: one view of a renter's money. Every job (as `job spend` shows it) and every
payment channel recorded here, each with what it cost, from the chain as the market's index
shows it: paid to providers, fees, deposits, what came back, and the net cost, whose total is
the wallet's difference for them, to the lovelace. (No `from __future__ import annotations`:
typer reads these annotations through `consumer.cli.main.command`'s signature.)"""

import typer

from consumer.cli.main import LIST_LIMIT, Env, Json, command, emit, market_reader, merged_jobs
from consumer.sdk.store import JobStore
from offchain.protocol.ledger.amounts import ada

app = typer.Typer(help="What your jobs and channels cost, to the lovelace: paid, fees, what "
                  "came back.")  # fmt: skip
CHANNEL_COLUMNS = ("channel", "state", "put in", "fees", "claimed", "came back", "held", "net cost")


@command(app, None)
def spend(env: Env, as_json: Json = False) -> None:
    """What your jobs and channels cost: each one's money and the net cost, with the total
    (your wallet's difference for all of them, to the lovelace)."""
    from consumer.sdk.channel_spend import channel_cost
    from consumer.sdk.channel_store import ChannelStore
    from consumer.sdk.spend import SPEND_COLUMNS, job_costs, or_none, spend_row, spend_total

    reader = market_reader(env)
    get = or_none(reader.get)
    jobs = job_costs(get, merged_jobs(JobStore(env.state_dir).all(), reader.my_jobs(LIST_LIMIT)))
    channels = [channel_cost(get, r.channel_id) for r in ChannelStore(env.state_dir).all()]
    jobs_total = spend_total(jobs)
    total = {
        "jobs_net_cost": jobs_total["net_cost"],
        "channels_net_cost": sum(c.net_cost for c in channels),
        "fees": jobs_total["lock_fee"]
        + jobs_total["fee_allowance"]
        + sum(c.fees for c in channels),
        "paid_to_providers": jobs_total["provider_paid"] + sum(c.claimed for c in channels),
        "held_in_channels": sum(c.held for c in channels),
    }
    total["net_cost"] = total["jobs_net_cost"] + total["channels_net_cost"]
    if as_json:
        emit(True, {"jobs": [c.as_json() for c in jobs],
                    "channels": [c.as_json() for c in channels], "total": total}, "")  # fmt: skip
        return
    from consumer.cli.table import render

    lines = [spend_row(cost) for cost in jobs]
    lines.append(["total", f"{len(jobs)} job(s)", *(ada(v) for v in jobs_total.values())])
    typer.echo(render(SPEND_COLUMNS, lines, title="jobs (ADA)"))
    rows = [[c.channel_id[:16], c.state or "-",
             *(ada(v) for v in (c.put_in, c.fees, c.claimed, c.returned, c.held, c.net_cost))]
            for c in channels]  # fmt: skip
    typer.echo(render(CHANNEL_COLUMNS, rows, title="channels (ADA)"))
    typer.echo(f"net cost {ada(total['net_cost'])}: paid to providers "
               f"{ada(total['paid_to_providers'])}, fees and allowances {ada(total['fees'])}, "
               f"still held in open channels {ada(total['held_in_channels'])}")  # fmt: skip

"""`unchained job ...`, `unchained offers search` and `unchained wallet ...`: the consumer's
commands. Each parses its input, calls the SDK (`consumer.sdk.session`) and prints: a human reading
by default, one JSON document with `--json`. Errors are messages that say what to do (exit 1),
or `{"error": kind, "message": ..., facts}` with `--json`.

Connection options come after any command, from flags, else `UNCHAINED_*` variables, else the
defaults (the project's order; the consumer has no settings file): the key, the market (URL
and the identity its requests are signed for), the chain's Ogmios, the protocol deployment and
the state directory where jobs are recorded. Each is declared once, as a field of `Env`; typer
reads them, as no settings model may be imported before `job list` runs (pydantic alone took
a tenth of a second of its start: tests/test_cli_imports.py)."""

import dataclasses
import functools
import inspect
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar, cast

import typer

from consumer.cli.example import EXAMPLES
from consumer.cli.unsigned import UnsignedTx, defer
from consumer.sdk.errors import ConsumerError
from consumer.sdk.store import JobStore, local_time
from offchain.chain import DEFAULT_OGMIOS_URL
from offchain.chain.network import DEFAULT_NETWORK, SETTING_HELP, ChainNetwork, parse_network
from offchain.core.errors import UnchainedError
from offchain.protocol.job.outcome import describe
from offchain.protocol.ledger.amounts import ada, parse_lovelace, per_hour

# What a command uses beyond this is imported in the command: pycardano, the chain clients and
# the SDK take seconds to import, and `unchained job list` or `--help` needs none of them (nor
# rich's tables with --json, nor pydantic for an empty job store).
if TYPE_CHECKING:
    from pycardano import Network

    from consumer.sdk.job_record import JobRecord
    from consumer.sdk.keys import ConsumerKey
    from consumer.sdk.market_read import MarketReader
    from consumer.sdk.quote import CheckedQuote
    from consumer.sdk.request_key import RequestKey
    from consumer.sdk.session import Consumer
    from offchain.chain.context import OgmiosContext
    from offchain.protocol.job.jobspec import JobSpec
    from offchain.protocol.tx.deployment import Deployment

T = TypeVar("T")
job_app = typer.Typer(help="Submit GPU jobs, follow them, get verified results or a refund.",
                      no_args_is_help=True)  # fmt: skip
offers_app = typer.Typer(help="Offers on the market.", no_args_is_help=True)
wallet_app = typer.Typer(help="The consumer's key and funds.", no_args_is_help=True)

Json = Annotated[bool, typer.Option("--json", help="One JSON document on stdout, for scripts.")]


class WaitFor(StrEnum):
    """Where `job submit`'s progress ends."""

    COMPLETED = "completed"
    SETTLED = "settled"


MIN_BOND_HELP = "Only a provider whose bond, checked on chain, holds at least this (e.g. 100ADA)."
MIN_DELIVERED_HELP = (
    "Only a provider that delivered at least this share of its jobs, as the market counts "
    "them from the chain (offers search shows each record)."
)
JobId = Annotated[
    str,
    typer.Argument(
        help="The job id `job submit` printed, a unique prefix of it, or its escrow TXID#IX."
    ),
]


def connection(variable: str, help: str, *, path: bool = False) -> dict[str, Any]:
    """An `Env` field's metadata: the option every command takes for it."""
    return {"option": typer.Option(envvar=variable, resolve_path=path, help=help)}


@dataclasses.dataclass(frozen=True)
class Env:
    """Where the consumer's key, market, chain and records are."""

    key: Path = dataclasses.field(
        default=Path("data/consumer/consumer.skey"),
        metadata=connection("UNCHAINED_CONSUMER_KEY",
                            "cardano-cli .skey file or BIP-39 mnemonic file (a wallet's .vkey "
                            "for --unsigned-tx).", path=True),
    )  # fmt: skip
    market_url: str = dataclasses.field(
        default="http://127.0.0.1:8080",
        metadata=connection("UNCHAINED_CONSUMER_MARKET_URL", "The market's base URL."),
    )
    market_identity: str = dataclasses.field(
        default="unchained-market",
        metadata=connection(
            "UNCHAINED_CONSUMER_MARKET_IDENTITY", "The market's identity, signed into requests."
        ),
    )
    ogmios_url: str = dataclasses.field(
        default=DEFAULT_OGMIOS_URL,
        metadata=connection("UNCHAINED_OGMIOS_URL", "The chain's Ogmios."),
    )
    deployment: Path = dataclasses.field(
        default=Path("data/deployment.json"),
        metadata=connection("UNCHAINED_DEPLOYMENT", "The protocol deployment (JSON).", path=True),
    )
    state_dir: Path = dataclasses.field(
        default=Path("data/consumer"),
        metadata=connection(
            "UNCHAINED_CONSUMER_STATE_DIR", "Where submitted jobs are recorded.", path=True
        ),
    )
    network: str = dataclasses.field(
        default=DEFAULT_NETWORK, metadata=connection("UNCHAINED_NETWORK", SETTING_HELP)
    )
    default_registry: str = dataclasses.field(
        default="engine",
        metadata=connection(
            "UNCHAINED_DEFAULT_REGISTRY", "The registry a bare image name is read in: its "
            "host[:port], `engine` (the local docker engine's) or empty (none).",
        ),
    )  # fmt: skip

    @property
    def chain(self) -> ChainNetwork:
        """The network the setting names (NetworkSettingError, a message, when none)."""
        return parse_network(self.network)

    @property
    def network_id(self) -> int:
        """The network id an address carries: 1 on mainnet, 0 on a test network."""
        return self.chain.network_id

    @property
    def pycardano_network(self) -> "Network":
        return self.chain.pycardano


def command(
    app: typer.Typer, name: str | None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(env, ..., as_json)` as a command taking the connection options after its
    own, turning every UnchainedError (and a bad job spec) into its message and exit 1; with
    no `name`, as what `app` itself runs (a one-command component: `unchained spend`)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(fn).parameters.values() if p.name != "env"]
        extra = [
            inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY,
                              annotation=Annotated[field.type, field.metadata["option"]],
                              default=field.default)
            for field in dataclasses.fields(Env)
        ]  # fmt: skip

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            env = Env(**{field.name: kwargs.pop(field.name) for field in dataclasses.fields(Env)})
            as_json = kwargs.get("as_json", False)
            try:
                if "job_id" in kwargs:  # a prefix or escrow ref of a job recorded here
                    kwargs["job_id"] = JobStore(env.state_dir).resolve(kwargs["job_id"])
                return fn(env, *args, **kwargs)
            except UnchainedError as exc:  # a bad job spec (JobSpecError) too
                fail(as_json, type(exc).__name__, str(exc), **getattr(exc, "details", {}))
            except unreachable() as exc:  # the market client says so itself for the market
                fail(as_json, "OgmiosUnreachable",
                     f"cannot reach Ogmios at {env.ogmios_url} ({reason(exc)}): is the devnet "
                     "(or your node's Ogmios) running? Point --ogmios-url or "
                     "UNCHAINED_OGMIOS_URL at it", ogmios_url=env.ogmios_url)  # fmt: skip
            except OSError as exc:  # a file or folder named that cannot be read or written
                file_error(as_json, exc)

        run.__signature__ = inspect.Signature([*own, *extra])  # type: ignore[attr-defined]
        del run.__wrapped__  # typer reads the signature above, not the wrapped function's
        if name is None:
            return app.callback(invoke_without_command=True)(run)
        return app.command(name)(run)

    return register


def unreachable() -> tuple[type[Exception], ...]:
    """What a lost or refused connection to Ogmios raises, imported only when an error is
    being told: it imports websockets, which `job list` never loads."""
    from offchain.chain.ogmios import UNREACHABLE

    return UNREACHABLE


def fail(as_json: bool, kind: str, message: str, **details: Any) -> NoReturn:
    """Exit 1 saying `message`: on stderr, or as one JSON document `{"error": kind, ...}`."""
    if as_json:
        typer.echo(json.dumps({"error": kind, "message": message, **details}, indent=2))
    else:
        typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def file_error(as_json: bool, exc: OSError) -> NoReturn:
    """Exit 1 naming the path the system refused and why (e.g. `IsADirectoryError`)."""
    message = f"{exc.filename}: {exc.strerror}" if exc.filename else reason(exc)
    fail(as_json, type(exc).__name__, message, path=exc.filename)


def reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def emit(as_json: bool, data: Any, human: str) -> None:
    typer.echo(json.dumps(data, indent=2, default=str) if as_json else human)


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    import asyncio  # here and in each coroutine: `job list` and `offers search` need none

    return asyncio.run(coroutine)


def on_chain(env: Env) -> tuple["ConsumerKey", "OgmiosContext", "Deployment"]:
    """The key, the chain and the deployment checked on it (blocking: it reads the chain)."""
    from consumer.sdk.keys import load_key
    from consumer.sdk.pending import AvoidingPending, PendingStore
    from offchain.chain.context import quiet_chain_clients
    from offchain.protocol.tx.deployment_start import open_checked

    quiet_chain_clients()
    context, deployment = open_checked(env.ogmios_url, env.deployment, env.chain)
    key = load_key(env.key, deployment.network)
    busy = PendingStore(env.state_dir).busy(context.last_block_slot)
    if busy:  # the coins a wallet is signing for are not spent again
        context = cast("OgmiosContext", AvoidingPending(context, key.address, busy))
    return key, context, deployment


@asynccontextmanager
async def opened(env: Env) -> AsyncIterator["Consumer"]:
    """The SDK for `env`: the key, the chain (the deployment checked on it) and the market."""
    import asyncio

    from consumer.sdk.client import MarketClient
    from consumer.sdk.session import Consumer

    key, context, deployment = await asyncio.to_thread(on_chain, env)
    market = MarketClient.open(env.market_url, env.market_identity, key)
    try:
        yield Consumer(key, market, context, env.ogmios_url, deployment, JobStore(env.state_dir),
                       default_registry=env.default_registry)  # fmt: skip
    finally:
        await market.aclose()


def market_reader(env: Env) -> "MarketReader":
    """The market alone, read with one signed GET at a time (no chain, no deployment, no
    asyncio, no httpx; a plain --key signs without pycardano)."""
    from consumer.sdk.market_read import MarketReader

    return MarketReader(env.market_url, env.market_identity, request_key(env))


def request_key(env: Env) -> "RequestKey | ConsumerKey":
    """--key, to sign requests and name its address: a plain payment key read without
    pycardano (`consumer.sdk.request_key`), a mnemonic or an extended key through it."""
    from consumer.sdk.request_key import plain_request_key

    plain = plain_request_key(env.key, env.network_id)
    if plain is not None:
        return plain
    from consumer.sdk.keys import load_key

    return load_key(env.key, env.pycardano_network)


# --- job -----------------------------------------------------------------------------------


def init_command(
    app: typer.Typer, what: str, default: str, text: str | dict[str, str], then: str
) -> None:
    """Register `init` on `app`: it writes the commented example `what` spec `text` (or the
    one `--example NAME` picks of several, the first by default) to `default` unless told,
    not over a file unless --force, and says the command (`then`) that takes it next."""
    examples = text if isinstance(text, dict) else {"": text}
    names = [name for name in examples if name]

    def init(
        path: Annotated[Path, typer.Argument(help="Where to write the example spec.")] = Path(
            default
        ),
        force: Annotated[bool, typer.Option(help="Replace an existing file.")] = False,
        example: Annotated[
            str, typer.Option(help=f"Which example: {', '.join(names)}.", hidden=not names)
        ] = next(iter(examples)),
        as_json: Json = False,
    ) -> None:
        if example not in examples:
            fail(as_json, "UnknownExample",
                 f"--example: no example {example!r}; there are "
                 f"{', '.join(names) or 'none to choose'}")  # fmt: skip
        if path.exists() and not force:
            fail(as_json, "FileExists", f"{path} exists (use --force to replace it)",
                 path=str(path))  # fmt: skip
        try:
            path.write_text(examples[example])
        except OSError as exc:
            file_error(as_json, exc)
        emit(as_json, {"path": str(path)},
             f"wrote {path}: edit it, then `unchained {then} {path}`")  # fmt: skip

    init.__doc__ = f"Write a commented example {what} spec to edit."
    app.command("init")(init)


init_command(job_app, "job", "job.yaml", EXAMPLES, "job submit")


def quote_summary(quote: "CheckedQuote", lock_fee: int) -> dict[str, Any]:
    datum = quote.datum
    return {
        "least_cost_lovelace": datum.fee_allowance + lock_fee, "lock_fee": lock_fee,
        "job_id": quote.job_id, "provider_id": quote.provider_id, "gpu_model": quote.gpu_model,
        "gpu_count": quote.terms["gpu_count"], "price_per_unit": datum.price_per_unit,
        "max_units": datum.max_units, "max_cost": quote.max_cost,
        "fee_allowance": datum.fee_allowance, "refund_deposit": quote.refund_deposit,
        "lock_lovelace": quote.lovelace,
        "worst_case_lovelace": quote.worst_case, "deadline_ms": datum.deadline,
        "settle_window_ms": datum.settle_window, "quote_expires_ms": quote.quote_expires_ms,
        "bond": quote.terms.get("bond"), "bond_lovelace": quote.bond_lovelace,
        "fee_allowance_note": quote.allowance_note, "image": quote.image,
    }  # fmt: skip


def quote_text(quote: "CheckedQuote", lock_fee: int) -> str:
    """The quote as a renter reads it: what the job costs whatever happens, first."""
    from offchain.chain.time import iso

    datum, terms = quote.datum, quote.terms
    gpus = f"{terms['gpu_count']} x {quote.gpu_model}" if terms["gpu_count"] else "no GPU"
    bond = "none named (nothing to slash if it never delivers)"
    if quote.bond_lovelace:
        bond = f"{ada(quote.bond_lovelace)} (checked on chain: backs this job until it closes)"
    return "\n".join([
        f"this job costs at least {ada(datum.fee_allowance + lock_fee)}, even if it never runs "
        f"({ada(datum.fee_allowance)} fee allowance + {ada(lock_fee)} lock fee), plus "
        f"{per_hour(datum.price_per_unit)} while it runs; {ada(quote.worst_case + lock_fee)} "
        "at most",
        f"quote for job {quote.job_id} (offer signed by its provider: checked)",
        f"  provider    {quote.provider_id}",
        f"  image       {quote.image}",
        f"  GPU         {gpus} ({terms['vram_mib']} MiB each), {terms['cpu_cores']} cores, "
        f"{terms['memory_mib']} MiB memory",
        f"  price       {per_hour(datum.price_per_unit)} ({datum.price_per_unit:,} lovelace per "
        "second, the chain's unit)",
        f"  worst case  {ada(quote.worst_case)}: {datum.max_units} s at most "
        f"({ada(quote.max_cost)}) + {ada(datum.fee_allowance)} fee allowance",
        f"  allowance   {quote.allowance_note or 'not refunded: it pays the settle fee'}",
        f"  deposit     {ada(quote.refund_deposit)}, always refunded: at least the ledger's "
        "minimum for your refund output, so no settlement needs a top-up",
        f"  locked      {ada(quote.lovelace)} = worst case + deposit; the price of unused time "
        "and the deposit come back at settlement",
        f"  bond        {bond}",
        f"  deadline    {iso(datum.deadline)} chain time; refundable after "
        f"{iso(datum.close)} if not settled",
    ])  # fmt: skip


@command(job_app, "submit")
def submit(
    env: Env,
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="The job spec (YAML).")],
    gpu_model: Annotated[str | None, typer.Option(help="Only this exact GPU model.")] = None,
    min_delivered: Annotated[
        int | None, typer.Option(min=0, max=100, metavar="PERCENT", help=MIN_DELIVERED_HELP)
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Lock without asking.")] = False,
    unsigned_tx: UnsignedTx = None,
    detach: Annotated[bool, typer.Option(help="Return once funded; don't show progress.")] = False,
    wait: Annotated[
        WaitFor,
        typer.Option(
            help="Show progress until the job is completed (its receipt signed: the settle follows "
            "on its own) or settled."
        ),
    ] = WaitFor.COMPLETED,
    min_bond: Annotated[
        str | None, typer.Option(envvar="UNCHAINED_CONSUMER_MIN_BOND", help=MIN_BOND_HELP)
    ] = None,
    force_escrow: Annotated[
        bool,
        typer.Option(
            "--escrow",
            help="Lock an escrow even when an open channel to the quoted provider has room "
            "(without it such a channel pays per second: no lock fee, no settle).",
        ),
    ] = False,
    again: Annotated[
        bool,
        typer.Option(
            "--again",
            help="Submit it even though a job of this same spec was locked from here "
            "before (without it: asked, or refused when nobody is asked).",
        ),
    ] = False,
    registry_auth: Annotated[
        Path | None,
        typer.Option(
            envvar="UNCHAINED_REGISTRY_AUTH",
            help="A docker config file (`auths`, as `docker login` writes) with your account "
            "for a private image's registry: the image is pinned with it here and the account "
            "sealed to the quoted provider's key (the market carries only ciphertext).",
        ),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            metavar="JOB",
            help="Start from the last checkpoint of your earlier job JOB (its id or a prefix): "
            "its verified results are kept in results/JOB and their checkpoint.pt becomes this "
            "job's /in/checkpoint.pt.",
        ),
    ] = None,
    failover: Annotated[
        int,
        typer.Option(
            min=0,
            max=10,
            help="Lock with a start deadline (--start-within) and watch the job until it ends; "
            "when the provider has not started it by then, take the money back at once, and "
            "when it fails the job for its own reasons (its receipt says stopped, or nothing "
            "ran) or goes silent while running (refunded at the close), lock again with "
            "another provider, up to this many times (--detach: only until it started).",
        ),
    ] = 0,
    start_within: Annotated[
        int, typer.Option(min=10, max=3600, help="With --failover: the start deadline, s.")
    ] = 60,
    as_json: Json = False,
) -> None:
    """Quote a job; run it over an open channel to the quoted provider when one has room (paid
    per second by IOU), else show the quote, lock its escrow (after asking) and show live
    progress."""
    from consumer.cli.channel_job import try_channel
    from consumer.sdk.registry_login import RegistryLogins
    from offchain.protocol.job.jobspec import load_jobspec

    spec = load_jobspec(spec_path)
    if resume is not None:
        spec = run_sync(resumed(env, JobStore(env.state_dir).resolve(resume), spec))
    try:
        least = 0 if min_bond is None else parse_lovelace(min_bond)
    except ValueError as exc:
        raise ConsumerError(f"--min-bond: {exc}") from exc
    earlier = None if again else locked_before(env, spec.model_dump(mode="json"))
    if earlier is not None:
        said = (f"job {earlier.job_id} of this same spec was locked from here at "
                f"{local_time(earlier.created_ms)}")  # fmt: skip
        if yes or as_json or unsigned_tx is not None:
            raise ConsumerError(f"{said}: pass --again to submit another paid job",
                                job_id=earlier.job_id)  # fmt: skip
        if not typer.confirm(f"{said}; submit another paid job?"):
            typer.echo("nothing submitted")
            return

    async def go() -> str | None:
        async with opened(env) as consumer:
            consumer.min_bond_lovelace = least
            if failover:
                from consumer.cli.failover import submit_failover

                job_id = await submit_failover(
                    consumer,
                    spec,
                    gpu_model,
                    failover,
                    start_within,
                    min_delivered,
                    yes,
                    as_json,
                    detach,
                )
                settled = wait == WaitFor.SETTLED
                return None if as_json or detach else await follow(consumer, job_id, settled)
            logins = RegistryLogins.read(registry_auth) if registry_auth else None
            quote = await consumer.quote(spec, gpu_model, logins, min_delivered)
            why = "--escrow" if force_escrow else "an unsigned lock was asked for"
            private = logins is not None and logins.for_image(spec.image, env.default_registry)
            if private:  # its sealed account reaches the provider with the escrow's assignment
                why = "a private image (--registry-auth) runs on the escrow path"
            elif not force_escrow and unsigned_tx is None:
                why = await try_channel(env, consumer, quote, as_json)
                if why is None:
                    return None
            unsigned = await consumer.build_lock(quote.job_id)
            lock_fee = unsigned.transaction_body.fee
            summary = quote_summary(quote, lock_fee)
            if not as_json:
                typer.echo(f"escrow path: {why}")
                typer.echo(quote_text(quote, lock_fee))
            if unsigned_tx is not None:
                from consumer.sdk.pending import Prepared

                prepared = Prepared("lock", unsigned, {"job_id": quote.job_id})
                defer(env, consumer.key, prepared, unsigned_tx, as_json, **summary)
                return None
            if not yes:
                if as_json:
                    raise ConsumerError("--json needs --yes: there is no one to ask")
                if not typer.confirm(f"lock {ada(quote.lovelace)} for this job?"):
                    typer.echo("nothing locked")
                    return None
            escrow = await consumer.submit_lock(quote.job_id, consumer.key.sign(unsigned))
            emit(as_json, {**summary, "path": "escrow", "why_escrow": why, "escrow": escrow,
                           "lock_tx": unsigned.id.payload.hex()},
                 f"escrow {escrow} locked and funded")  # fmt: skip
            if as_json or detach:
                return None
            return await follow(consumer, quote.job_id, until_settled=wait == WaitFor.SETTLED)

    run_sync(go())


async def resumed(env: Env, job_id: str, spec: "JobSpec") -> "JobSpec":
    """`spec` given the last checkpoint of the renter's job `job_id` (`consumer.sdk.resume`)."""
    from consumer.sdk.resume import resumed_spec

    async with opened(env) as consumer:
        return await resumed_spec(consumer, job_id, spec, Path("results") / job_id)


def locked_before(env: Env, spec: dict[str, Any]) -> "JobRecord | None":
    """The newest job recorded here with this spec whose escrow was locked (a quote alone
    cost nothing), if any: a second submit of it is most often a mistake."""
    same = [r for r in JobStore(env.state_dir).all() if r.spec == spec and r.escrow]
    return max(same, key=lambda r: r.created_ms, default=None)


async def follow(consumer: "Consumer", job_id: str, until_settled: bool = True) -> str:
    """Live progress until a final state (or `completed`, unless `until_settled`) or Ctrl-C
    (the job goes on without the display)."""
    import asyncio

    from rich.console import Console

    from consumer.cli.progress import FINAL, watch
    from offchain.protocol.job.job_state import SETTLE_NEXT, JobState

    stop_at = frozenset(FINAL if until_settled else {*FINAL, JobState.COMPLETED})
    try:
        state = await watch(consumer, job_id, Console(), stop_at)
    except asyncio.CancelledError:
        state = "detached"
    hint = {
        JobState.SETTLED: f"`unchained job results {job_id}` downloads and verifies the results",
        JobState.COMPLETED: f"completed: {SETTLE_NEXT}; `unchained job status {job_id} --watch` "
        "follows it (`job submit --wait settled` waits for it)",
        "detached": f"detached; the job goes on: `unchained job status {job_id} --watch`",
    }.get(state, f"`unchained job status {job_id}`")
    typer.echo(hint)
    return state


@command(job_app, "lock")
def lock(
    env: Env,
    job_id: JobId,
    signed: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            help="The lock your wallet signed: CBOR hex, a TextEnvelope or a CIP-30 witness set.",
        ),
    ],
    as_json: Json = False,
) -> None:
    """Submit the lock an external wallet signed (from `job submit --unsigned-tx`): the same as
    `unchained tx submit` with the lock's transaction id, kept for scripts that use it."""
    from consumer.cli.tx import finish_pending

    tx_id = JobStore(env.state_dir).get(job_id).lock_tx_id
    if tx_id is None:
        raise ConsumerError(f"no lock was built for job {job_id} here: `unchained job submit "
                            "SPEC --unsigned-tx FILE` builds one", job=job_id)  # fmt: skip
    finish_pending(env, tx_id, signed, as_json)


def report_lock(as_json: bool, kind: str, facts: dict[str, Any], escrow: str) -> None:
    """What a lock signed elsewhere did, once in a block (`unchained tx submit`)."""
    emit(as_json, {"job_id": facts["job_id"], "escrow": escrow},
         f"escrow {escrow} locked and funded")  # fmt: skip


@command(job_app, "status")
def status(
    env: Env,
    job_id: JobId,
    watch_: Annotated[bool, typer.Option("--watch", help="Show live progress.")] = False,
    as_json: Json = False,
) -> None:
    """The job's state as the market knows it (`--watch`: live until it ends; with `--json`,
    the state it ended in). Without --watch, from the market alone (no chain, no asyncio)."""

    async def watch() -> None:
        async with opened(env) as consumer:
            if as_json:
                async for _ in consumer.events(job_id):  # the stream ends at a final state
                    pass
            else:
                await follow(consumer, job_id)

    from consumer.sdk.spend import cost_lines, job_cost, or_none

    if watch_:
        run_sync(watch())
    reader = market_reader(env)
    job = reader.job(job_id)
    if job["outcome"] not in (None, "succeeded"):  # why it ended is in its last lines
        job["log_tail"] = [line["text"] for line in reader.log_tail(job_id, LOG_TAIL_LINES)]
    units = job["receipt_units"]
    cost = job_cost(or_none(reader.get), job["id"], job["state"], job["escrow"], units)
    job["cost"] = cost.as_json()
    lines = [f"job {job['id']}: {job['state']}", f"  escrow   {job['escrow'] or '-'}",
             f"  GPU      {job['gpu_model'] or '-'}",
             f"  receipt  {'-' if units is None else f'{units} units'}"]  # fmt: skip
    if job["outcome"]:
        lines.append(f"  outcome  {describe(job['outcome'], job['exit_code'], units)}")
    if job["failure_reason"]:
        lines.append(f"  failure  {job['failure_reason']}")
    lines += cost_lines(cost)
    if "log_tail" in job:
        lines.append(f"  last {len(job['log_tail'])} log line(s):")
        lines.extend(f"    {text}" for text in job["log_tail"])
    emit(as_json, job, "\n".join(lines))


LOG_TAIL_LINES = 10


@command(job_app, "logs")
def logs(
    env: Env,
    job_id: JobId,
    follow_: Annotated[bool, typer.Option("--follow", "-f", help="Until the job ends.")] = False,
    as_json: Json = False,
) -> None:
    """The job's log lines (`--json`: one document holding them all, once the job ends with
    `--follow`)."""

    from consumer.cli.progress import FINAL

    kept: list[dict[str, Any]] = []

    async def go() -> str:
        """Print the lines; the job's state when they end."""
        import asyncio

        async with opened(env) as consumer:
            after = -1
            while True:
                for line in await consumer.logs(job_id, after):
                    after = line.seq
                    kept.append(line.model_dump())
                    if not as_json:
                        typer.echo(line.text)
                state = (await consumer.status(job_id)).state
                if not follow_ or state in FINAL:
                    return state
                await asyncio.sleep(1)

    state = run_sync(go())
    if as_json:
        emit(True, {"job_id": job_id, "lines": kept}, "")
    elif not kept:  # silence would read as a hang or a lost log
        typer.echo(f"job {job_id} has no log lines (it is {state})", err=True)


@command(job_app, "results")
def results(
    env: Env,
    job_id: JobId,
    out: Annotated[Path | None, typer.Option(help="Folder [default: results/JOB].")] = None,
    unpack: Annotated[bool, typer.Option(help="Unpack the verified archive into out/.")] = True,
    as_json: Json = False,
) -> None:
    """Download the result archive, verify it against the provider's signed receipt, unpack."""

    async def go() -> Any:
        async with opened(env) as consumer:
            return await consumer.results(job_id, out or Path("results") / job_id, unpack)

    result = run_sync(go())
    data = {k: str(v) if isinstance(v, Path) else v for k, v in
            dataclasses.asdict(result).items()}  # fmt: skip
    emit(as_json, data,
         f"verified: sha256 {result.sha256} ({result.size} bytes) is what the provider signed "
         f"for {result.units} units ({ada(result.cost)}); archive {result.archive}"
         + (f", unpacked in {result.unpacked}" if result.unpacked else ""))  # fmt: skip


def money_back(env: Env, job_id: str, as_json: bool, kind: str, unsigned_tx: Path | None) -> None:
    """Refund or slash (`kind`): signed here, or left unsigned for a wallet."""

    async def go() -> Any:
        async with opened(env) as consumer:
            build = consumer.prepare_slash if kind == "slash" else consumer.prepare_refund
            prepared = await build(job_id)
            if unsigned_tx is not None:
                defer(env, consumer.key, prepared, unsigned_tx, as_json, job_id=job_id)
                return None
            return prepared.facts, await consumer.run(prepared)

    done = run_sync(go())
    if done is not None:
        report_money_back(as_json, kind, *done)


def report_money_back(as_json: bool, kind: str, facts: dict[str, Any], tx: Any) -> None:
    """What a refund or a slash did, once in a block."""
    what = "refunded with a slash of the provider's bond" if kind == "slash" else "refunded"
    why = facts.get("why")
    emit(as_json, {"job_id": facts["job_id"], "tx_id": tx.id.payload.hex(),
                   "fee": tx.transaction_body.fee, **({"why": why} if why else {})},
         f"{what}: transaction {tx.id.payload.hex()}" + (f" ({why})" if why else ""))  # fmt: skip


@command(job_app, "refund")
def refund(env: Env, job_id: JobId, unsigned_tx: UnsignedTx = None, as_json: Json = False) -> None:
    """Return the escrow to you once its deadline and settle window passed (chain time), or
    at once after its start deadline when the provider did not start the job."""
    money_back(env, job_id, as_json, "refund", unsigned_tx)


@command(job_app, "slash")
def slash(env: Env, job_id: JobId, unsigned_tx: UnsignedTx = None, as_json: Json = False) -> None:
    """Refund and take a share of the provider's bond: it accepted the job and never delivered."""
    money_back(env, job_id, as_json, "slash", unsigned_tx)


@command(job_app, "cancel")
def cancel(
    env: Env,
    job_id: JobId,
    wait_s: Annotated[
        int,
        typer.Option(
            "--wait", min=1, help="Seconds to wait for the provider's answer and the money."
        ),
    ] = 120,
    unsigned_tx: UnsignedTx = None,
    as_json: Json = False,
) -> None:
    """Take the job back: unlocked, it is dropped; not started, the escrow comes back now
    (the provider co-signs the Cancel); running, it is stopped and billed for what it used."""
    from consumer.sdk.cancel import cancel as cancel_job

    async def go() -> Any:
        async with opened(env) as consumer:
            step = (lambda _: None) if as_json else typer.echo
            wallet = None  # or where the provider-signed Cancel goes for the wallet's witness
            if unsigned_tx is not None:
                wallet = functools.partial(defer, env, consumer.key, path=unsigned_tx,
                                           as_json=as_json, job_id=job_id)  # fmt: skip
            return await cancel_job(consumer, job_id, wait_s, step, wallet)

    done = run_sync(go())
    if done.how != "pending":  # a pending one was told as it was written
        report_cancel(as_json, "cancel", {"job_id": job_id}, done)


def report_cancel(as_json: bool, kind: str, facts: dict[str, Any], done: Any) -> None:
    """How a cancel ended (`consumer.sdk.cancel.Cancelled`)."""
    from offchain.protocol.job.job_state import SETTLE_NEXT, JobState

    job_id = facts["job_id"]
    waited = "" if done.blocks is None else f", {done.blocks} block(s) after the request"
    back = (f"{ada(done.returned)} back to you in transaction {done.tx_id}{waited}"
            if done.state == JobState.SETTLED else
            f"{ada(done.returned)} comes back to you once it settles, not yet: {SETTLE_NEXT}; "
            f"`unchained job status {job_id} --watch` follows it")  # fmt: skip
    human = {
        "dropped": f"job {job_id} dropped: nothing was locked",
        "cancelled": f"cancelled: {ada(done.returned)} back to you ({ada(done.fee)} fee) in "
        f"transaction {done.tx_id}{waited}",
        "stopped": f"stopped and {done.state}: {done.units} units ({ada(done.cost)}) to the "
        f"provider, {back}" if done.units is not None else f"stopped: its receipt is not "
        f"signed yet; `unchained job status {job_id} --watch` follows it",
    }[done.how]  # fmt: skip
    emit(as_json, dataclasses.asdict(done), human)


@command(job_app, "list")
def list_jobs(
    env: Env,
    local: Annotated[bool, typer.Option("--local", help="Only this state directory's records "
                                        "(no market call).")] = False,
    as_json: Json = False,
) -> None:  # fmt: skip
    """Your jobs, oldest first: the ones recorded in this state directory merged with the ones
    the market knows for your key (its state; `where` says which of the two knows it)."""

    from consumer.sdk.spend import job_costs, or_none

    reader = None if local else market_reader(env)
    rows = merged_jobs(JobStore(env.state_dir).all(), reader.my_jobs(LIST_LIMIT) if reader else [])
    costs = job_costs(or_none(reader.get), rows) if reader else []
    for row, cost in zip(rows, costs, strict=True):
        row["cost"] = cost.as_json()
    if as_json:
        emit(True, rows, "")
        return
    from consumer.cli.table import render

    lines = []
    for row in rows:
        locked = "-" if row["lovelace"] is None else ada(row["lovelace"])
        paid = (
            [
                ada(row["cost"][k]) if row["cost"][k] is not None else "-"
                for k in ("due", "fee_allowance", "lock_fee")
            ]
            if "cost" in row
            else ["-"] * 3
        )
        lines.append([row["job_id"], local_time(row["created_ms"]), state_text(row),
                      row["gpu_model"] or "-", locked, *paid, row["escrow"] or "(not locked)",
                      row["where"]])  # fmt: skip
    typer.echo(render(("job", "created", "state", "GPU", "locked", "cost", "allowance",
                       "lock fee", "escrow", "where"), lines))  # fmt: skip


LIST_LIMIT = 1000


@command(job_app, "spend")
def spend(env: Env, as_json: Json = False) -> None:
    """What each of your jobs cost, one line each, with the total: paid to its provider, the
    fee allowance (not refunded), the lock's fee, what came back, and the net cost (your
    wallet's difference for the job), from the chain as the market's explorer indexes it."""
    from consumer.sdk.spend import SPEND_COLUMNS, job_costs, or_none, spend_row, spend_total

    reader = market_reader(env)
    rows = merged_jobs(JobStore(env.state_dir).all(), reader.my_jobs(LIST_LIMIT))
    costs = job_costs(or_none(reader.get), rows)
    total = spend_total(costs)
    if as_json:
        emit(True, {"jobs": [c.as_json() for c in costs], "total": total}, "")
        return
    from consumer.cli.table import render

    lines = [spend_row(cost) for cost in costs]
    lines.append(["total", f"{len(costs)} job(s)", *(ada(v) for v in total.values())])
    typer.echo(render(SPEND_COLUMNS, lines, title="what your jobs cost (ADA)"))


def state_text(row: dict[str, Any]) -> str:
    """The job's state, with how its run ended beside it unless it succeeded, or why it never
    ran (a refusal or a failure before the start: its escrow comes back at once)."""
    if row["outcome"] in (None, "succeeded"):
        reason = row.get("failure_reason")
        return f"{row['state']}: {reason}" if reason else row["state"] or "-"
    return f"{row['state']}: {describe(row['outcome'], row['exit_code'])}"


def merged_jobs(records: list["JobRecord"], remote: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per job id from the local records and the market's answer, oldest first; the
    local record's lock and escrow win (it is what this consumer signed), the market adds the
    state."""
    rows: dict[str, dict[str, Any]] = {}
    for job in remote:
        rows[job["id"]] = {
            "job_id": job["id"], "created_ms": job["created_at_ms"], "state": job["state"],
            "gpu_model": job["gpu_model"], "provider_id": job["provider_id"], "lovelace": None,
            "escrow": job["escrow"], "where": "market",
            "outcome": job["outcome"], "exit_code": job["exit_code"],
            "units": job["receipt_units"], "failure_reason": job["failure_reason"],
        }  # fmt: skip
    for record in records:
        known = rows.get(record.job_id)
        rows[record.job_id] = {
            "job_id": record.job_id, "created_ms": record.created_ms,
            "state": known["state"] if known else None, "gpu_model": record.gpu_model,
            "provider_id": record.provider_id, "lovelace": record.lovelace,
            "escrow": record.escrow, "where": "both" if known else "local",
            "outcome": known and known["outcome"], "exit_code": known and known["exit_code"],
            "units": known and known["units"],
            "failure_reason": known and known["failure_reason"],
        }  # fmt: skip
    return sorted(rows.values(), key=lambda row: row["created_ms"])


# --- offers --------------------------------------------------------------------------------


@command(offers_app, "search")
def search(
    env: Env,
    query: Annotated[
        str, typer.Argument(help="e.g. 'gpu_model=RTX_4090 vram>=24GiB price<=2ADA/h sort=price'")
    ] = "",
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    as_json: Json = False,
) -> None:
    """Offers that meet every term of QUERY and can take a job now."""

    found = market_reader(env).search_offers(query, limit)
    if as_json:
        emit(True, found, "")
        return
    if not found["offers"]:
        typer.echo(f"no offer matches ({found['total']} searched): {found['why_none']}")
        return
    from consumer.cli.table import render

    lines = []
    for offer in found["offers"]:
        t = offer["terms"]
        gpus = f"{t['gpu_count']} x {t['gpu_model']}" if t["gpu_count"] else "-"
        lines.append([offer["provider_id"][:16], gpus, str(t["vram_mib"]), str(t["cpu_cores"]),
                      str(t["memory_mib"]), str(t["disk_mib"]), ada(t["price_per_unit"] * 3600),
                      record_text(found.get("records", {}).get(offer["provider_id"]))])  # fmt: skip
    typer.echo(render(("provider", "GPU", "VRAM MiB", "cores", "memory MiB", "disk MiB",
                       "per hour", "record"), lines,
                      title=f"{found['matched']} of {found['total']} offers match"))  # fmt: skip


def record_text(record: dict[str, int] | None) -> str:
    """A provider's record in a table cell: "97% of 40 (1 refunded, 1 slashed)" or "new"."""
    if not record or record["delivered_percent"] < 0:
        return "new"
    judged = record["delivered"] + record["failed"] + record["refunded"]
    bad = [f"{record[k]} {k}" for k in ("failed", "refunded", "slashed") if record[k]]
    return f"{record['delivered_percent']}% of {judged}" + (f" ({', '.join(bad)})" if bad else "")


# --- wallet --------------------------------------------------------------------------------


@command(wallet_app, "new")
def wallet_new(
    env: Env,
    mnemonic: Annotated[bool, typer.Option(help="A 24-word mnemonic instead of a .skey.")] = False,
    as_json: Json = False,
) -> None:
    """Make a new key at --key (never over an existing one) and print its address."""
    from consumer.sdk.keys import new_wallet

    made = new_wallet(env.key, mnemonic=mnemonic, network=env.pycardano_network)
    emit(as_json, {"key": str(env.key), "address": str(made.address)},
         f"new key in {env.key} (keep it secret, back it up)\naddress {made.address}")  # fmt: skip


@command(wallet_app, "address")
def wallet_address(env: Env, as_json: Json = False) -> None:
    """The address of --key: fund it to pay for jobs; refunds come back to it."""
    address = str(request_key(env).address)
    emit(as_json, {"address": address}, address)


@command(wallet_app, "fund")
def wallet_fund(
    env: Env,
    address: Annotated[str, typer.Argument(help="The address to pay (bech32, addr_test1...).")],
    ada_amount: Annotated[
        str, typer.Option("--ada", help="How much, in ADA (up to 6 decimals).")
    ] = "100",
    as_json: Json = False,
) -> None:
    """On the devnet only: pay ADDRESS from the devnet's faucet (a real transaction; its
    `devnet/fund` method). Refused on any other network and by any other chain's Ogmios."""
    from offchain.chain.ogmios import METHOD_NOT_FOUND, OgmiosError, request

    if env.chain.name != "devnet":
        fail(as_json, "NotADevnet", f"wallet fund works on the devnet only, not on {env.chain}")
    try:
        lovelace = parse_lovelace(f"{ada_amount}ADA")
    except ValueError as exc:
        fail(as_json, "BadAmount", f"--ada: {exc}", field="ada")
    try:
        sent = run_sync(request(env.ogmios_url, "devnet/fund",
                                {"address": address, "lovelace": lovelace}))  # fmt: skip
    except OgmiosError as exc:
        if exc.code == METHOD_NOT_FOUND:
            fail(as_json, "NotADevnet", f"{env.ogmios_url} is not the devnet (it has no "
                 "devnet/fund): pay the address from a wallet or the network's faucet")  # fmt: skip
        raise
    tx_id = sent["transaction"]["id"]
    emit(as_json, {"address": address, "lovelace": lovelace, "tx": tx_id},
         f"sent {ada(lovelace)} to {address} (tx {tx_id}; in the next block)")  # fmt: skip


@command(wallet_app, "balance")
def wallet_balance(env: Env, as_json: Json = False) -> None:
    """What --key's address holds on chain, what its open escrows lock and what its open
    channels hold."""
    from consumer.sdk.spend import locked_in_escrows
    from offchain.chain.ogmios import utxo_lovelace

    key = request_key(env)
    address = str(key.address)
    lovelace = utxo_lovelace(env.ogmios_url, {"addresses": [address]})
    locked = locked_in_escrows(env.ogmios_url, JobStore(env.state_dir).all())
    channels = held_in_channels(env, key)
    total = lovelace + locked + channels
    emit(as_json, {"address": address, "lovelace": lovelace, "locked_lovelace": locked,
                   "channels_lovelace": channels, "total_lovelace": total},
         f"{ada(lovelace)} spendable at {address}\n{ada(locked)} locked in open escrows "
         f"(your jobs recorded here, on chain now)\n{ada(channels)} in open channels (yours "
         f"recorded here, on chain now: what is not claimed comes back at the close)\n"
         f"{ada(total)} in all")  # fmt: skip


def held_in_channels(env: Env, key: "RequestKey | ConsumerKey") -> int:
    """Lovelace on chain now in the channels recorded here that are not drained."""
    from consumer.sdk.channel_store import ChannelStore
    from consumer.sdk.request_key import RequestKey, bech32
    from consumer.sdk.spend import in_channels
    from offchain.protocol.tx.deployment_channel import channel_address_bytes, channel_script

    ids = [r.channel_id for r in ChannelStore(env.state_dir).all() if not r.closed_tx_id]
    if not ids:
        return 0
    network_id, channel_hash = channel_script(env.deployment)
    renter = key.address_bytes if isinstance(key, RequestKey) else key.address.to_primitive()
    script = channel_address_bytes(network_id, channel_hash, renter)
    address = bech32("addr" if network_id == 1 else "addr_test", script)
    return in_channels(env.ogmios_url, address, ids)

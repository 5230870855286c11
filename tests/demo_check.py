"""What a run of `unchained demo` printed, checked: every escrow it locked was settled in one
batch, by the provider's daemon (the demo's jobs pay less than the ledger's minimum output,
which the market leaves to their provider: nobody tops anything up), the verified result is
the archive on disk, the balances add up to the lovelace, and the chain the demo left behind
(replayed by a devnet of the test's own, on a free port) holds exactly the printed balances.
Shared by the README test and the --jobs test."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

from devnet.process import DevnetProcess
from offchain.chain.context import chain_context

LOVELACE = r"(-?[\d,]+\.\d{6}) ADA"
HEX64 = r"[0-9a-f]{64}"
FUNDS = 100_000_000  # each consumer's and the provider's, from the faucet
MAX_UNITS = 120  # the demo's jobs run up to 120 s (unchained.demo.consumers.MAX_DURATION_S)


def lovelace(text: str) -> int:
    return int(text.replace(",", "").replace(".", ""))


def balances(out: str, party: str) -> list[int]:
    """Before, after and change of one party, from the demo's balance table."""
    row = re.search(rf"^   {party} +{LOVELACE} +{LOVELACE} +\+?{LOVELACE}$", out, re.MULTILINE)
    assert row, f"no balance row for {party}:\n{out}"
    return [lovelace(value) for value in row.groups()]


def chain_balances(data_dir: Path, out: str, parties: list[str]) -> dict[str, int]:
    """Each party's lovelace on the chain the demo left in `data_dir`, at its printed address."""
    devnet = DevnetProcess(data_dir / "devnet").start()
    try:
        context = chain_context(devnet.url)
        found = {}
        for party in parties:
            address = re.search(rf"^   {party} +(addr_test1\w+)$", out, re.MULTILINE)[1]
            found[party] = sum(utxo.output.amount.coin for utxo in context.utxos(address))
        return found
    finally:
        devnet.stop()


def check_settled(data_dir: Path, out: str, jobs: int) -> None:
    """All `jobs` escrows settled in one batch by the provider; the numbers add up; the chain
    agrees."""
    consumers = [f"consumer-{n}" for n in range(1, jobs + 1)]
    assert f"deployment file {data_dir / 'deployment.json'}" in out  # absolute
    assert re.search(rf"deploy: tx {HEX64} \(block \d+, fee", out)
    escrows = re.findall(rf"escrow ({HEX64}#0) holds", out)
    assert len(set(escrows)) == jobs, out
    settles = re.findall(rf"settle: tx ({HEX64}) \(block \d+, fee {LOVELACE}\) spends (\d+) "
                         r"escrow\(s\) in one batch, paid by the (\w+)'s wallet", out)  # fmt: skip
    assert [(count, by) for *_, count, by in settles] == [(str(jobs), "provider")], out
    settle_fee = lovelace(settles[0][1])
    assert re.search(rf"provider funded with 100\.000000 ADA .*: tx {HEX64}", out)

    due = allowances = 0
    for consumer in consumers:
        assert re.search(rf"{consumer} funded with 100\.000000 ADA .*: tx {HEX64}", out)
        units, price, *amounts = re.search(
            rf"{consumer}'s escrow: (\d+) units x ([\d,]+) lovelace = {LOVELACE} to the "
            rf"provider, {LOVELACE} back to {consumer}, {LOVELACE} fee allowance to the "
            r"provider \(it paid the settle fee\)", out).groups()  # fmt: skip
        units, price = int(units), int(price.replace(",", ""))
        paid, back, kept = (lovelace(n) for n in amounts)
        lock_fee, locked = (lovelace(n) for n in re.search(
            rf"{consumer} lock: tx {HEX64} \(fee {LOVELACE}\); escrow {HEX64}#0 holds {LOVELACE}",
            out).groups())  # fmt: skip
        allowance, deposit = (lovelace(n) for n in re.search(
            rf"^   {consumer}: job .* fee allowance {LOVELACE} \(not refunded\), return deposit "
            rf"{LOVELACE} \(always refunded\)$", out, re.M).groups())  # fmt: skip
        assert locked == price * MAX_UNITS + allowance + deposit and deposit > 0
        assert units > 0 and paid == units * price and kept == allowance  # no top-up
        assert back == price * (MAX_UNITS - units) + deposit  # the deposit came back
        assert f"{consumer}'s escrow: the provider's pay is below the ledger's minimum" in out
        assert balances(out, consumer)[2] == back - locked - lock_fee
        due += paid
        allowances += allowance
        job, sha256 = re.search(
            rf"{consumer}: sha256 ({HEX64}) matches the receipt .* in (\S+)/out$", out, re.M
        ).groups()[::-1]  # fmt: skip
        result = Path(job)
        assert hashlib.sha256((result / "result.tar").read_bytes()).hexdigest() == sha256
        assert json.loads((result / "receipt.json").read_text())["result_hash"] == sha256
    earned = due + allowances - settle_fee
    assert balances(out, "provider") == [FUNDS, FUNDS + earned, earned]
    assert balances(out, "market")[2] == 0  # it settled nothing: it paid nothing
    assert "Checked: the provider earned exactly its receipts" in out
    assert re.search(r"^demo took \d+ s$", out, re.MULTILINE), out

    parties = ["provider", *consumers, "market"]
    printed = {party: balances(out, party)[1] for party in parties}
    assert chain_balances(data_dir, out, parties) == printed
    check_join(data_dir, out)


def check_join(data_dir: Path, out: str) -> None:
    """The settings printed for a second renter and a second provider name this demo's market,
    chain and deployment file (which exists)."""
    market = re.search(r"^   market   (http://\S+) \(log", out, re.M)[1]
    ogmios = re.search(r"^   (ws://\S+) \(\w+ blocks\), its chain in", out, re.M)[1]
    lines = re.findall(r"^      export (.+)$", out, re.M)
    assert len(lines) == 2, out
    for line in lines:
        env = dict(pair.split("=", 1) for pair in shlex.split(line))
        urls = (env.get("UNCHAINED_CONSUMER_MARKET_URL") or env["UNCHAINED_PROVIDER_MARKET_URL"],
                env["UNCHAINED_OGMIOS_URL"])  # fmt: skip
        assert urls == (market, ogmios)
        assert env["UNCHAINED_DEPLOYMENT"] == str(data_dir / "deployment.json")
        assert Path(env["UNCHAINED_DEPLOYMENT"]).is_file()
    assert re.search(r"unchained wallet fund .*--ada 100", out) and "provider run" in out


def leftovers(marker: str) -> list[str]:
    """Command lines of running processes that mention `marker` (the demo's data dir)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(marker.encode() in arg for arg in args):
            found.append(b" ".join(args).decode(errors="replace"))
    return found

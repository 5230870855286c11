"""What a run of `unchained demo` printed, checked: every escrow it locked was settled by the
market in one batch, the verified result is the archive on disk, the balances add up to the
lovelace, and the chain the demo left behind (replayed by a devnet of the test's own, on a
free port) holds exactly the printed balances. Shared by the README test and the --jobs test."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

from offchain.chain.context import chain_context
from offchain.devnet.process import DevnetProcess

LOVELACE = r"(-?[\d,]+\.\d{6}) ADA"
HEX64 = r"[0-9a-f]{64}"
MIN_UTXO_AT_MOST = 1_500_000  # a tagged payout to a key address needs about 1.09 ADA
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
    """All `jobs` escrows settled in one batch; the numbers add up; the chain agrees."""
    consumers = [f"consumer-{n}" for n in range(1, jobs + 1)]
    assert f"deployment file {data_dir / 'deployment.json'}" in out  # absolute
    assert re.search(rf"deploy: tx {HEX64} \(block \d+, fee", out)
    escrows = re.findall(rf"escrow ({HEX64}#0) holds", out)
    assert len(set(escrows)) == jobs, out
    settles = re.findall(rf"settle: tx ({HEX64}) \(block \d+, fee {LOVELACE}\) spends (\d+) ", out)
    assert [count for *_, count in settles] == [str(jobs)], out  # one batch holds them all
    settle_fee = lovelace(settles[0][1])

    due = topped_up = allowances = 0
    for consumer in consumers:
        assert re.search(rf"{consumer} funded with 100\.000000 ADA .*: tx {HEX64}", out)
        units, price = (int(n.replace(",", "")) for n in re.search(
            rf"{consumer}'s escrow: (\d+) units x ([\d,]+) lovelace", out).groups())  # fmt: skip
        lock_fee, locked = (lovelace(n) for n in re.search(
            rf"{consumer} lock: tx {HEX64} \(fee {LOVELACE}\); escrow {HEX64}#0 holds {LOVELACE}",
            out).groups())  # fmt: skip
        allowance = lovelace(re.search(
            rf"^   {consumer}: job .* fee allowance {LOVELACE} \(not refunded\)$", out, re.M)[1])
        owed = lovelace(
            re.search(rf"{consumer}'s escrow: .* {LOVELACE} back to {consumer},", out)[1])
        assert locked == price * MAX_UNITS + allowance and owed == price * (MAX_UNITS - units)
        paid, back = (raised(out, consumer, party, was)
                      for party, was in (("the provider", units * price), (consumer, owed)))
        assert units > 0 and balances(out, consumer)[2] == back - locked - lock_fee
        assert units * price <= paid <= max(units * price, MIN_UTXO_AT_MOST)
        due += paid
        allowances += allowance
        topped_up += paid - units * price + back - owed
        job, sha256 = re.search(
            rf"{consumer}: sha256 ({HEX64}) matches the receipt .* in (\S+)/out$", out, re.M
        ).groups()[::-1]  # fmt: skip
        result = Path(job)
        assert hashlib.sha256((result / "result.tar").read_bytes()).hexdigest() == sha256
        assert json.loads((result / "receipt.json").read_text())["result_hash"] == sha256
    assert balances(out, "provider") == [0, due, due]
    assert balances(out, "market")[2] == allowances - settle_fee - topped_up
    assert "Checked: the provider earned exactly its receipts" in out
    assert re.search(r"^demo took \d+ s$", out, re.MULTILINE), out

    parties = ["provider", *consumers, "market"]
    printed = {party: balances(out, party)[1] for party in parties}
    assert chain_balances(data_dir, out, parties) == printed
    check_join(data_dir, out)


def raised(out: str, consumer: str, party: str, owed: int) -> int:
    """What `party` got out of `consumer`'s escrow: `owed`, or the min-UTxO it was raised to."""
    found = re.search(rf"{consumer}'s escrow: {party}'s payout is raised to the ledger's "
                      rf"min-UTxO, {LOVELACE}", out)  # fmt: skip
    return lovelace(found[1]) if found else owed


def check_join(data_dir: Path, out: str) -> None:
    """The settings printed for a second renter and a second provider name this demo's market,
    chain and deployment file (which exists)."""
    market = re.search(r"^   market   (http://\S+) \(log", out, re.M)[1]
    ogmios = re.search(r"^   (ws://\S+), its chain in", out, re.M)[1]
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

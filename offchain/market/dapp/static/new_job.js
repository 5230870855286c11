// New job: the spec from the form or pasted YAML, checked by the market with the CLI's own
// messages; the signed request and its quote; then the lock built from the wallet's UTxOs,
// decoded and compared with the quote here, signed by the wallet and submitted.
import { ada, list, onClick, perHour, say, wallet } from "./app.js";
import { bytesToHex, decode, hexToBytes } from "./cbor.js";
import { funds, review, witness } from "./review.js";
import { WalletError, refusal, signedFetch } from "./wallet.js";

const form = document.getElementById("job-form");
let quote = null;
let built = null;
const connected = await wallet();

function fromForm() {
  const value = (name) => form.elements[name].value.trim();
  const number = (name) => Number(value(name));
  return {
    image: value("image"),
    command: value("command").split("\n").map((line) => line.trim()).filter(Boolean),
    resources: { cpu_cores: number("cpu_cores"), memory_mib: number("memory_mib"),
      disk_mib: number("disk_mib"), gpus: number("gpus") },
    max_duration_s: number("max_duration_s"),
    max_price_lovelace: Math.round(Number(value("max_price_ada")) * 1e6),
  };
}

// The market's reading of the spec text (YAML or JSON), as `unchained job submit` reads it.
async function checked(text) {
  const answer = await fetch("/api/app/spec/check", {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text }),
  });
  if (!answer.ok) throw new WalletError(await refusal(answer));
  return answer.json();
}

function showQuote(q) {
  const link = document.getElementById("job-link");
  link.textContent = q.job_id;
  link.href = `/app/jobs/${q.job_id}`;
  document.getElementById("per-hour").textContent = perHour(q.price_per_unit);
  document.getElementById("allowance").textContent = ada(q.fee_allowance);
  document.getElementById("least-cost").textContent =
    `${ada(q.fee_allowance)} + the lock's network fee, even if it never runs`;
  document.getElementById("max-cost").textContent = ada(q.max_cost);
  document.getElementById("lock-amount").textContent =
    `${ada(q.lock_lovelace)} (${ada(q.refund_deposit)} of it always comes back)`;
  document.getElementById("quote-box").hidden = false;
}

onClick(document.getElementById("quote"), async () => {
  if (!connected) throw new WalletError("Connect a wallet first (top right).");
  const yaml = document.getElementById("yaml").value.trim();
  const result = await checked(yaml || JSON.stringify(fromForm()));
  list(document.getElementById("problems"), result.messages);
  if (!result.ok) { say("The job spec needs fixing.", true); return; }
  quote = await signedFetch(connected.api, "POST", "/jobs",
    { spec: result.spec, consumer_address: connected.address });
  showQuote(quote);
  say("Quoted. Review the lock before you sign it.");
});

// The lovelace the wallet holds (getBalance: a coin or [coin, assets]).
async function held(api) {
  const value = decode(await api.getBalance());
  return BigInt(Array.isArray(value) ? value[0] : value);
}

onClick(document.getElementById("build"), async () => {
  const { api } = connected;
  const have = await held(api);
  if (have < BigInt(quote.lock_lovelace)) {
    throw new WalletError(`Not enough ADA: your wallet holds ${ada(have)}, the lock needs ` +
      `${ada(quote.lock_lovelace)} and the network fee.`);
  }
  built = await signedFetch(api, "POST", `/jobs/${quote.job_id}/lock/build`, await funds(api));
  // compared with the quote shown above, never with what the build answer says of itself
  const consumer = bytesToHex(hexToBytes(await api.getChangeAddress()).slice(1, 29));
  const terms = { consumer, price_per_unit: quote.price_per_unit, max_units: quote.max_units,
    deadline_ms: quote.deadline_ms, settle_window_ms: quote.settle_window_ms,
    fee_allowance: quote.fee_allowance };
  const differs = await review(api, built.transaction, { lovelace: quote.lock_lovelace, terms });
  document.getElementById("least-cost").textContent =
    `${ada(BigInt(quote.fee_allowance) + BigInt(built.fee))}, even if it never runs ` +
    `(${ada(quote.fee_allowance)} fee allowance + ${ada(built.fee)} lock fee)`;
  document.getElementById("sign").hidden = differs.length !== 0;
  if (!differs.length) say("It pays the escrow exactly the quoted amount; the rest comes back to you.");
});

onClick(document.getElementById("sign"), async () => {
  const witnesses = await witness(connected.api, built.transaction);
  await signedFetch(connected.api, "POST", `/jobs/${quote.job_id}/lock`,
    { transaction: built.transaction, witness_set: witnesses });
  say("Locked: the market waits for the chain to take it.");
  window.location.assign(`/app/jobs/${quote.job_id}`);
});

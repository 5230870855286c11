// New job: the spec from the form or pasted YAML, checked by the market with the CLI's own
// messages; the signed request and its quote; then the lock built from the wallet's UTxOs,
// decoded and compared with the quote here, signed by the wallet and submitted.
import { ada, el, list, onClick, perHour, say, wallet } from "./app.js";
import { compare, view } from "./txview.js";
import { WalletError, marketConfig, plainly, refusal, signedFetch } from "./wallet.js";

const form = document.getElementById("job-form");
const problems = document.getElementById("problems");
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

// The spec the market reads from this text (YAML or JSON), or the CLI's messages for it.
async function checked(text) {
  const answer = await fetch("/api/app/spec/check", {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text }),
  });
  if (!answer.ok && answer.status !== 422) throw new WalletError(await refusal(answer));
  const data = await answer.json();
  return data;
}

function showQuote(q) {
  document.getElementById("job-link").textContent = q.job_id;
  document.getElementById("job-link").href = `/app/jobs/${q.job_id}`;
  document.getElementById("per-hour").textContent = perHour(q.price_per_unit);
  document.getElementById("allowance").textContent = ada(q.fee_allowance);
  document.getElementById("max-cost").textContent = ada(q.max_cost);
  document.getElementById("lock-amount").textContent =
    `${ada(q.lock_lovelace)} (${ada(q.refund_deposit)} of it always comes back)`;
  document.getElementById("quote-box").hidden = false;
}

onClick(document.getElementById("quote"), async () => {
  if (!connected) throw new WalletError("Connect a wallet first (top right).");
  const yaml = document.getElementById("yaml").value.trim();
  const result = await checked(yaml || JSON.stringify(fromForm()));
  list(problems, result.problems || []);
  if (!result.spec) { say("The job spec needs fixing.", true); return; }
  quote = await signedFetch(connected.api, "POST", "/jobs",
    { spec: result.spec, consumer_address: connected.address });
  showQuote(quote);
  say("Quoted. Review the lock before you sign it.");
});

onClick(document.getElementById("build"), async () => {
  const { api } = connected;
  const utxos = await api.getUtxos();
  built = await signedFetch(api, "POST", `/jobs/${quote.job_id}/lock/build`,
    { utxos, change_address: await api.getChangeAddress() });
  const tx = view(built.transaction);
  const config = await marketConfig();
  const rows = tx.outputs.map((o) => {
    const what = o.scriptHash === config.escrow_hash ? "the job's escrow" : "back to you";
    const row = el("tr");
    row.append(el("td", o.address, { class: "hash" }), el("td", ada(o.lovelace)),
      el("td", `${what}${o.datum ? " (with datum)" : ""}${o.assets ? " + tokens" : ""}`));
    return row;
  });
  document.getElementById("outputs").replaceChildren(...rows);
  document.getElementById("fee").textContent = ada(tx.fee);
  const own = [await api.getChangeAddress(), ...(await api.getUsedAddresses())];
  const differs = compare(tx, { escrowHash: config.escrow_hash, lovelace: quote.lock_lovelace }, own);
  list(document.getElementById("differs"), differs);
  document.getElementById("review").hidden = false;
  document.getElementById("sign").hidden = differs.length !== 0;
  if (differs.length) {
    say("Not signed: this transaction is not what the market quoted.", true);
  } else {
    say("The transaction pays the escrow exactly the quoted amount; the rest comes back to you.");
  }
});

onClick(document.getElementById("sign"), async () => {
  let witnesses;
  try {
    witnesses = await connected.api.signTx(built.transaction, true);
  } catch (error) {
    throw new WalletError(plainly(error, "sign"));
  }
  await signedFetch(connected.api, "POST", `/jobs/${quote.job_id}/lock`,
    { transaction: built.transaction, witness_set: witnesses });
  say("Locked: the market waits for the chain to take it.");
  window.location.assign(`/app/jobs/${quote.job_id}`);
});


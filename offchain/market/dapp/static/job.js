// One job: its state, polled from the explorer's public JSON; the result downloaded with a
// signed request and checked here (its sha256 against the provider's signed receipt, and that
// receipt's signature by the escrow's provider key); cancel and refund as the CLI does them.
import { el, onClick, say, wallet } from "./app.js";
import { bytesToHex } from "./cbor.js";
import { payload, sha256, verifies } from "./receipt.js";
import { funds, review, witness } from "./review.js";
import { WalletError, marketConfig, signedFetch } from "./wallet.js";

const jobId = document.getElementById("job-id").dataset.job;
const connected = await wallet();
const EVERY_MS = 2000;
const UNLOCKED = ["requested", "quoted"];
const LOCKED = ["funded", "accepted", "running"];
const ENDED = ["settled", "cancelled", "refunded", "slashed", "expired"];
let shown = null;
let pending = null; // the transaction under review and what signing it does

async function refresh() {
  const answer = await fetch(`/api/explorer/jobs/${jobId}`);
  if (!answer.ok) { say(`No job ${jobId} on this market.`, true); return; }
  shown = await answer.json();
  const { job, receipt } = shown;
  document.getElementById("state").textContent = job.state;
  document.getElementById("outcome").textContent =
    job.outcome ? `${job.outcome}${job.exit_code === null ? "" : ` (exit ${job.exit_code})`}` : "—";
  document.getElementById("next").textContent = job.next || "—"; // e.g. the settle after completed
  document.getElementById("escrow").textContent = job.escrow_ref || "—";
  document.getElementById("result").textContent = job.result_sha256 || "—";
  document.getElementById("download").hidden = !(connected && receipt && job.result_sha256);
  // the chain's clock decides when a refund may be built: the market says so if too early
  document.getElementById("cancel").hidden = !connected || ![...UNLOCKED, ...LOCKED].includes(job.state);
  document.getElementById("refund").hidden = !connected || !job.escrow_ref || ENDED.includes(job.state);
  if (job.cancel) document.getElementById("cancel-state").textContent = job.cancel.words;
}

// Shows `hex` for review; the Sign button then runs `then` (which has the wallet sign).
async function propose(hex, then) {
  const differs = await review(connected.api, hex, { lovelace: null });
  pending = differs.length ? null : { hex, then };
  document.getElementById("sign").hidden = differs.length !== 0;
  if (!differs.length) say("Every output of it pays your wallet. Sign it to go on.");
}

onClick(document.getElementById("sign"), async () => {
  await pending.then();
  document.getElementById("review").hidden = true; // signed and sent: what is left is the job
  pending = null;
});

const WAIT_MS = 90_000;

// The provider's witness on the renter's Cancel, as GET /jobs/{id}/cancel shows it once signed.
async function providerSigned() {
  const until = Date.now() + WAIT_MS;
  while (Date.now() < until) {
    const view = await signedFetch(connected.api, "GET", `/jobs/${jobId}/cancel`);
    if (view.state === "signed" && view.transaction) return view.transaction;
    if (view.state === "refused") throw new WalletError(`The provider refused to cancel: ${view.refusal}`);
    if (view.state === "stopping") return null;
    await new Promise((done) => setTimeout(done, 1000));
  }
  throw new WalletError("The provider did not answer the cancel: the request stays with the market.");
}

onClick(document.getElementById("cancel"), async () => {
  const { job } = shown;
  if (UNLOCKED.includes(job.state)) {
    await signedFetch(connected.api, "POST", `/jobs/${jobId}/cancel`, {});
    say("Cancelled: nothing was locked.");
    return;
  }
  const built = await signedFetch(connected.api, "POST", `/jobs/${jobId}/cancel/build`, await funds(connected.api));
  await propose(built.transaction, async () => {
    await signedFetch(connected.api, "POST", `/jobs/${jobId}/cancel`, { transaction: built.transaction });
    say("Cancel requested: waiting for the provider's signature.");
    const signed = await providerSigned();
    if (signed === null) {
      say("The job had started: the provider stopped it, and its receipt bills what it used.");
      return;
    }
    if ((await review(connected.api, signed, { lovelace: null })).length) return; // changed since
    const witnesses = await witness(connected.api, signed);
    await signedFetch(connected.api, "POST", `/jobs/${jobId}/cancel/submit`,
      { transaction: signed, witness_set: witnesses });
    say("Cancelled: the escrow comes back to you once the chain takes it.");
  });
});

onClick(document.getElementById("refund"), async () => {
  const built = await signedFetch(connected.api, "POST", `/jobs/${jobId}/refund/build`,
    { ...(await funds(connected.api)), slash: false });
  await propose(built.transaction, async () => {
    const witnesses = await witness(connected.api, built.transaction);
    await signedFetch(connected.api, "POST", `/jobs/${jobId}/refund/submit`,
      { transaction: built.transaction, witness_set: witnesses });
    say("Refund submitted: the escrow comes back to you once the chain takes it.");
  });
});

onClick(document.getElementById("download"), async () => {
  const { job, receipt } = shown;
  const config = await marketConfig();
  const answer = await signedFetch(connected.api, "GET", `/jobs/${jobId}/result`, undefined, true);
  const bytes = new Uint8Array(await answer.arrayBuffer());
  const digest = bytesToHex(await sha256(bytes));
  const signed = await payload(config.network_id, config.settle_hash, job.escrow_ref, receipt);
  const good = await verifies(receipt.provider_vkey, receipt.signature, signed);
  const verdict = document.getElementById("verdict");
  verdict.hidden = false;
  if (digest !== receipt.result_hash) {
    verdict.textContent = `The download's sha256 ${digest} is not the receipt's ${receipt.result_hash}: do not trust it.`;
    verdict.className = "message bad";
  } else if (!good) {
    verdict.textContent = "The receipt's signature does not verify with the escrow's provider key: do not trust it.";
    verdict.className = "message bad";
  } else {
    verdict.textContent = `Verified: sha256 ${digest} is the result the provider signed for (${bytes.length} bytes).`;
    verdict.className = "message";
    const link = el("a", "Save the result", { download: `${jobId}.tar.gz`, "data-testid": "save" });
    link.href = URL.createObjectURL(new Blob([bytes]));
    verdict.append(" ", link);
  }
});

await refresh();
setInterval(refresh, EVERY_MS);

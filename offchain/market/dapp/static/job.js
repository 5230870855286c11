// One job: its state, polled from the explorer's public JSON; the result downloaded with a
// signed request and checked here (its sha256 against the provider's signed receipt, and that
// receipt's signature by the escrow's provider key); cancel and refund as the CLI does them.
import { el, onClick, say, wallet } from "./app.js";
import { bytesToHex } from "./cbor.js";
import { payload, sha256, verifies } from "./receipt.js";
import { marketConfig, signedFetch } from "./wallet.js";

const jobId = document.getElementById("job-id").dataset.job;
const connected = await wallet();
const EVERY_MS = 2000;
let shown = null;

async function refresh() {
  const answer = await fetch(`/api/explorer/jobs/${jobId}`);
  if (!answer.ok) { say(`No job ${jobId} on this market.`, true); return; }
  shown = await answer.json();
  const { job, receipt } = shown;
  document.getElementById("state").textContent = job.state;
  document.getElementById("outcome").textContent =
    job.outcome ? `${job.outcome}${job.exit_code === null ? "" : ` (exit ${job.exit_code})`}` : "—";
  document.getElementById("escrow").textContent = job.escrow_ref || "—";
  document.getElementById("result").textContent = job.result_sha256 || "—";
  document.getElementById("download").hidden = !(connected && receipt && job.result_sha256);
}

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

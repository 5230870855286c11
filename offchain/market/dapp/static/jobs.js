// My jobs: the connected wallet's jobs from the explorer's public JSON, polled.
import { el, perHour, wallet, when } from "./app.js";
import { bytesToHex, hexToBytes } from "./cbor.js";

const connected = await wallet();
const EVERY_MS = 2000;

async function refresh(consumerId) {
  const answer = await fetch(`/api/explorer/jobs?consumer=${consumerId}`);
  if (!answer.ok) return;
  const { jobs } = await answer.json();
  const rows = jobs.map((job) => {
    const row = el("tr", null, { "data-job": job.id });
    const link = el("a", job.id.slice(0, 12), { href: `/app/jobs/${job.id}`, class: "hash" });
    const state = job.outcome && job.outcome !== "succeeded" ? `${job.state} (${job.outcome})` : job.state;
    const [first, second] = [el("td"), el("td")];
    first.append(link, el("span", when(job.updated_at_ms), { class: "when" }));
    second.append(el("span", state, { class: "state" }));
    row.append(first, second, el("td", job.price_per_unit === null ? "—" : perHour(job.price_per_unit)));
    return row;
  });
  document.getElementById("jobs").replaceChildren(...rows);
  document.getElementById("none").hidden = rows.length !== 0;
  document.getElementById("live-status").textContent = `Updated ${when(Date.now())}.`;
}

if (connected) {
  const consumerId = bytesToHex(hexToBytes(await connected.api.getChangeAddress()).slice(1, 29));
  await refresh(consumerId);
  setInterval(() => refresh(consumerId), EVERY_MS);
}

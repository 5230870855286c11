// My endpoints: the deployments (endpoints and pods) providers report running on the
// wallet's channels, from the explorer's public JSON, polled; each links to its explorer page.
import { ada, el, facts, pill, wallet, when } from "./app.js";

const connected = await wallet();
const EVERY_MS = 3000;

function card(d) {
  const item = el("li", null, { "data-deployment": String(d.id) });
  const head = el("div", null, { class: "head" });
  head.append(el("a", d.name, { href: `/explorer/deployments/${d.id}`, class: "name" }), pill(d.state),
    el("span", d.kind, { class: "when" }));
  const claimed = d.channel_claimed === null ? "—" : `${ada(d.channel_claimed)} (${d.channel_state})`;
  item.append(head, facts([
    ...(d.reason ? [["Reason", d.reason, { class: "reason" }]] : []),
    ["Requests", String(d.requests), { class: "requests" }],
    ["Seconds run", `${d.seconds_run} s`, { class: "seconds" }],
    ["Served", ada(d.lovelace), { class: "served" }],
    ["Channel", d.channel, { class: "hash" }],
    ["Claimed from it", claimed, { class: "claimed" }],
  ]));
  return item;
}

async function refresh(address) {
  const answer = await fetch(`/api/explorer/channels?renter=${encodeURIComponent(address)}`);
  if (!answer.ok) return;
  const { channels } = await answer.json();
  const lists = await Promise.all(channels.map(async (c) => {
    const found = await fetch(`/api/explorer/deployments?channel=${c.id}`);
    return found.ok ? (await found.json()).deployments : [];
  }));
  const deployments = lists.flat().sort((a, b) => b.created_ms - a.created_ms);
  document.getElementById("endpoints").replaceChildren(...deployments.map(card));
  document.getElementById("none").hidden = deployments.length !== 0;
  document.getElementById("live-status").textContent = `Updated ${when(Date.now())}.`;
}

if (connected) {
  await refresh(connected.address);
  setInterval(() => refresh(connected.address), EVERY_MS);
}

// My endpoints: the deployments (endpoints and pods) providers report running on the
// wallet's channels, from the explorer's public JSON, polled; each links to its explorer page.
import { ada, el, wallet, when } from "./app.js";

const connected = await wallet();
const EVERY_MS = 3000;

function row(d) {
  const tr = el("tr", null, { "data-deployment": String(d.id) });
  const name = el("td");
  name.append(el("a", d.name, { href: `/explorer/deployments/${d.id}`, class: "name" }),
    el("span", `${d.kind} on ${d.channel.slice(0, 12)}…`, { class: "when" }));
  const state = el("td");
  state.append(el("span", d.state, { class: "state" }));
  if (d.reason) state.append(el("span", d.reason, { class: "when reason" }));
  const use = el("td");
  use.append(el("span", `${d.requests} requests`, { class: "requests" }),
    el("span", `${d.seconds_run} s run`, { class: "when seconds" }));
  const paid = el("td");
  paid.append(el("span", `${ada(d.lovelace)} served`, { class: "served" }),
    el("span", d.channel_claimed === null ? "channel not indexed" : `${ada(d.channel_claimed)} claimed from the channel`,
      { class: "when claimed" }));
  tr.append(name, state, use, paid);
  return tr;
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
  document.getElementById("endpoints").replaceChildren(...deployments.map(row));
  document.getElementById("none").hidden = deployments.length !== 0;
  document.getElementById("live-status").textContent = `Updated ${when(Date.now())}.`;
}

if (connected) {
  await refresh(connected.address);
  setInterval(() => refresh(connected.address), EVERY_MS);
}

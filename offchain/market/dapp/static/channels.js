// My channels: the wallet's payment channels from the explorer's public JSON (polled), and
// their moves built by the market from the wallet's own UTxOs: open (to a provider chosen from
// the online offers with a gateway, its terms from its signed offer), top up, start the close
// and drain once the close period is over. Each transaction is decoded and compared here
// before the wallet signs it, as a job's lock is.
import { ada, el, facts, onClick, perHour, pill, say, wallet, when } from "./app.js";
import { funds, review, witness } from "./review.js";
import { WalletError, marketConfig, signedFetch } from "./wallet.js";

const connected = await wallet();
const config = await marketConfig();
const EVERY_MS = 2000;
const ADA = 1_000_000;
const MOST_RETURN_DEPOSIT = 5n * 1_000_000n; // an open adds the channel output's minimum UTxO
const cards = document.getElementById("channels");
let rows = new Map(); // channel id -> the explorer's row
let shownJson = "";
let pending = null; // the transaction under review and what it is

function lovelace(text, what) {
  const value = Number(String(text).trim());
  if (!Number.isFinite(value) || value <= 0 || value > 45e9) throw new WalletError(`${what}: give an amount of ADA above 0`);
  return Math.round(value * ADA);
}

// --- the channel list -----------------------------------------------------------------------

function actions(channel) {
  const box = el("div", null, { class: "actions" });
  if (channel.state === "open") {
    box.append(
      el("input", null, { class: "top-up-amount", inputmode: "decimal", value: "2",
        "aria-label": `ADA to add to channel ${channel.id}` }),
      el("button", "Top up", { type: "button", "data-action": "top-up" }),
      el("button", "Close", { type: "button", "data-action": "close" }));
  } else if (channel.state === "closing") {
    box.append(el("button", "Drain", { type: "button", "data-action": "drain" }));
  }
  return box;
}

function card(channel) {
  const item = el("li", null, { "data-channel": channel.id });
  const head = el("div", null, { class: "head" });
  head.append(el("a", channel.id.slice(0, 16), { href: `/explorer/channels/${channel.id}`, class: "hash" }),
    pill(channel.state), el("strong", `${ada(channel.remaining)} left`, { class: "remaining" }));
  item.append(head, facts([
    ["Provider", channel.provider_id, { class: "hash" }],
    ["Put in", ada(channel.funded)], ["Claimed", ada(channel.claimed)],
    ["Close period", `${channel.close_period_ms / 1000} s`],
    ...(channel.state === "closing" ? [["Drain from", when(channel.closing_at_ms)]] : []),
  ]), actions(channel));
  return item;
}

async function refresh() {
  const answer = await fetch(`/api/explorer/channels?renter=${encodeURIComponent(connected.address)}`);
  if (!answer.ok) return;
  const { channels } = await answer.json();
  document.getElementById("live-status").textContent = `Updated ${when(Date.now())}.`;
  const json = JSON.stringify(channels);
  if (json === shownJson) return; // unchanged: keep what is typed in the cards
  shownJson = json;
  rows = new Map(channels.map((c) => [c.id, c]));
  cards.replaceChildren(...channels.map(card));
  document.getElementById("none").hidden = channels.length !== 0;
}

// --- offers with a gateway ------------------------------------------------------------------

let offers = [];

// The provider's own words: its offer's body as it signed it (the market's parse if not JSON).
function signedTerms(offer) {
  try { return JSON.parse(offer.body); } catch { return offer.terms; }
}

function showTerms() {
  const offer = offers[Number(document.getElementById("offer").value)];
  const box = document.getElementById("terms-box");
  if (!offer) { box.hidden = true; return; }
  const t = signedTerms(offer);
  const perRequest = t.request_price === undefined || t.request_price === null ? "—" : `at least ${ada(t.request_price)}`;
  // llm endpoints: lovelace a token, read as LLM prices are compared (per million tokens)
  const perToken = Array.isArray(t.token_prices)
    ? `at least ${ada(BigInt(t.token_prices[0]) * 1000000n)} in, ${ada(BigInt(t.token_prices[1]) * 1000000n)} out, per million tokens`
    : "—";
  const hash = { class: "hash" };
  document.getElementById("terms").replaceChildren(...facts([
    ["Provider", offer.provider_id, hash], ["Gateway", t.gateway_url, hash],
    ["Per request", perRequest], ["Per token", perToken], ["Per second", perHour(t.price_per_unit)],
    ["Paid to", t.payout_address, hash],
  ]).childNodes);
  box.hidden = false;
}

async function loadOffers() {
  const answer = await fetch("/offers?limit=1000");
  const select = document.getElementById("offer");
  if (!answer.ok) { say("The market's offers could not be read.", true); return; }
  const seen = new Set();
  offers = (await answer.json()).offers.filter((o) => o.terms.gateway_url && !seen.has(o.provider_id) && seen.add(o.provider_id));
  select.replaceChildren(...offers.map((o, i) => el("option",
    `${o.terms.gateway_url} · ${o.provider_id.slice(0, 10)}…`, { value: String(i) })));
  if (!offers.length) select.append(el("option", "No provider with a gateway is online", { value: "" }));
  document.getElementById("open").disabled = !offers.length;
  showTerms();
}

// --- building, reviewing, signing -----------------------------------------------------------

// Shows the built transaction decoded; `expected` as review.js takes it; `problems`: what
// the page found wrong beyond it. Sign is offered only when nothing differs.
async function propose(built, expected, words, problems = []) {
  const differs = await review(connected.api, built.transaction,
    { scriptHash: config.channel_hash, name: "channel", ...expected });
  const all = [...problems, ...differs];
  if (problems.length) {
    const list = document.getElementById("differs");
    list.prepend(...problems.map((p) => el("li", p)));
    list.hidden = false;
    if (!differs.length) say("Not signed: this transaction is not what you asked for.", true);
  }
  pending = all.length ? null : built;
  document.getElementById("sign").hidden = all.length !== 0;
  if (!all.length) say(words);
}

onClick(document.getElementById("sign"), async () => {
  const built = pending;
  if (!built) return;
  const witnessSet = await witness(connected.api, built.transaction);
  const sent = await signedFetch(connected.api, "POST", "/api/app/channels/submit",
    { transaction: built.transaction, witness_set: witnessSet });
  pending = null;
  document.getElementById("review").hidden = true;
  document.getElementById("sign").hidden = true;
  say(`Submitted: transaction ${sent.tx_id}. The list shows it once the chain has it.`);
});

onClick(document.getElementById("open"), async () => {
  const offer = offers[Number(document.getElementById("offer").value)];
  if (!offer) throw new WalletError("Choose a provider first");
  const deposit = lovelace(document.getElementById("deposit").value, "Deposit");
  const seconds = Number(document.getElementById("close-period").value);
  if (!Number.isInteger(seconds) || seconds <= 0) throw new WalletError("Close period: give a whole number of seconds above 0");
  const key = document.getElementById("iou-key").value.trim().toLowerCase();
  if (key && !/^[0-9a-f]{64}$/.test(key)) throw new WalletError("IOU key: 64 hex digits (an ed25519 verification key), or empty for your wallet's");
  const body = { provider_id: offer.provider_id, deposit, close_period_ms: seconds * 1000,
    funds: await funds(connected.api) };
  if (key) body.renter_vkey = key;
  const built = await signedFetch(connected.api, "POST", "/api/app/channels/open/build", body);
  const extra = BigInt(built.lovelace) - BigInt(deposit);
  const problems = extra < 0n || extra > MOST_RETURN_DEPOSIT
    ? [`the channel would hold ${ada(built.lovelace)} for a deposit of ${ada(deposit)}`] : [];
  await propose(built, { lovelace: built.lovelace },
    `It puts ${ada(deposit)} and a return deposit of ${ada(extra)} (back to you at the drain) ` +
    `into the channel to ${offer.provider_id}; every other output pays your wallet. Sign it to open.`,
    problems);
});

document.getElementById("open-form").addEventListener("submit", (event) => event.preventDefault());
document.getElementById("offer").addEventListener("change", showTerms);

// Each card's buttons: top up, start the close, drain.
cards.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-action]");
  if (!button || button.disabled) return;
  const item = button.closest("[data-channel]");
  const channel = rows.get(item.dataset.channel);
  if (!channel) return;
  button.disabled = true;
  try {
    const base = `/api/app/channels/${channel.id}`;
    if (button.dataset.action === "top-up") {
      const adding = lovelace(item.querySelector(".top-up-amount").value, "Top-up");
      const built = await signedFetch(connected.api, "POST", `${base}/top-up/build`,
        { lovelace: adding, funds: await funds(connected.api) });
      await propose(built, { lovelace: BigInt(channel.remaining) + BigInt(adding) },
        `The channel goes from ${ada(channel.remaining)} to ${ada(BigInt(channel.remaining) + BigInt(adding))}; every other output pays your wallet. Sign it to top up.`);
    } else {
      const built = await signedFetch(connected.api, "POST", `${base}/close/build`, await funds(connected.api));
      if (built.step === "drain") {
        await propose(built, { lovelace: null },
          `It drains the channel: its ${ada(channel.remaining)} come back to your wallet, less the network fee. Sign it to drain.`);
      } else {
        await propose(built, { lovelace: channel.remaining },
          `It starts the close: the channel keeps its ${ada(channel.remaining)} for the provider's last claims for ` +
          `${channel.close_period_ms / 1000} s, then you drain it. Sign it to start the close.`);
      }
    }
  } catch (error) {
    say(error instanceof WalletError ? error.message : `Something failed: ${error.message || error}`, true);
  } finally {
    button.disabled = false;
  }
});

if (connected) {
  await Promise.all([refresh(), loadOffers()]);
  setInterval(refresh, EVERY_MS);
} else {
  document.getElementById("open").disabled = true;
}

// What every renter page shares: messages, safe DOM building (text only, never HTML from
// data), the connected wallet shown in the header, and prices as people read them.
import { address } from "./bech32.js";
import { hexToBytes } from "./cbor.js";
import { WalletError, reconnect } from "./wallet.js";
import { ada } from "./txview.js";

export { ada };

export function say(text, bad = false) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.classList.toggle("bad", bad);
  box.hidden = !text;
  if (text) box.scrollIntoView({ block: "nearest" });
}

export function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  return node;
}

export function list(target, lines) {
  target.replaceChildren(...lines.map((line) => el("li", line)));
  target.hidden = lines.length === 0;
}

export function perHour(lovelacePerSecond) {
  return `${ada(BigInt(lovelacePerSecond) * 3600n)} per hour`;
}

export function when(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "—";
}

// The wallet chosen on /app, connected again, with its bech32 change address in the header;
// null (and a link to /app) when none is chosen or it refuses.
export async function wallet() {
  const status = document.getElementById("wallet-status");
  try {
    const api = await reconnect();
    if (!api) {
      status.replaceChildren(el("a", "Connect a wallet", { href: "/app" }));
      return null;
    }
    const own = address(hexToBytes(await api.getChangeAddress()));
    status.textContent = `${own.slice(0, 14)}…${own.slice(-6)}`;
    status.title = own;
    return { api, address: own };
  } catch (error) {
    say(error instanceof WalletError ? error.message : String(error), true);
    status.replaceChildren(el("a", "Connect a wallet", { href: "/app" }));
    return null;
  }
}

// Runs `action` with the button disabled, showing its error plainly.
export function onClick(button, action) {
  button.addEventListener("click", async (event) => {
    event.preventDefault();
    button.disabled = true;
    try {
      await action();
    } catch (error) {
      say(error instanceof WalletError ? error.message : `Something failed: ${error.message || error}`, true);
    } finally {
      button.disabled = false;
    }
  });
}

// A <dl class="facts"> of [name, value, ddAttrs?] pairs (values as text).
export function facts(pairs, attrs = {}) {
  const list = el("dl", null, { class: "facts", ...attrs });
  for (const [name, value, dd = {}] of pairs) list.append(el("dt", name), el("dd", value, dd));
  return list;
}

// A state as the explorer shows one (a pill coloured by state).
export function pill(state) {
  return el("span", state, { class: `state state-${state}` });
}

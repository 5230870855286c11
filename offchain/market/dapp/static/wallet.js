// The CIP-30 wallet the person chose, its errors in plain words, and requests to the market
// signed with `signData` (the CIP-8 payload the market verifies: method, path, body digest,
// nonce, time and the market's identity).
import { bytesToHex } from "./cbor.js";

const CHOSEN = "unchained.wallet";

export class WalletError extends Error {}

// A CIP-30 error (APIError, TxSignError, DataSignError: {code, info}) as a person reads it.
export function plainly(error, doing) {
  const code = error && error.code;
  const info = (error && (error.info || error.message)) || String(error);
  const words = {
    sign: { 1: "the wallet could not sign", 2: "you declined to sign" },
    data: { 1: "the wallet could not sign", 2: "the wallet cannot sign with that address",
      3: "you declined to sign" },
    api: { "-1": "the wallet did not understand the request", "-2": "the wallet failed",
      "-3": "the wallet refused the connection", "-4": "the wallet's account changed: connect again" },
  }[doing] || {};
  const said = words[code] || words[String(code)] || (error instanceof WalletError ? info : null);
  return said ? `${said[0].toUpperCase()}${said.slice(1)}${info && info !== said ? ` (${info})` : ""}.`
    : `The wallet failed: ${info}`;
}

export function available() {
  const found = window.cardano || {};
  return Object.keys(found).filter((key) => found[key] && typeof found[key].enable === "function")
    .map((key) => ({ key, name: String(found[key].name || key), icon: found[key].icon }));
}

let config = null;
export async function marketConfig() {
  if (!config) config = await (await fetch("/app/config.json")).json();
  return config;
}

// The chosen wallet's API, enabled; its network checked against the market's before any use.
export async function connect(key) {
  const wallet = (window.cardano || {})[key];
  if (!wallet) throw new WalletError("No wallet of that name in this browser");
  let api;
  try {
    api = await wallet.enable();
  } catch (error) {
    throw new WalletError(plainly(error, "api"));
  }
  const network = await api.getNetworkId();
  const expected = (await marketConfig()).network_id;
  if (network !== expected) {
    localStorage.removeItem(CHOSEN);
    throw new WalletError(`Your wallet is on ${network === 1 ? "mainnet" : "a test network"} ` +
      `(network id ${network}); this market is on network id ${expected}. Switch networks in the wallet.`);
  }
  localStorage.setItem(CHOSEN, key);
  return api;
}

export function chosen() { return localStorage.getItem(CHOSEN); }

export async function reconnect() {
  const key = chosen();
  return key ? connect(key) : null;
}

async function sha256Hex(bytes) {
  return bytesToHex(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)));
}

function nonce() {
  const raw = crypto.getRandomValues(new Uint8Array(18));
  return btoa(String.fromCharCode(...raw)).replaceAll("+", "-").replaceAll("/", "_");
}

// A request to the market signed by the wallet's change address; the answer's JSON, or a
// WalletError with the market's reason.
export async function signedFetch(api, method, path, body, raw = false) {
  const content = body === undefined ? new Uint8Array() : new TextEncoder().encode(JSON.stringify(body));
  const fields = {
    body_sha256: await sha256Hex(content), domain: "unchained/request/v1",
    market: (await marketConfig()).market, method, nonce: nonce(), path, timestamp_ms: Date.now(),
  };
  const payload = JSON.stringify(fields); // the keys above are in sorted order
  let signed;
  try {
    signed = await api.signData(await api.getChangeAddress(), bytesToHex(new TextEncoder().encode(payload)));
  } catch (error) {
    throw new WalletError(plainly(error, "data"));
  }
  const headers = { "X-Unchained-Signature": signed.signature, "X-Unchained-Key": signed.key };
  if (body !== undefined) headers["content-type"] = "application/json";
  const answer = await fetch(path, { method, headers, body: body === undefined ? undefined : content });
  if (!answer.ok) throw new WalletError(await refusal(answer));
  return raw ? answer : answer.json();
}

export async function refusal(answer) {
  try {
    const data = await answer.json();
    const detail = Array.isArray(data.detail) ? data.detail : [{ msg: String(data.detail) }];
    return `The market refused (${answer.status}): ` +
      detail.map((d) => (d.loc && d.loc.length ? `${d.loc.join(".")}: ` : "") + d.msg).join("; ");
  } catch {
    return `The market answered ${answer.status}`;
  }
}

// What an unsigned transaction does, read from its own bytes (never from the market's word):
// inputs, outputs (address, lovelace, other assets, datum), fee, and anything beyond a plain
// payment (mint, withdrawals, certificates, votes, proposals); `compare` checks it against the
// quote the page showed before anything is signed.
import { Tagged, bytesToHex, decode } from "./cbor.js";
import { address } from "./bech32.js";

const EXTRAS = { 4: "certificates", 5: "withdrawals", 9: "mint", 19: "votes", 20: "proposals",
  22: "a treasury donation" };

function items(set) {
  const value = set instanceof Tagged ? set.value : set; // Conway sets may carry tag 258
  return value || [];
}

function output(raw) {
  let addr, amount, datum = null, inline = null;
  if (Array.isArray(raw)) {
    [addr, amount] = raw;
    if (raw.length > 2) datum = "hash";
  } else {
    addr = raw.get(0);
    amount = raw.get(1);
    const option = raw.get(2);
    if (option) datum = option[0] === 0 ? "hash" : "inline";
    if (option && option[0] === 1) inline = option[1].value; // tag 24: the datum's CBOR
  }
  const coin = Array.isArray(amount) ? amount[0] : amount;
  const assets = Array.isArray(amount) && amount[1] instanceof Map && amount[1].size > 0;
  return {
    address: address(addr), addressHex: bytesToHex(addr), lovelace: BigInt(coin), assets, datum,
    scriptHash: addr[0] >> 4 <= 7 && (addr[0] >> 4) % 2 === 1 ? bytesToHex(addr.slice(1, 29)) : null,
    inline,
  };
}

export function view(hex) {
  const tx = decode(hex);
  const body = Array.isArray(tx) ? tx[0] : tx;
  if (!(body instanceof Map)) throw new Error("not a transaction");
  const extras = Object.entries(EXTRAS)
    .filter(([key]) => { const v = body.get(Number(key)); return v !== undefined && items(v).length !== 0 && !(v instanceof Map && v.size === 0); })
    .map(([, name]) => name);
  return {
    inputs: items(body.get(0)).map(([id, index]) => `${bytesToHex(id)}#${index}`),
    outputs: items(body.get(1)).map(output),
    fee: BigInt(body.get(2)),
    extras,
  };
}

// An escrow datum's terms (offchain/protocol/ledger/types.py EscrowDatum: Constr 0 of consumer and
// provider addresses, provider key, price per unit, max units, deadline, settle window, job id,
// fee allowance), named as the quote names them; the consumer as its payment key hash.
export function escrowTerms(inline) {
  const fields = decode(inline).value;
  const number = (i) => BigInt(fields[i]);
  return {
    consumer: bytesToHex(fields[0].value[0].value[0]),
    price_per_unit: number(3), max_units: number(4), deadline_ms: number(5),
    settle_window_ms: number(6), fee_allowance: number(8),
  };
}

const ADA = 1_000_000n;
// `12.500000 ADA`: all 6 decimals, as the CLI and the explorer write amounts.
export function ada(lovelace) {
  const n = BigInt(lovelace);
  const frac = ((n < 0n ? -n : n) % ADA).toString().padStart(6, "0");
  return `${n < 0n ? "-" : ""}${(n < 0n ? -n : n) / ADA}`.replace(/\B(?=(\d{3})+$)/g, ",") + `.${frac} ADA`;
}

// What the escrow's datum holds that the quote (`terms`: its figures and the consumer's key
// hash) does not.
function termsDiffer(output, terms) {
  let held;
  try {
    held = escrowTerms(output.inline);
  } catch {
    return ["the escrow's datum is not an escrow's"];
  }
  return Object.entries(terms).filter(([name, value]) => String(held[name]) !== String(value))
    .map(([name, value]) => `the escrow's ${name} is ${held[name]}, the quote says ${value}`);
}

// What differs from the quote: exactly one output to the escrow script (`escrowHash`; a
// channel's when `name` says so) holding `lovelace` (none when `lovelace` is null: a cancel, a
// refund or a drain pays only the wallet), with `terms` the escrow datum's terms too, every
// other output to one of `own` (the wallet's address bytes, hex), no other assets and nothing
// beyond a payment. An empty list: the transaction is what was quoted.
export function compare(tx, { escrowHash, lovelace, terms, name = "escrow" }, own) {
  const problems = tx.extras.map((name) => `it carries ${name}`);
  const escrow = tx.outputs.filter((o) => o.scriptHash === escrowHash);
  if (lovelace === null) {
    if (escrow.length) problems.push(`it pays into ${name === "escrow" ? "an escrow" : `the ${name}`}`);
  } else if (escrow.length !== 1) {
    problems.push(`it pays the ${name} ${escrow.length} times, not once`);
  } else {
    if (escrow[0].lovelace !== BigInt(lovelace)) {
      problems.push(`the ${name} gets ${ada(escrow[0].lovelace)}, the quote says ${ada(lovelace)}`);
    }
    if (terms) problems.push(...termsDiffer(escrow[0], terms));
  }
  const mine = new Set(own.map((a) => a.toLowerCase()));
  for (const o of tx.outputs) {
    if (o.scriptHash === escrowHash) continue;
    if (!mine.has(o.addressHex)) problems.push(`${ada(o.lovelace)} goes to ${o.address}, not your wallet`);
    if (o.assets) problems.push(`an output to ${o.address} carries tokens`);
  }
  return problems;
}

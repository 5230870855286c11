// Before the wallet signs: the transaction decoded here (table #outputs, #fee), compared with
// what the page expects (list #differs); signing is refused while anything differs.
import { ada, el, list, say } from "./app.js";
import { compare, view } from "./txview.js";
import { WalletError, marketConfig, plainly } from "./wallet.js";

// Shows `hex` and returns what differs from `expected` ({lovelace}: the escrow's quoted
// amount, null for none; `terms`: what its datum must hold; a channel's transaction names its
// script: {scriptHash, name: "channel"}).
export async function review(api, hex, expected) {
  const tx = view(hex);
  const config = await marketConfig();
  const own = [await api.getChangeAddress(), ...(await api.getUsedAddresses())];
  const mine = new Set(own.map((a) => a.toLowerCase()));
  const script = expected.scriptHash || config.escrow_hash;
  const name = expected.name || "escrow";
  const rows = tx.outputs.map((o) => {
    const what = o.scriptHash === script ? (name === "escrow" ? "to the job's escrow" : `into the ${name}`)
      : mine.has(o.addressHex) ? "to you" : "to someone else";
    const row = el("li");
    row.append(el("strong", ada(o.lovelace)),
      ` ${what}${o.datum ? " (with datum)" : ""}${o.assets ? " + tokens" : ""}`,
      el("span", o.address, { class: "hash address" }));
    return row;
  });
  document.getElementById("outputs").replaceChildren(...rows);
  document.getElementById("fee").textContent = ada(tx.fee);
  const differs = compare(tx, { ...expected, escrowHash: script, name }, own);
  list(document.getElementById("differs"), differs);
  document.getElementById("review").hidden = false;
  if (differs.length) say("Not signed: this transaction is not what the market quoted.", true);
  return differs;
}

// The wallet's witness set for `hex` (signTx(tx, true)), its refusal in plain words.
export async function witness(api, hex) {
  try {
    return await api.signTx(hex, true);
  } catch (error) {
    throw new WalletError(plainly(error, "sign"));
  }
}

// What a build may spend: the wallet's UTxOs (as many as the market takes) and its change address.
export async function funds(api) {
  const { max_utxos: most } = await marketConfig();
  const utxos = (await api.getUtxos()) || [];
  return { utxos: utxos.slice(0, most), change_address: await api.getChangeAddress() };
}

// A provider's signed receipt checked in the browser (offchain/protocol/job/receipt.py): the
// payload is the on-chain Claim of the one escrow, whose note is sha256(result ‖ evidence),
// and its Ed25519 signature by the escrow's provider key is verified with WebCrypto.
import { Indefinite, Tagged, encode, hexToBytes } from "./cbor.js";

const CLAIM_DOMAIN = new TextEncoder().encode("UNCHAINED/claim/v1");
const constr0 = (fields) => new Tagged(121, new Indefinite(fields)); // Plutus Constr 0

export async function sha256(bytes) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
}

export async function payload(networkId, settleHash, escrowRef, receipt) {
  const [txId, index] = escrowRef.split("#");
  const joined = new Uint8Array(64);
  joined.set(hexToBytes(receipt.result_hash));
  joined.set(hexToBytes(receipt.evidence_hash), 32);
  const note = await sha256(joined);
  const claims = new Indefinite([constr0([hexToBytes(txId), Number(index)]), receipt.units]);
  return encode(constr0([CLAIM_DOMAIN, networkId, hexToBytes(settleHash), note, claims]));
}

export async function verifies(vkeyHex, signatureHex, message) {
  const key = await crypto.subtle.importKey("raw", hexToBytes(vkeyHex), { name: "Ed25519" }, false, ["verify"]);
  return crypto.subtle.verify({ name: "Ed25519" }, key, hexToBytes(signatureHex), message);
}

// Bech32 (BIP 173) encoding of Cardano addresses (CIP-19): the human part from the header.
const CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l";
const GENERATORS = [0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3];

function polymod(values) {
  let check = 1;
  for (const v of values) {
    const top = check >>> 25;
    check = ((check & 0x1ffffff) << 5) ^ v;
    GENERATORS.forEach((g, i) => { if ((top >>> i) & 1) check ^= g; });
  }
  return check >>> 0;
}

function expand(hrp) {
  const codes = Array.from(hrp, (c) => c.charCodeAt(0));
  return [...codes.map((c) => c >> 5), 0, ...codes.map((c) => c & 31)];
}

function toWords(bytes) {
  const words = [];
  let acc = 0;
  let bits = 0;
  for (const b of bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 5) { bits -= 5; words.push((acc >> bits) & 31); }
  }
  if (bits) words.push((acc << (5 - bits)) & 31);
  return words;
}

export function encode(hrp, bytes) {
  const words = toWords(bytes);
  const mod = polymod([...expand(hrp), ...words, 0, 0, 0, 0, 0, 0]) ^ 1;
  const check = [0, 1, 2, 3, 4, 5].map((i) => (mod >>> (5 * (5 - i))) & 31);
  return hrp + "1" + [...words, ...check].map((w) => CHARSET[w]).join("");
}

// The bech32 of an address's bytes: "addr"/"stake" by its kind, "_test" off mainnet.
export function address(bytes) {
  const kind = bytes[0] >> 4;
  const mainnet = (bytes[0] & 15) === 1;
  const prefix = kind === 14 || kind === 15 ? "stake" : "addr";
  return encode(mainnet ? prefix : `${prefix}_test`, bytes);
}
